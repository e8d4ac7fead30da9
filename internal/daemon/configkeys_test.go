package daemon_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
)

// A configuration file is refused for every key a2ad does not know, and
// for an empty audience or an unknown scope, with the key, its line and
// the known key the operator most likely meant — all faults at once.
func TestLoadConfigRefusals(t *testing.T) {
	dir := "../../testdata/bad/config"
	for _, tc := range []struct {
		file string
		want []daemon.KeyError
	}{
		{"unknown_key_typo.yaml", []daemon.KeyError{{Key: "htp_addr", Line: 4, Suggestion: "http_addr"}}},
		{"unknown_keys_everywhere.yaml", []daemon.KeyError{
			{Key: "http-addr", Line: 3, Suggestion: "http_addr"},
			{Key: "nats_tls.cert_fle", Line: 5, Suggestion: "nats_tls.cert_file"},
			{Key: "agents[0].evidence_key", Line: 8, Suggestion: "agents[0].evidence_keys"},
			{Key: "agents[0].limits.max_conections", Line: 11, Suggestion: "agents[0].limits.max_connections"},
			{Key: "retention_days", Line: 12},
		}},
		{"empty_audience.yaml", []daemon.KeyError{{Key: "auth.audience", Line: 5,
			Reason: "empty: give the resource identifier hosts' tokens must name in aud (RFC 8707), e.g. https://a2ad.example.com/mcp, or leave the key out for the default, the URL of a2ad's /mcp"}}},
		{"scope_typo.yaml", []daemon.KeyError{{Key: "principal.scopes[1]", Line: 4,
			Reason: `unknown scope "a2a:delegat" (did you mean a2a:delegate?); a2ad knows a2a:read, a2a:delegate, a2a:admin`}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			_, err := daemon.LoadConfig(path)
			var fe *daemon.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("LoadConfig: %v, want a *daemon.FileError", err)
			}
			if len(fe.Errs) != len(tc.want) {
				t.Fatalf("%d faults, want %d: %v", len(fe.Errs), len(tc.want), err)
			}
			for i, e := range fe.Errs {
				var ke *daemon.KeyError
				if !errors.As(e, &ke) || *ke != tc.want[i] {
					t.Errorf("fault %d: %#v, want %#v", i, e, tc.want[i])
				}
			}
		})
	}
	// What the operator reads, in full, for the issue's own example.
	_, err := daemon.LoadConfig(filepath.Join(dir, "unknown_key_typo.yaml"))
	if want := "config " + filepath.Join(dir, "unknown_key_typo.yaml") + ": line 4: unknown key htp_addr (did you mean http_addr?)"; err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// A configuration built in code (not read from a file) is checked at
