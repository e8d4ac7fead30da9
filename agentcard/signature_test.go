package agentcard

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
	"github.com/go-jose/go-jose/v4"
)

// signCard returns the card with one JWS signature by key over its
// SigningPayload (detached, as A2A card signing does), with extra protected
// headers.
func signCard(t *testing.T, raw []byte, key *ecdsa.PrivateKey, headers map[jose.HeaderKey]any) []byte {
	t.Helper()
	payload, err := SigningPayload(raw)
	if err != nil {
		t.Fatal(err)
	}
	return signOver(t, raw, payload, key, headers)
}

// signOver returns the card with its signatures replaced by one JWS
// signature by key over payload, detached; the card's other members are
// kept as they are.
func signOver(t *testing.T, raw, payload []byte, key *ecdsa.PrivateKey, headers map[jose.HeaderKey]any) []byte {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, &jose.SignerOptions{ExtraHeaders: headers})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	compact, err := obj.DetachedCompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	protected, signature, _ := strings.Cut(strings.Replace(compact, "..", ".", 1), ".")
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["signatures"], _ = json.Marshal([]map[string]string{{"protected": protected, "signature": signature}})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
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
	// A card published with default-valued members, signed as A2A 1.0 §8.4
	// says (without them), registers verified too.
	explicit := readCard(t, "explicit-defaults.json")
	payload, err := SigningPayload(explicit)
	if err != nil {
		t.Fatal(err)
	}
	if rec := register(t, r, agent, signOver(t, explicit, payload, pinned, nil)); !rec.SignatureVerified || rec.SignaturePayload != PayloadDefaultsRemoved {
		t.Errorf("card with explicit defaults signed over its §8.4 payload: verified %v over %q", rec.SignatureVerified, rec.SignaturePayload)
	}
	asPublished, err := SigningInput(explicit)
	if err != nil {
		t.Fatal(err)
	}
	if rec := register(t, r, agent, signOver(t, explicit, asPublished, pinned, nil)); !rec.SignatureVerified || rec.SignaturePayload != PayloadDefaultsKept {
		t.Errorf("card signed as published: verified %v over %q", rec.SignatureVerified, rec.SignaturePayload)
	}
	if _, err := NewRegistry(t.Context(), nil, []AgentConfig{{ID: "x", RequireSignature: true}}, 1); err == nil ||
		!strings.Contains(err.Error(), "require_signature needs signing_keys") {
		t.Errorf("require_signature without keys: %v", err)
	}
}

