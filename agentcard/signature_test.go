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

// An approval stored before the configuration required a signature does not
// survive the new configuration: the agent stays approved but is not
// delegable, and the operator cannot approve the unsigned card again. The
// card signed with the pinned key makes it delegable.
func TestRequiredSignatureAppliesToStoredApprovals(t *testing.T) {
	const reason = "a signature is required and the card's signatures do not verify with the pinned keys"
	ctx := t.Context()
	before := AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true}
	r, js := newRegistry(t, before)
	register(t, r, agent, fixture(t))

	pinned, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	after := before
	after.SigningKeys, after.RequireSignature = []string{pinKey(t, pinned)}, true
	restarted, err := NewRegistry(ctx, js, []AgentConfig{after}, 1)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := restarted.Get(ctx, agent)
	if err != nil || rec.Status != StatusApproved || rec.Delegable || rec.NotDelegableReason != reason || rec.SignatureVerified {
		t.Fatalf("Get after require_signature = %s, %v; want approved, not delegable: %s", summary(rec), err, reason)
	}
	if list, err := restarted.List(ctx, "default"); err != nil || len(list) != 1 || list[0].Delegable || list[0].NotDelegableReason != reason {
		t.Errorf("List = %d records, %v; want one, not delegable", len(list), err)
	}
	var nd *NotDelegableError
	if _, _, err := restarted.ForDelegation(ctx, "default", agent, skill); !errors.As(err, &nd) || nd.Reason != reason {
		t.Errorf("ForDelegation = %v, want *NotDelegableError: %s", err, reason)
	}
	if _, err := restarted.Approve(ctx, agent, fixtureFingerprint); !errors.Is(err, ErrSignature) {
		t.Errorf("Approve(unsigned card) = %v, want ErrSignature", err)
	}

	// Same content, now signed: the fingerprint is the approved one, and
	// the stored card carries the new signature.
	signed := register(t, restarted, agent, signCard(t, fixture(t), pinned, nil))
	if !signed.Delegable || !signed.SignatureVerified || signed.Fingerprint != fixtureFingerprint {
		t.Fatalf("signed card = %s", summary(signed))
	}
	if got, err := restarted.Get(ctx, agent); err != nil || !got.Delegable || !got.SignatureVerified {
		t.Errorf("Get after the signed card = %s, %v", summary(got), err)
	}
	// The first instance pins no key: nothing verified there, and
	// nothing required.
	if got, err := r.Get(ctx, agent); err != nil || !got.Delegable || got.SignatureVerified || got.SignaturePayload != "" {
		t.Errorf("Get without pinned keys = %s, %v; want delegable, not verified", summary(got), err)
	}
}

// SignatureVerified says whether the card verifies with the keys pinned
// now, not with those pinned when it was registered.
func TestSignatureVerifiedFollowsThePinnedKeys(t *testing.T) {
	ctx := t.Context()
	old, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	next, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cfg := AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true, SigningKeys: []string{pinKey(t, old)}}
	r, js := newRegistry(t, cfg)
	if rec := register(t, r, agent, signCard(t, fixture(t), old, nil)); !rec.SignatureVerified {
		t.Fatalf("signed with the pinned key: %s", summary(rec))
	}
	cfg.SigningKeys = []string{pinKey(t, next)}
	rotated, err := NewRegistry(ctx, js, []AgentConfig{cfg}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := rotated.Get(ctx, agent); err != nil || rec.SignatureVerified || rec.SignaturePayload != "" || !rec.Delegable {
		t.Errorf("Get after key rotation = %s, %v; want not verified, still delegable", summary(rec), err)
	}
	cfg.RequireSignature = true
	strict, err := NewRegistry(ctx, js, []AgentConfig{cfg}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := strict.Get(ctx, agent); err != nil || rec.Delegable {
		t.Errorf("Get after key rotation, signature required = %s, %v; want not delegable", summary(rec), err)
	}
	if rec, err := r.Get(ctx, agent); err != nil || !rec.SignatureVerified || rec.SignaturePayload != PayloadDefaultsRemoved {
		t.Errorf("Get with the old key = %s, %v", summary(rec), err)
	}
}

// A 0.3 card is signed in its 0.3 shape: the registry verifies it as
// received, before it normalises it to 1.0 (and after, for a signer that
// signed the 1.0 form).
func TestRegisterVerifiesA03CardAsReceived(t *testing.T) {
	ctx := t.Context()
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true,
		SigningKeys: []string{"../testdata/cards/fraud-review-signing-key.pem", pinKey(t, other)}, RequireSignature: true})
	signed := readCard(t, "fraud-review-0.3-signed.json")
	rec, err := r.Register(ctx, agent, signed)
	if err != nil {
		t.Fatalf("Register(signed 0.3 card) = %v", err)
	}
	// This card has no member at a 1.0 default: its two payload forms are one.
	if !rec.SignatureVerified || rec.SignedForm != SignedAsReceived || rec.SignaturePayload != PayloadDefaultsRemoved || rec.Status != StatusApproved {
		t.Errorf("signed 0.3 card: verified %v, %q over %q, %s", rec.SignatureVerified, rec.SignedForm, rec.SignaturePayload, rec.Status)
	}
	if got, err := r.Get(ctx, agent); err != nil || !got.SignatureVerified || got.SignedForm != SignedAsReceived {
		t.Errorf("Get = %s, %v; want verified as received when read", summary(got), err)
	}
	tampered := []byte(strings.Replace(string(signed), "Fraud Review Agent", "Fraud Review Agent v2", 1))
	if _, err := r.Register(ctx, agent, tampered); !errors.Is(err, ErrSignature) {
		t.Errorf("Register(tampered 0.3 card) = %v, want ErrSignature", err)
	}
	unsigned := readCard(t, "fraud-review-0.3.json")
	normalized, err := Normalize(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := SigningPayload(normalized)
	if err != nil {
		t.Fatal(err)
	}
	rec, err = r.Register(ctx, agent, signOver(t, unsigned, payload, other, nil))
	if err != nil || !rec.SignatureVerified || rec.SignedForm != SignedNormalized || rec.SignaturePayload != PayloadDefaultsRemoved {
		t.Errorf("0.3 card signed over its 1.0 form: %s, %v", summary(rec), err)
	} else if got, err := r.Get(ctx, agent); err != nil || got.SignedForm != SignedNormalized {
		t.Errorf("Get = %s, %v; want verified over the normalized form when read", summary(got), err)
	}
}
