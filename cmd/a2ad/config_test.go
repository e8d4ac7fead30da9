package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `a2ad serve` refuses, before it starts anything, a configuration with
// unknown keys, naming every one with its line and the key meant.
func TestServeRefusesEveryUnknownKey(t *testing.T) {
	out, err := exec.Command(bin, "serve", "--config", "../../testdata/bad/config/unknown_keys_everywhere.yaml",
		"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0").CombinedOutput()
	if err == nil {
		t.Fatalf("serve started: %s", out)
	}
	want := "config ../../testdata/bad/config/unknown_keys_everywhere.yaml: " +
		"line 3: unknown key http-addr (did you mean http_addr?); " +
		"line 5: unknown key nats_tls.cert_fle (did you mean nats_tls.cert_file?); " +
		"line 8: unknown key agents[0].evidence_key (did you mean agents[0].evidence_keys?); " +
		"line 11: unknown key agents[0].limits.max_conections (did you mean agents[0].limits.max_connections?); " +
		"line 12: unknown key retention_days"
	if !strings.Contains(string(out), want) {
		t.Errorf("serve output lacks\n%s\n%s", want, out)
	}
	if strings.Contains(string(out), "a2ad serving") || strings.Contains(string(out), "daemon.Config") {
		t.Errorf("serve output names a Go type or served:\n%s", out)
	}
}

// `a2ad token mint --scope` refuses a scope a2ad does not know, with the
// one meant, and prints no token.
func TestTokenMintRefusesUnknownScope(t *testing.T) {
	for scope, want := range map[string]string{
		"a2a:raed":             `token mint: --scope: unknown scope "a2a:raed" (did you mean a2a:read?); a2ad knows a2a:read, a2a:delegate, a2a:admin`,
		"a2a:read a2a:delegat": `token mint: --scope: unknown scope "a2a:delegat" (did you mean a2a:delegate?); a2ad knows a2a:read, a2a:delegate, a2a:admin`,
		" ":                    "token mint: --scope is empty: name one or more of a2a:read, a2a:delegate, a2a:admin",
	} {
		cmd := exec.Command(bin, "token", "mint", "--sub", "h", "--scope", scope, "--data-dir", t.TempDir())
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err == nil {
			t.Errorf("--scope %q: minted %s", scope, stdout.String())
			continue
		}
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--scope %q: stderr %q, want %q", scope, stderr.String(), want)
		}
		if stdout.Len() != 0 {
			t.Errorf("--scope %q: stdout %q, want nothing", scope, stdout.String())
		}
	}
}

// `a2ad token mint` mints every scope of every --scope, separated by
// single spaces (RFC 6749 §3.3), however the operator spaced them; a
// tab never reaches the claim.
func TestTokenMintScopesAreEverySpaceSeparated(t *testing.T) {
	key := writeEd25519Key(t)
	for name, args := range map[string][]string{
		"repeated":        {"--scope", "a2a:read", "--scope", "a2a:delegate"},
		"tab":             {"--scope", "a2a:read\ta2a:delegate"},
		"newline, spaces": {"--scope", "  a2a:read\n a2a:delegate  "},
		"repeated twice":  {"--scope", "a2a:read a2a:delegate", "--scope", "a2a:read"},
	} {
		out, err := exec.Command(bin, append([]string{"token", "mint", "--sub", "h", "--key", key, "--issuer", "https://idp.example.com",
			"--audience", "https://a2ad.example.com/mcp"}, args...)...).Output()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := mintedClaims(t, string(out)).Scope; got != "a2a:read a2a:delegate" {
			t.Errorf("%s %q: scope claim %q, want %q", name, args, got, "a2a:read a2a:delegate")
		}
	}
}

