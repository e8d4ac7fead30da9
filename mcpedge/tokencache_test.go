package mcpedge

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// hs256Authenticator verifies HS256 tokens with a 1 s leeway; sign mints
// one expiring at exp with the given secret.
func hs256Authenticator(t *testing.T) (a *Authenticator, secret []byte, sign func(secret []byte, exp time.Time, scope string) string) {
	t.Helper()
	dir := t.TempDir()
	secret = []byte("0123456789abcdef0123456789abcdef-dev")
	path := dir + "/hs256"
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthenticator(AuthConfig{Issuer: "dev", Audience: "aud", HS256SecretFile: path, LeewaySeconds: 1}, dir, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	sign = func(secret []byte, exp time.Time, scope string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "dev", "aud": "aud", "sub": "h", "tenant": "t",
			"scope": scope, "iat": time.Now().Add(-time.Minute).Unix(), "exp": exp.Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return a, secret, sign
}

// A token verified (and so remembered) is still refused once it expires:
// the expiry, with the leeway, is checked on every use.
func TestCachedTokenStillExpires(t *testing.T) {
	a, secret, sign := hs256Authenticator(t)
	exp := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second) // exp has whole seconds
	tok := sign(secret, exp, "a2a:read")
	for range 3 {
		if _, err := a.Verify(tok); err != nil {
			t.Fatalf("fresh token: %v", err)
		}
	}
	time.Sleep(time.Until(exp.Add(time.Second + 100*time.Millisecond))) // past exp and the 1 s leeway
	if _, err := a.Verify(tok); err == nil || err.Error() != "invalid token: expired" {
		t.Fatalf("remembered token after exp + leeway: %v, want invalid token: expired", err)
	}
}

// Only the exact bytes that verified are served from memory: the same
// claims under another signature are verified, and refused.
func TestTokenWithAnotherSignatureIsNotServedFromCache(t *testing.T) {
	a, secret, sign := hs256Authenticator(t)
	exp := time.Now().Add(time.Hour)
	good := sign(secret, exp, "a2a:read a2a:delegate")
	if _, err := a.Verify(good); err != nil {
		t.Fatal(err)
	}
	forged := sign([]byte("another-secret-another-secret-another!"), exp, "a2a:read a2a:delegate")
	if forged[:strings.LastIndexByte(forged, '.')] != good[:strings.LastIndexByte(good, '.')] {
		t.Fatal("the forged token should differ from the good one only in its signature")
	}
	tampered := good[:len(good)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(good, "AA")]
	for name, tok := range map[string]string{"another key's signature": forged, "a changed signature": tampered} {
		for range 2 { // a refusal is not remembered either
			if _, err := a.Verify(tok); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	}
	if _, err := a.Verify(good); err != nil {
		t.Errorf("the good token after the refusals: %v", err)
	}
}

// What Verify returns is the caller's own copy: changing it changes nothing
// for the next caller of the same token.
func TestCachedTokenInfoIsACopy(t *testing.T) {
	a, secret, sign := hs256Authenticator(t)
	tok := sign(secret, time.Now().Add(time.Hour), "a2a:read")
	ti, err := a.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	ti.Scopes = append(ti.Scopes[:0], "a2a:admin")
	ti.Extra["tenant"] = "other"
	again, err := a.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Scopes, []string{"a2a:read"}) || again.Extra["tenant"] != "t" {
		t.Errorf("second Verify = %v %v, want [a2a:read] tenant t", again.Scopes, again.Extra)
	}
}

// The cache's own rules, on a clock of the test's choosing: an entry is
// served for TokenCacheTTL after its verification and not past its exp
// plus leeway; a full cache evicts rather than grows.
func TestTokenCacheBounds(t *testing.T) {
	var c tokenCache
	t0 := time.Unix(1_800_000_000, 0)
	ti := &auth.TokenInfo{Scopes: []string{"a2a:read"}, Expiration: t0.Add(time.Hour), Extra: map[string]any{"sub": "h", "tenant": "t"}}
	key := sha256.Sum256([]byte("token"))
	c.put(key, ti, t0)
	if _, ok := c.get(key, t0.Add(TokenCacheTTL-time.Second), 0); !ok {
		t.Error("within the TTL: not served")
	}
	if _, ok := c.get(key, t0.Add(TokenCacheTTL), 0); ok {
		t.Error("at the TTL (a key rotation must take effect): still served")
	}
	short := &auth.TokenInfo{Expiration: t0.Add(10 * time.Second)}
	c.put(key, short, t0)
	if _, ok := c.get(key, t0.Add(14*time.Second), 5*time.Second); !ok {
		t.Error("past exp but within the leeway: not served")
	}
	if _, ok := c.get(key, t0.Add(16*time.Second), 5*time.Second); ok {
		t.Error("past exp and leeway: served")
	}
	for i := range TokenCacheSize + 10 {
		c.put(sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}), ti, t0)
	}
	if n := len(c.m); n > TokenCacheSize {
		t.Errorf("cache holds %d tokens, more than %d", n, TokenCacheSize)
	}
}

// RequireScope tells the handler when the token stops being accepted (its
// exp plus the leeway), for a long request — the admin task watch — to end
// then (red team: a watch streamed on after expiry); it cuts no request
// itself.
func TestRequireScopeGivesTheTokensExpiry(t *testing.T) {
	a, secret, sign := hs256Authenticator(t)
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	tok := sign(secret, exp, ScopeAdmin)
	var got time.Time
	var ok bool
	var ended error
	h := a.RequireScope(ScopeAdmin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok = TokenExpiryFromContext(r.Context())
		ended = r.Context().Err()
	}))
	req := httptest.NewRequest("GET", "/v1/tasks/watch", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !ok || !got.Equal(exp.Add(time.Second)) || ended != nil {
		t.Errorf("expiry %v %v, context %v; want %v (exp + the 1 s leeway) and a live context", got, ok, ended, exp.Add(time.Second))
	}
}
