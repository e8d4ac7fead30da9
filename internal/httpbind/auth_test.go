package httpbind

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
)

// The bearer token from the file is on the wire; a rotated file is
// picked up on the next request, without a new Binding.
func TestBearerTokenFileRotated(t *testing.T) {
	a := startAgent(t, "JSONRPC", agentOpts{})
	agents := bearerAuth(t, "tok-1")
	b := bindingFor(t, a, Config{Agents: agents})
	if _, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), ""); err != nil {
		t.Fatal(err)
	}
	p := agents["fraud"].Auth.BearerTokenFile
	if err := os.WriteFile(p, []byte("tok-2-rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T2"), ""); err != nil {
		t.Fatal(err)
	}
	reqs := a.requests()
	if len(reqs) != 2 {
		t.Fatalf("agent got %d requests, want 2", len(reqs))
	}
	for i, want := range []string{"Bearer tok-1", "Bearer tok-2-rotated"} {
		if got := reqs[i].Header.Get("Authorization"); got != want {
			t.Errorf("request %d Authorization = %q, want %q", i, got, want)
		}
	}
}

// A file rewritten with a token of the same length within the same
// mtime granularity is still seen once its mtime moves.
func TestBearerTokenSameSizeRotated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("aaaa"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &bearerFile{agentID: "fraud", path: p}
	if tok, err := c.token(); err != nil || tok != "aaaa" {
		t.Fatalf("token = %q %v", tok, err)
	}
	if err := os.WriteFile(p, []byte("bbbb"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if tok, err := c.token(); err != nil || tok != "bbbb" {
		t.Fatalf("after rotation token = %q %v, want bbbb", tok, err)
	}
}

// The agent's 401 and 403 are *AuthError naming the agent and the auth
// kind, of class RPCError (it took nothing), never quoting the token or
// the agent's text; an unreadable token file sends nothing.
func TestAuthFailures(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "secret-agent-text: token tok-1 is revoked", status)
			})
		}})
		b := bindingFor(t, a, Config{Agents: bearerAuth(t, "tok-1")})
		_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Status != status || ae.Kind != AuthKindBearer || ae.AgentID != "fraud" {
			t.Fatalf("HTTP %d: err = %v, want *AuthError", status, err)
		}
		want := map[int]int{401: CodeUnauthenticated, 403: CodeUnauthorized}[status]
		if !a2a.IsCode(err, want) {
			t.Errorf("HTTP %d: err = %v, want the class RPCError %d", status, err, want)
		}
		if msg := err.Error(); strings.Contains(msg, "tok-1") || strings.Contains(msg, "secret-agent-text") {
			t.Errorf("error %q quotes the token or the agent", msg)
		}
	}

	a := startAgent(t, "JSONRPC", agentOpts{})
	agents := bearerAuth(t, "tok-1")
	b := bindingFor(t, a, Config{Agents: agents})
	if err := os.Remove(agents["fraud"].Auth.BearerTokenFile); err != nil {
		t.Fatal(err)
	}
	_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Status != 0 || !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("missing token file: err = %v, want *AuthError, not sent", err)
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("agent got %d requests without a token, want 0", n)
	}
}

// tokenEndpoint is an OAuth 2.0 authorization server's token endpoint
// (RFC 6749 §4.4.2, §5.1) for client "a2ad" with secret "s3cret".
func tokenEndpoint(t *testing.T, fail *atomic.Bool, hits *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case fail.Load() || id != "a2ad" || secret != "s3cret":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client","error_description":"idp-secret-text"}`))
		case r.PostForm.Get("grant_type") != "client_credentials":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"unsupported_grant_type"}`))
		case r.PostForm.Get("scope") != "a2a.tasks":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_scope"}`))
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at-1", "token_type": "Bearer", "expires_in": 3600})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// OAuth 2.0 client credentials against a real token endpoint: the
// access token is on the wire and cached (one token request for two
// calls); a token endpoint refusing a2ad is an *AuthError naming the
// agent and the kind, nothing sent to the agent.
func TestOAuth2ClientCredentials(t *testing.T) {
	var fail atomic.Bool
	var hits atomic.Int32
	idp := tokenEndpoint(t, &fail, &hits)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := Auth{OAuth2: &OAuth2{TokenURL: idp.URL + "/token", ClientID: "a2ad", ClientSecretFile: secret, Scopes: []string{"a2a.tasks"}}}
	a := startAgent(t, "HTTP+JSON", agentOpts{})
	b := bindingFor(t, a, Config{Agents: map[string]AgentConfig{"fraud": {Auth: auth}}})
	for _, id := range []string{"T1", "T2"} {
		if _, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, id), ""); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range a.requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer at-1" {
			t.Errorf("request %d Authorization = %q, want Bearer at-1", i, got)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("token endpoint hit %d times for two calls, want 1 (cached)", n)
	}

	fail.Store(true)
	a2 := startAgent(t, "JSONRPC", agentOpts{})
	b2 := bindingFor(t, a2, Config{Agents: map[string]AgentConfig{"fraud": {Auth: auth}}})
	_, err := b2.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T3"), "")
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Kind != AuthKindOAuth2 || ae.AgentID != "fraud" || !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("token endpoint refusing: err = %v, want *AuthError (OAuth2), not sent", err)
	}
	if want := "the token endpoint answered HTTP 401"; ae.Reason != want {
		t.Errorf("reason = %q, want %q", ae.Reason, want)
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "idp-secret-text") {
		t.Errorf("error %q quotes the secret or the token endpoint", msg)
	}
	if n := len(a2.requests()); n != 0 {
		t.Errorf("agent got %d requests without a token, want 0", n)
	}
}

// An OAuth 2.0 token endpoint over plain http off loopback is refused
// when the client is built.
func TestOAuth2TokenURLMustBeHTTPS(t *testing.T) {
	a := startAgent(t, "JSONRPC", agentOpts{})
	auth := Auth{OAuth2: &OAuth2{TokenURL: "http://idp.example.com/token", ClientID: "a2ad", ClientSecretFile: "/nonexistent"}}
	b := bindingFor(t, a, Config{Agents: map[string]AgentConfig{"fraud": {Auth: auth}}})
	_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	var ue *URLError
	if !errors.As(err, &ue) || !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("err = %v, want *URLError, not sent", err)
	}
}