// `a2ad token mint` refuses scopes it would mint wrongly, saying what is
// meant: a bare name, commas between scopes, a blank audience.
func TestTokenMintRefusesMisspeltScopesAndBlankAudience(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"bare name": {[]string{"--scope", "read"}, `token mint: --scope: unknown scope "read" (did you mean a2a:read?); a2ad knows a2a:read, a2a:delegate, a2a:admin`},
		"commas": {[]string{"--scope", "a2a:read,a2a:delegate"},
			`token mint: --scope "a2a:read,a2a:delegate": scopes are separated by spaces, not commas: --scope "a2a:read a2a:delegate", or repeat --scope for each`},
		"blank audience": {[]string{"--audience", " "},
			"token mint: --audience is blank: give the resource identifier the daemon verifies in aud (RFC 8707), e.g. https://a2ad.example.com/mcp, or leave the flag out for the daemon on --data-dir"},
		"empty audience": {[]string{"--audience", ""},
			"token mint: --audience is blank: give the resource identifier the daemon verifies in aud (RFC 8707), e.g. https://a2ad.example.com/mcp, or leave the flag out for the daemon on --data-dir"},
	} {
		cmd := exec.Command(bin, append([]string{"token", "mint", "--sub", "h", "--key", writeEd25519Key(t), "--issuer", "https://idp.example.com"}, c.args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err == nil || stdout.Len() != 0 {
			t.Errorf("%s: minted %q", name, stdout.String())
			continue
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: stderr %q, want %q", name, stderr.String(), c.want)
		}
	}
}

// writeEd25519Key writes a fresh Ed25519 private key, PEM, and returns its file.
func writeEd25519Key(t *testing.T) string {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	f := filepath.Join(t.TempDir(), "idp.key")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// mintedClaims are the claims of a compact JWS, unverified.
func mintedClaims(t *testing.T, token string) struct{ Scope, Aud string } {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %q", token)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Scope, Aud string }
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// `a2ad serve` names every fault of its configuration file in one
// message, each with its line, before it starts anything: the evidence
// schema name too, against the schemas the flags give.
func TestServeNamesEveryConfigFaultAtOnce(t *testing.T) {
	path := "../../testdata/bad/config/every_fault_at_once.yaml"
	out, err := exec.Command(bin, "serve", "--config", path,
		"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0").CombinedOutput()
	if err == nil {
		t.Fatalf("serve started: %s", out)
	}
	want := "config " + path + ": line 2: unknown key htp_addr (did you mean http_addr?); " +
		`line 3: max_deadline_seconds: want a whole number of seconds, got "ten"; ` +
		`line 5: log.level "verbose": want debug, info, warn or error; ` +
		`line 6: log.format "xml": want text or json; ` +
		"line 8: tracing.sample_ratio: want a fraction from 0 (no trace) to 1 (every trace), got 2; " +
		`line 10: principal.scopes: want a list, e.g. [a2a:read, a2a:delegate], got "a2a:read a2a:delegate"; ` +
		"line 12: agent_limits.max_subscriptions 8: want at least 16; " +
		`line 18: agents[0].evidence_schemas[assess_refund_risk]: no host schema named "refund_evidenc" in the built-in schemas (did you mean refund_evidence?)`
	if !strings.Contains(string(out), want) {
		t.Errorf("serve output lacks\n%s\n%s", want, out)
	}
	if strings.Contains(string(out), "a2ad serving") {
		t.Errorf("serve served:\n%s", out)
	}
}

// `a2ad serve` refuses a configuration file with a second YAML document
// rather than ignore it, and takes an empty file as every default.
func TestServeRefusesASecondDocumentAndTakesAnEmptyFile(t *testing.T) {
	path := "../../testdata/bad/config/second_document.yaml"
	out, err := exec.Command(bin, "serve", "--config", path,
		"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0").CombinedOutput()
	want := "config " + path + ": line 4: --- starts a second YAML document: a2ad reads one document per file and would ignore this one; put its keys in the first and remove the --- line"
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("serve: %v, output lacks\n%s\n%s", err, want, out)
	}
	empty := filepath.Join(t.TempDir(), "a2ad.yaml")
	if err := os.WriteFile(empty, []byte("# nothing configured yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, nil, "--config", empty, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0")
	resp, err := http.Get(d.HTTP + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a2ad with an empty configuration file: /healthz %d, want 200", resp.StatusCode)
	}
}