// Start too: an unknown scope is refused before anything starts.
func TestStartRefusesUnknownScope(t *testing.T) {
	cfg := daemon.Config{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:-1",
		Principal: daemon.PrincipalConfig{Scopes: []string{"a2a:read", "a2a:raed"}}}
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err == nil {
		d.Stop()
		t.Fatal("Start accepted scope a2a:raed")
	}
	var se *mcpedge.ScopeError
	if !errors.As(err, &se) || se.Scope != "a2a:raed" || se.Suggestion != "a2a:read" {
		t.Errorf("error %v, want a ScopeError for a2a:raed suggesting a2a:read", err)
	}
	if want := `config: principal.scopes: unknown scope "a2a:raed" (did you mean a2a:read?); a2ad knows a2a:read, a2a:delegate, a2a:admin`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// A named principal's unknown scope (principals:, for `a2ad mcp
// --principal`) is refused at Start like the stdio principal's.
func TestStartRefusesUnknownPrincipalsScope(t *testing.T) {
	cfg := daemon.Config{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:-1",
		Principals: map[string]daemon.PrincipalConfig{"my-ide": {Scopes: []string{"a2a:delegat"}}}}
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err == nil {
		d.Stop()
		t.Fatal("Start accepted scope a2a:delegat")
	}
	if want := `config: principals[my-ide].scopes: unknown scope "a2a:delegat" (did you mean a2a:delegate?); a2ad knows a2a:read, a2a:delegate, a2a:admin`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// Every fault of a configuration file is named at once, in the file's
// order, each with its line, its key path and what is wanted in a2ad's
// words: an unknown key, a value of the wrong type, values a2ad refuses,
// a list given as one string, a limit out of range and a misspelt host
// schema name.
func TestLoadConfigNamesEveryFaultAtOnce(t *testing.T) {
	path := "../../testdata/bad/config/every_fault_at_once.yaml"
	cfg, err := daemon.LoadConfig(path)
	var fe *daemon.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("LoadConfig: %v, want a *daemon.FileError", err)
	}
	fe.Add(daemon.EvidenceSchemaFaults(cfg)...) // as `a2ad serve` does
	want := []string{
		"line 2: unknown key htp_addr (did you mean http_addr?)",
		`line 3: max_deadline_seconds: want a whole number of seconds, got "ten"`,
		`line 5: log.level "verbose": want debug, info, warn or error`,
		`line 6: log.format "xml": want text or json`,
		"line 8: tracing.sample_ratio: want a fraction from 0 (no trace) to 1 (every trace), got 2",
		`line 10: principal.scopes: want a list, e.g. [a2a:read, a2a:delegate], got "a2a:read a2a:delegate"`,
		"line 12: agent_limits.max_subscriptions 8: want at least 16",
		`line 18: agents[0].evidence_schemas[assess_refund_risk]: no host schema named "refund_evidenc" in the built-in schemas (did you mean refund_evidence?)`,
	}
	if len(fe.Errs) != len(want) {
		t.Errorf("%d faults, want %d:\n%v", len(fe.Errs), len(want), err)
	}
	for i, e := range fe.Errs {
		if i < len(want) && e.Error() != want[i] {
			t.Errorf("fault %d:\n%s\nwant\n%s", i, e, want[i])
		}
	}
	if strings.Contains(err.Error(), "!!str") || strings.Contains(err.Error(), "unmarshal") {
		t.Errorf("the decoder's words reach the operator: %v", err)
	}
}

// A file with a second YAML document (after a `---` line) is refused:
// a2ad would read the first and ignore everything after, here an empty
// audience, an unknown key and a scope typo.
func TestLoadConfigRefusesASecondDocument(t *testing.T) {
	path := "../../testdata/bad/config/second_document.yaml"
	_, err := daemon.LoadConfig(path)
	want := "config " + path + ": line 4: --- starts a second YAML document: a2ad reads one document per file and would ignore this one; put its keys in the first and remove the --- line"
	if err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// One document that starts with --- is one document.
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("---\nhttp_addr: 127.0.0.1:9\n"), 0o600)
	if c, err := daemon.LoadConfig(f); err != nil || c.HTTPAddr != "127.0.0.1:9" {
		t.Errorf("a single document after ---: %+v %v", c.HTTPAddr, err)
	}
}

// An empty file, or one of comments only, is an empty configuration:
// every default, no error.
func TestLoadConfigEmptyFileIsEveryDefault(t *testing.T) {
	for name, text := range map[string]string{"empty": "", "comments only": "# nothing configured yet\n\n# a2ad takes every default\n", "null": "~\n"} {
		f := filepath.Join(t.TempDir(), "a2ad.yaml")
		_ = os.WriteFile(f, []byte(text), 0o600)
		c, err := daemon.LoadConfig(f)
		if err != nil || c.HTTPAddr != "" || len(c.Agents) != 0 {
			t.Errorf("%s file: %+v, %v; want the empty configuration", name, c, err)
		}
	}
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("- http_addr: 127.0.0.1:9\n"), 0o600)
	_, err := daemon.LoadConfig(f)
	if want := "config " + f + ": line 1: the file is not a mapping of keys (http_addr: …, agents: …): want the configuration's keys at the top level"; err == nil || err.Error() != want {
		t.Errorf("a list at the top: %q, want %q", err, want)
	}
}

