package main

import (
	"os/exec"
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