// setMember returns the card with the member at the JSON pointer ptr
// (object members only) set to the JSON value v, or removed when v is "".
func setMember(t *testing.T, raw []byte, ptr, v string) []byte {
	t.Helper()
	var root any
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	node := root
	for _, k := range keys[:len(keys)-1] {
		switch n := node.(type) {
		case map[string]any:
			node = n[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil {
				t.Fatal(err)
			}
			node = n[i]
		}
	}
	obj := node.(map[string]any)
	last := keys[len(keys)-1]
	if v == "" {
		delete(obj, last)
	} else {
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			t.Fatal(err)
		}
		obj[last] = val
	}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A card published with members at their default value ("tenant": "",
// "extensions": [{..., "required": false}], "examples": [] ...) verifies
// whether its signer removed them first, as A2A 1.0 §8.4 says, or signed
// the card as published; Verify says which. Changing anything the payload
// covers after signing breaks the signature.
func TestVerifyCardWithExplicitDefaults(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys := []crypto.PublicKey{&key.PublicKey}
	card := readCard(t, "explicit-defaults.json")
	spec, err := SigningPayload(card)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := SigningInput(card)
	if err != nil {
		t.Fatal(err)
	}
	for _, member := range []string{`"tenant":""`, `"extensions":[{"description":"","required":false,`, `"examples":[]`, `"securitySchemes":{}`} {
		if !strings.Contains(string(plain), member) || strings.Contains(string(spec), member) {
			t.Fatalf("fixture: %s should be in the card and not in its payload:\n%s", member, spec)
		}
	}
	signedSpec := signOver(t, card, spec, key, nil)
	signedPlain := signOver(t, card, plain, key, nil)
	for _, c := range []struct {
		name string
		card []byte
		want PayloadForm // "" for ErrSignature
	}{
		{"signed over the §8.4 payload", signedSpec, PayloadDefaultsRemoved},
		{"signed over the card as published", signedPlain, PayloadDefaultsKept},
		{"default-valued members removed after signing", setMember(t, setMember(t, signedSpec, "/securitySchemes", ""), "/supportedInterfaces/0/tenant", ""), PayloadDefaultsRemoved},
		{"default-valued member added after signing", setMember(t, signedSpec, "/skills/0/inputModes", `[]`), PayloadDefaultsRemoved},
		{"skill name changed after signing", setMember(t, signedSpec, "/skills/0/name", `"Book any refund"`), ""},
		{"extension made required after signing", setMember(t, signedSpec, "/capabilities/extensions/0/required", `true`), ""},
		{"tenant set after signing", setMember(t, signedSpec, "/supportedInterfaces/0/tenant", `"acme"`), ""},
		{"optional member set to its default after signing", setMember(t, signedSpec, "/documentationUrl", `""`), ""},
		{"card as published changed after signing", setMember(t, signedPlain, "/version", `"2.1.1"`), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := Verify(c.card, keys)
			if c.want == "" {
				if !errors.Is(err, ErrSignature) || v.Signature != -1 {
					t.Fatalf("Verify = %+v, %v; want ErrSignature", v, err)
				}
				return
			}
			if err != nil || v != (Verified{Signature: 0, Payload: c.want}) {
				t.Fatalf("Verify = %+v, %v; want signature 0 over %s", v, err, c.want)
			}
		})
	}
}

// An optional member set to its default ("streaming": false) is part of the
// payload (A2A 1.0 §8.4.1: "Optional fields explicitly set to defaults MUST
// be included"): a signature over the payload without it, as a signer that
// cannot tell false from unset computes it, does not verify the card.
func TestVerifyKeepsExplicitOptionalFalse(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys := []crypto.PublicKey{&key.PublicKey}
	card := a2ad.FraudReviewCard() // capabilities {"streaming": false, "pushNotifications": false}
	payload, err := SigningPayload(card)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(payload), `"capabilities":{"pushNotifications":false,"streaming":false}`) {
		t.Fatalf("payload lost the explicit false capabilities:\n%s", payload)
	}
	unset, err := SigningPayload(setMember(t, card, "/capabilities", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unset), `"capabilities":{}`) {
		t.Fatalf("payload of the card with capabilities {}:\n%s", unset)
	}
	if _, err := Verify(signOver(t, card, unset, key, nil), keys); !errors.Is(err, ErrSignature) {
		t.Errorf("signed without the explicit false members: %v, want ErrSignature", err)
	}
	if v, err := Verify(signOver(t, card, payload, key, nil), keys); err != nil || v.Payload != PayloadDefaultsRemoved {
		t.Errorf("signed with them: %+v, %v", v, err)
	}
}

// Of several signatures, Verify reports the first that verifies over the
// §8.4 payload, even when an earlier one verifies over the card as
// published.
func TestVerifyPrefersTheSpecPayload(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	card := readCard(t, "explicit-defaults.json")
	spec, _ := SigningPayload(card)
	plain, _ := SigningInput(card)
	var first, second struct {
		Signatures []json.RawMessage `json:"signatures"`
	}
	_ = json.Unmarshal(signOver(t, card, plain, key, nil), &first)
	_ = json.Unmarshal(signOver(t, card, spec, key, nil), &second)
	sigs, _ := json.Marshal(append(first.Signatures, second.Signatures...))
	both := setMember(t, card, "/signatures", string(sigs))
	v, err := Verify(both, []crypto.PublicKey{&key.PublicKey})
	if err != nil || v != (Verified{Signature: 1, Payload: PayloadDefaultsRemoved}) {
		t.Errorf("Verify = %+v, %v; want signature 1 over %s", v, err, PayloadDefaultsRemoved)
	}
	if i, err := VerifySignatures(both, []crypto.PublicKey{&key.PublicKey}); i != 1 || err != nil {
		t.Errorf("VerifySignatures = %d, %v", i, err)
	}
}
