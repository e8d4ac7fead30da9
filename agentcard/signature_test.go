package agentcard

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
	"github.com/go-jose/go-jose/v4"
)

// signCard returns the card with one JWS signature by key over its
// SigningInput (detached, as A2A card signing does), with extra protected
// headers.
func signCard(t *testing.T, raw []byte, key *ecdsa.PrivateKey, headers map[jose.HeaderKey]any) []byte {
	t.Helper()
	payload, err := SigningInput(raw)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, &jose.SignerOptions{ExtraHeaders: headers})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	compact, _ := obj.CompactSerialize()
	parts := strings.Split(compact, ".")
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["signatures"] = []map[string]string{{"protected": parts[0], "signature": parts[2]}}
	b, _ := json.Marshal(m)
	return b
}

func pinKey(t *testing.T, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	p := filepath.Join(t.TempDir(), "pinned.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVerifySignaturesAgainstPinnedKeysOnly(t *testing.T) {
	pinned, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	attacker, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys, err := ReadPublicKeys([]string{pinKey(t, pinned)})
	if err != nil {
		t.Fatal(err)
	}
	card := a2ad.FraudReviewCard()
	signed := signCard(t, card, pinned, map[jose.HeaderKey]any{"kid": "ops-2026"})
	if i, err := VerifySignatures(signed, keys); err != nil || i != 0 {
		t.Fatalf("signed by the pinned key: %d %v", i, err)
	}
	tampered := []byte(strings.Replace(string(signed), "Fraud Review Agent", "Fraud Review Agent v2", 1))
	forged := signCard(t, card, attacker, map[jose.HeaderKey]any{"jku": "https://attacker.example/jwks.json", "kid": "ops-2026"})
	for name, c := range map[string][]byte{"unsigned": card, "tampered after signing": tampered, "signed by a key named only by jku": forged} {
		if _, err := VerifySignatures(c, keys); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
	// The fingerprint ignores signatures: signing does not change it.
	a, _ := Fingerprint(card)
	b, _ := Fingerprint(signed)
	if a != b {
		t.Errorf("fingerprint changed by signing: %s vs %s", a, b)
	}
}

// With require_signature, a card signed by an unpinned key, or unsigned,
// is refused; one signed with the pinned key registers as verified.
func TestRegistryRequiresASignatureWhenConfigured(t *testing.T) {
	pinned, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true,
		SigningKeys: []string{pinKey(t, pinned)}, RequireSignature: true})
	card := a2ad.FraudReviewCard()
	for name, c := range map[string][]byte{"unsigned": card, "signed by an unpinned key": signCard(t, card, other, nil)} {
		if _, err := r.Register(t.Context(), agent, c); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
	rec := register(t, r, agent, signCard(t, card, pinned, nil))
	if !rec.SignatureVerified || rec.Status != StatusApproved {
		t.Errorf("signed card: verified %v status %s", rec.SignatureVerified, rec.Status)
	}
	if _, err := NewRegistry(t.Context(), nil, []AgentConfig{{ID: "x", RequireSignature: true}}, 1); err == nil ||
		!strings.Contains(err.Error(), "require_signature needs signing_keys") {
		t.Errorf("require_signature without keys: %v", err)
	}
}
