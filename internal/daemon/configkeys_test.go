package daemon_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

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
