package agentcred

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func keys(t testing.TB, b byte) *Keys {
	t.Helper()
	k, err := NewKeys(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestMintVerifyRoundTrip(t *testing.T) {
	k := keys(t, 1)
	now := time.Now()
	tok, exp, err := k.Mint("fraud-review", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Truncate(time.Second).Add(24 * time.Hour); !exp.Equal(want) {
		t.Errorf("expiry %v, want %v", exp, want)
	}
	c, err := k.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.AgentID != "fraud-review" || !c.Expires.Equal(exp) || len(c.ID) != 32 {
		t.Errorf("claims %+v", c)
	}
	// Another instance with the same seed verifies it.
	if _, err := keys(t, 1).Verify(tok); err != nil {
		t.Errorf("same seed: %v", err)
	}
	_, exp, _ = k.Mint("a", 0, now)
	if want := now.Truncate(time.Second).Add(DefaultTTL); !exp.Equal(want) {
		t.Errorf("default ttl: expiry %v, want %v", exp, want)
	}
}

func TestMintRefusesBadInput(t *testing.T) {
	k := keys(t, 1)
	for _, id := range []string{"", "a.b", "a>", "a b", strings.Repeat("x", 129)} {
		if _, _, err := k.Mint(id, time.Hour, time.Now()); err == nil {
			t.Errorf("Mint(%q) succeeded", id)
		}
	}
	for _, ttl := range []time.Duration{-time.Second, MaxTTL + time.Second} {
		if _, _, err := k.Mint("a", ttl, time.Now()); err == nil {
			t.Errorf("Mint ttl %s succeeded", ttl)
		}
	}
	if _, err := NewKeys(make([]byte, 31)); err == nil {
		t.Error("NewKeys with a 31-byte seed succeeded")
	}
}

func TestVerifyRefuses(t *testing.T) {
	k := keys(t, 1)
	good, _, _ := k.Mint("fraud-review", time.Hour, time.Now())
	expired, _, _ := k.Mint("fraud-review", time.Hour, time.Now().Add(-2*time.Hour))
	other, _, _ := keys(t, 2).Mint("fraud-review", time.Hour, time.Now())
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := time.Now().Add(time.Hour).Unix()
	claims := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": Issuer, "aud": Audience, "sub": "fraud-review", "exp": exp}
		mod(c)
		return c
	}
	parts := strings.Split(good, ".")
	noneAlg := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	for name, tc := range map[string]struct {
		tok, want string
	}{
		"other key":        {other, "signature does not verify"},
		"expired":          {expired, "expired"},
		"tampered payload": {parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"a2ad","aud":"urn:a2ad:agent","sub":"other","exp":9999999999}`)) + "." + parts[2], "signature does not verify"},
		"alg none":         {noneAlg, "algorithm is not EdDSA"},
		"HS256 with public key bytes": {sign(jwt.SigningMethodHS256, []byte(k.pub), claims(func(jwt.MapClaims) {})),
			"algorithm is not EdDSA"},
		"host token audience": {sign(jwt.SigningMethodEdDSA, k.priv, claims(func(c jwt.MapClaims) { c["aud"] = "http://127.0.0.1:8080/mcp" })), "aud is not urn:a2ad:agent"},
		"other issuer":        {sign(jwt.SigningMethodEdDSA, k.priv, claims(func(c jwt.MapClaims) { c["iss"] = "someone" })), "iss is not a2ad"},
		"no exp":              {sign(jwt.SigningMethodEdDSA, k.priv, claims(func(c jwt.MapClaims) { delete(c, "exp") })), "exp missing"},
		"sub not an id":       {sign(jwt.SigningMethodEdDSA, k.priv, claims(func(c jwt.MapClaims) { c["sub"] = "a2a.agent.>" })), "sub is not an agent id"},
		"empty":               {"", "malformed"},
		"oversized":           {strings.Repeat("a", maxTokenBytes+1), "longer than 2048 bytes"},
	} {
		_, err := k.Verify(tc.tok)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", name, err, tc.want)
		}
		if len(tc.tok) > 20 && err != nil && strings.Contains(err.Error(), tc.tok[len(tc.tok)-20:]) {
			t.Errorf("%s: error quotes the token", name)
		}
	}
}

// FuzzVerify: arbitrary tokens never panic, never verify, and errors never
// quote them.
func FuzzVerify(f *testing.F) {
	k := keys(f, 1)
	// Fixed claims: Ed25519 signatures are deterministic, so every fuzz
	// worker process computes the same good token.
	good, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": Issuer, "aud": Audience,
		"sub": "fraud-review", "exp": 4102444800, "jti": "seed"}).SignedString(k.priv)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-2])
	f.Add("e30.e30.")
	f.Add("..")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := k.Verify(tok)
		if err == nil {
			if tok != good || c.AgentID != "fraud-review" {
				t.Fatalf("verified a token that a2ad did not mint: %q", tok)
			}
			return
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
		if len(tok) >= 16 && strings.Contains(err.Error(), tok) {
			t.Fatalf("error quotes the token")
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	k := keys(b, 1)
	tok, _, _ := k.Mint("fraud-review", time.Hour, time.Now())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}