// A misspelt host schema name in a configuration built in code is
// refused at Start with the name meant; from a file, with its line too.
func TestStartNamesMisspeltEvidenceSchema(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("agents:\n  - id: fraud-review\n    tenants: [default]\n    evidence_schemas:\n      assess_refund_risk: refund_evidenc\n      other: risk_asessment\n"), 0o600)
	cfg, err := daemon.LoadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.HTTPAddr, cfg.NATSListen = t.TempDir(), "127.0.0.1:0", "127.0.0.1:-1"
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err == nil {
		d.Stop()
		t.Fatal("Start accepted evidence schema refund_evidenc")
	}
	want := `config: line 5: agents[0].evidence_schemas[assess_refund_risk]: no host schema named "refund_evidenc" in the built-in schemas (did you mean refund_evidence?); ` +
		`line 6: agents[0].evidence_schemas[other]: no host schema named "risk_asessment" in the built-in schemas (did you mean risk_assessment?)`
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
	if !errors.Is(err, artifact.ErrSchemaNotFound) {
		t.Errorf("error does not wrap artifact.ErrSchemaNotFound")
	}
}

// The token algorithms and the allowed origins are named with their
// list index and line, each one, beside the other faults.
func TestLoadConfigNamesAlgorithmAndOriginFaults(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("auth:\n  algorithms: [EdDSA, ES265]\nhttp_allowed_origins:\n  - https://ide.example.com\n  - ide.example.com\nlimits: {}\n"), 0o600)
	_, err := daemon.LoadConfig(f)
	var fe *daemon.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("LoadConfig: %v, want a *daemon.FileError", err)
	}
	var got []string
	for _, e := range fe.Errs {
		got = append(got, e.Error())
	}
	want := []string{
		`line 2: auth.algorithms[1]: want ES256, EdDSA or RS256 (HS256 only with hs256_secret_file), got "ES265" (did you mean ES256?)`,
		"line 5: http_allowed_origins[1]: want an origin scheme://host[:port] (RFC 6454), got \"ide.example.com\": ",
		"line 6: unknown key limits",
	}
	if len(got) != len(want) {
		t.Fatalf("faults %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("fault %d: %q, want %q…", i, got[i], want[i])
		}
	}
}

// A file that is not YAML is refused with the line the parser stopped
// at, in a2ad's words (no "yaml:" prefix, no Go type).
func TestLoadConfigNamesASyntaxError(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("http_addr: 127.0.0.1:0\nlog:\n  level: info\n   format: json\n"), 0o600)
	_, err := daemon.LoadConfig(f)
	if want := "config " + f + ": not valid YAML: line 4: mapping values are not allowed in this context"; err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// A fault of agent_limits is named once, not again for each agent that
// inherits the value; an agent that sets the same value itself is named.
func TestLoadConfigNamesAnInheritedLimitOnce(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("agent_limits:\n  max_subscriptions: 8\nagents:\n  - id: a\n    tenants: [default]\n  - id: b\n    tenants: [default]\n    limits:\n      max_subscriptions: 8\n"), 0o600)
	_, err := daemon.LoadConfig(f)
	want := "config " + f + ": line 2: agent_limits.max_subscriptions 8: want at least 16; line 9: agents[b].limits.max_subscriptions 8: want at least 16"
	if err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
}

// Output schemas a skill's configuration names that no host schema has are
// refused at Start, every one with its line, beside the evidence schemas'
// faults; so is an empty list.
func TestStartNamesUnknownOutputSchemas(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a2ad.yaml")
	_ = os.WriteFile(f, []byte("agents:\n  - id: fraud-review\n    tenants: [default]\n    evidence_schemas:\n      assess_refund_risk: refund_evidenc\n"+
		"    output_schemas:\n      assess_refund_risk:\n        - risk_assessment\n        - risk_asessment\n      \"*\": [nope]\n      other: []\n"), 0o600)
	cfg, err := daemon.LoadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.HTTPAddr, cfg.NATSListen = t.TempDir(), "127.0.0.1:0", "127.0.0.1:-1"
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err == nil {
		d.Stop()
		t.Fatal("Start accepted output schema risk_asessment")
	}
	want := `config: line 5: agents[0].evidence_schemas[assess_refund_risk]: no host schema named "refund_evidenc" in the built-in schemas (did you mean refund_evidence?); ` +
		`line 10: agents[0].output_schemas[*][0]: no host schema named "nope" in the built-in schemas; it holds refund_evidence, risk_assessment; ` +
		`line 9: agents[0].output_schemas[assess_refund_risk][1]: no host schema named "risk_asessment" in the built-in schemas (did you mean risk_assessment?); ` +
		`agents[0].output_schemas[other]: lists no host schema: name at least one, or leave the skill out (then every host schema is allowed)`
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
}
