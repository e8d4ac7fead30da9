package mcpedge

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// Untrusted bearer tokens never panic the verifier and never pass without
// the key: every input but a token the key signed is a *TokenError.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	a, err := NewAuthenticator(AuthConfig{}, dir, "http://127.0.0.1:8080")
	if err != nil {
		f.Fatal(err)
	}
	good, err := MintDevToken(dir, a.Audience(), "h", "default", "a2a:read", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add(strings.Replace(good, ".", "x.", 1))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJoIn0.")
	f.Fuzz(func(t *testing.T, token string) {
		ti, err := a.Verify(token)
		if token == good {
			if err != nil || ti.Extra["tenant"] != "default" {
				t.Fatalf("the minted token: %v", err)
			}
			return
		}
		var te *TokenError
		if err == nil {
			// Only an exact re-encoding of the signed token could pass.
			if ti.Extra["sub"] != "h" {
				t.Fatalf("an unsigned variant passed: %q", token)
			}
			return
		}
		if !errors.As(err, &te) || !errors.Is(err, auth.ErrInvalidToken) || strings.Contains(te.Reason, token) && len(token) > 8 {
			t.Fatalf("Verify(%q) = %v", token, err)
		}
	})
}

func TestNewAuthenticatorRefusesUnsafeSettings(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  AuthConfig
		want string
	}{
		{AuthConfig{Algorithms: []string{"HS256"}}, "HS256 is allowed only with hs256_secret_file"},
		{AuthConfig{Algorithms: []string{"none"}}, `algorithm "none" is not one of`},
		{AuthConfig{PublicKeyFile: "/nonexistent.pem", Issuer: "x"}, "public_key_file"},
		{AuthConfig{PublicKeyFile: "a", JWKSURL: "b"}, "set one of"},
	} {
		if _, err := NewAuthenticator(c.cfg, dir, "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// Request states come back from clients: anything but a state sealed with
// the key for this principal is refused, without panicking.
func FuzzOpenState(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	p := broker.Principal{Subject: "alice", Tenant: "default"}
	now := time.Unix(1_800_000_000, 0)
	good := sealState(key, stateClaims{Task: "tsk-1", Tenant: "default", Subject: "alice", Turn: 1, Exp: now.Unix() + 60})
	f.Add(good)
	f.Add("")
	f.Add(".")
	f.Add(good[:len(good)-1])
	f.Add(sealState([]byte("another key, also thirty-two byt"), stateClaims{Task: "tsk-1", Tenant: "default", Subject: "alice", Turn: 1, Exp: now.Unix() + 60}))
	f.Add(sealState(key, stateClaims{Task: "tsk-1", Tenant: "acme", Subject: "alice", Turn: 1, Exp: now.Unix() + 60}))
	f.Add(sealState(key, stateClaims{Task: "tsk-1", Tenant: "default", Subject: "alice", Turn: 1, Exp: now.Unix() - 1}))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := openState(key, p, s, now)
		if s == good {
			if err != nil || c.Task != "tsk-1" || c.Turn != 1 {
				t.Fatalf("the sealed state: %+v %v", c, err)
			}
			return
		}
		if err == nil && (c.Tenant != "default" || c.Subject != "alice" || c.Exp < now.Unix()) {
			t.Fatalf("accepted %q as %+v", s, c)
		}
		if err != nil && !errors.Is(err, ErrRequestState) {
			t.Fatalf("error %v is not ErrRequestState", err)
		}
	})
}

// HS256 with a secret file (development) verifies; exp allows the
// configured leeway (30 s) and no more.
func TestHS256SecretAndLeeway(t *testing.T) {
	dir := t.TempDir()
	secret := []byte("0123456789abcdef0123456789abcdef-dev")
	path := dir + "/hs256"
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthenticator(AuthConfig{Issuer: "dev", Audience: "aud", HS256SecretFile: path}, dir, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	sign := func(exp time.Time) string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "dev", "aud": "aud", "sub": "h", "tenant": "t",
			"scope": "a2a:read", "iat": exp.Add(-time.Hour).Unix(), "exp": exp.Unix()}).SignedString(secret)
		return s
	}
	if _, err := a.Verify(sign(time.Now().Add(time.Hour))); err != nil {
		t.Errorf("HS256 token: %v", err)
	}
	if _, err := a.Verify(sign(time.Now().Add(-20 * time.Second))); err != nil {
		t.Errorf("expired 20 s ago, within the 30 s leeway: %v", err)
	}
	if _, err := a.Verify(sign(time.Now().Add(-40 * time.Second))); err == nil || err.Error() != "invalid token: expired" {
		t.Errorf("expired 40 s ago: %v, want invalid token: expired", err)
	}
	if _, err := NewAuthenticator(AuthConfig{Issuer: "dev", HS256SecretFile: path, Algorithms: []string{"ES256"}}, dir, "http://127.0.0.1:1"); err == nil {
		t.Error("ES256 with an HS256 secret was accepted")
	}
}
