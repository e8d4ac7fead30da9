package daemon_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
)

// Every fault of the agents' HTTP binding keys is named at once, at its
// line, in a2ad's words.
func TestLoadConfigNamesEveryHTTPBindingFault(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.token")
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	token := filepath.Join(dir, "vendor.token")
	_ = os.WriteFile(token, []byte("s3cret\n"), 0o600)
	missing := filepath.Join(dir, "missing.secret")
	f := filepath.Join(dir, "a2ad.yaml")
	_ = os.WriteFile(f, []byte(`agents:
  - id: a
    tenants: [default]
    bindings: [JSONRPC, GRPC, JSONRPC]
    allowed_origins:
      - https://rpc.vendor.example
      - http://rpc.vendor.example
      - https://rpc.vendor.example/a2a
    http:
      auth:
        bearer_token_file: `+empty+`
        oauth2:
          token_url: http://auth.vendor.example/token
          client_secret_file: `+missing+`
          scopes: ["a b"]
  - id: b
    tenants: [default]
    http:
      auth:
        oauth2:
          token_url: https://auth.vendor.example/token
          client_id: a2ad
          client_secret_file: `+token+`
  - id: c
    tenants: [default]
    http:
      auth:
        bearer_token_file: `+token+`
`), 0o600)
	_, err := daemon.LoadConfig(f)
	var fe *daemon.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("LoadConfig: %v, want a *daemon.FileError", err)
	}
	var got []string
	for _, e := range fe.Errs {
		got = append(got, e.Error())
	}
	origin := "want an origin scheme://host[:port] (RFC 6454): https, or http on a loopback host (localhost, 127.0.0.0/8, [::1]), with no path, query or user info"
	want := []string{
		`line 4: agents[a].bindings[1]: want JSONRPC or HTTP+JSON, got "GRPC"`,
		`line 4: agents[a].bindings[2]: JSONRPC is listed twice`,
		`line 7: agents[a].allowed_origins[1]: ` + origin + `, got "http://rpc.vendor.example"`,
		`line 8: agents[a].allowed_origins[2]: ` + origin + `, got "https://rpc.vendor.example/a2a"`,
		`line 10: agents[a].http.auth: want one of bearer_token_file and oauth2, not both`,
		`line 11: agents[a].http.auth.bearer_token_file: file ` + empty + ` is empty`,
		// client_id is missing: named at the line of oauth2.
		`line 12: agents[a].http.auth.oauth2.client_id: required: the OAuth 2.0 client id a2ad authenticates as (RFC 6749 §2.2)`,
		`line 13: agents[a].http.auth.oauth2.token_url: want an https URL (http only on a loopback host), got "http://auth.vendor.example/token"`,
		`line 14: agents[a].http.auth.oauth2.client_secret_file: file ` + missing + ` does not exist`,
		`line 15: agents[a].http.auth.oauth2.scopes[0]: want a scope token (RFC 6749 §3.3: no spaces, quotes or backslashes), got "a b"`,
	}
	// In the file's order, by line; those of one line as a2ad checks them.
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("faults\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A valid HTTP agent configuration loads, and the keys reach the agent's
// configuration: bindings and allowed_origins for the registry, http.auth
// for the HTTP binding.
func TestLoadConfigHTTPAgent(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "vendor.token")
	_ = os.WriteFile(token, []byte("s3cret\n"), 0o600)
	f := filepath.Join(dir, "a2ad.yaml")
	_ = os.WriteFile(f, []byte(`agents:
  - id: fraud-review
    tenants: [default]
    card_url: https://rpc.vendor.example
    bindings: [HTTP+JSON, JSONRPC]
    allowed_origins: ["https://rpc2.vendor.example:8443", "http://127.0.0.1:9000"]
    http:
      auth:
        bearer_token_file: `+token+`
`), 0o600)
	c, err := daemon.LoadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	a := c.Agents[0]
	if strings.Join(a.Bindings, ",") != agentcard.BindingHTTPJSON+","+agentcard.BindingJSONRPC ||
		strings.Join(a.AllowedOrigins, ",") != "https://rpc2.vendor.example:8443,http://127.0.0.1:9000" ||
		a.HTTP.Auth.BearerTokenFile != token || a.HTTP.Auth.OAuth2 != nil {
		t.Errorf("agent = bindings %q allowed_origins %q http %+v", a.Bindings, a.AllowedOrigins, a.HTTP)
	}
}

// A configuration built in code is checked at start the same way.
func TestStartRefusesBadHTTPBindingKeys(t *testing.T) {
	_, err := daemon.Start(t.Context(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "a", Tenants: []string{"default"}, Bindings: []string{"GRPC"}}}}},
		slog.New(slog.DiscardHandler), false)
	if want := `config: agents[a].bindings[0]: want JSONRPC or HTTP+JSON, got "GRPC"`; err == nil || err.Error() != want {
		t.Errorf("Start = %v, want %s", err, want)
	}
}
