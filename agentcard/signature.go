package agentcard

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/go-jose/go-jose/v4"
)

// SignatureAlgorithms are the JWS algorithms a card signature may use.
var SignatureAlgorithms = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA, jose.RS256, jose.PS256}

// ErrSignature means a card's signatures do not verify against the keys the
// operator pinned for the agent (or a required signature is missing).
var ErrSignature = errors.New("agentcard: card signature not verified")

// PayloadForm names the bytes a card signature verified over.
type PayloadForm string

const (
	// PayloadDefaultsRemoved is [SigningPayload]: the card without its
	// default-valued members, as A2A 1.0 §8.4 has signers sign it.
	PayloadDefaultsRemoved PayloadForm = "defaults-removed"
	// PayloadDefaultsKept is [SigningInput]: the card as published, only
	// its signatures excluded.
	PayloadDefaultsKept PayloadForm = "defaults-kept"
)

// CardForm names the card a signature verified over. A card that
// [Normalize] rewrote, a 0.3 card, was signed in its 0.3 shape, as its
// agent sends it, unless its signer signed the A2A 1.0 form.
type CardForm string

const (
	// SignedAsReceived: the card as the agent sent it.
	SignedAsReceived CardForm = "as-received"
	// SignedNormalized: the A2A 1.0 form of a 0.3 card, which the registry
	// stores.
	SignedNormalized CardForm = "normalized"
)

// Verified names the card signature that verified and what it signs.
type Verified struct {
	// Signature is the index of the signature in the card's signatures.
	Signature int
	Payload   PayloadForm
}

// Verify checks a card's JWS signatures against the pinned keys only: a key
// the card names (jku, jwk, x5u) is never fetched or trusted. Each
// {protected, signature} of the card's signatures is a JWS whose payload is
// detached (A2A 1.0 §8.4.2); its algorithm must be one of
// [SignatureAlgorithms]. Verify returns the first signature that verifies
// with a pinned key over [PayloadDefaultsRemoved], else the first over
// [PayloadDefaultsKept]. It fails with an error wrapping [ErrSignature]
// when none verifies, the card has none, or it is not a JSON object with a
// well-formed signatures member; with a *[ValidationError] when a card with
// signatures cannot be canonicalized (RFC 8785).
//
// A2A 1.0 §8.4.3 verifies over [SigningPayload] alone. The second form is
// what a2ad verified before it removed default values, and what a signer
// that canonicalizes the card as published without removing them signs
// (a2ad documented [SigningInput] as what card signatures sign): such a
// signature fails over the first form as soon as the card carries a member
// at its default value, "extensions": [] or "tenant": "". Accepting it adds
// no latitude: whichever of the two forms a key signed, a card the signature
// verifies differs from the signed one at most in members the first form
// drops, and so leaves unsigned anyway.
//
// Other forms are refused. The first-party SDKs as read (a2a-python
// src/a2a/utils/signing.py at 46b292b4, a2a-js src/signature.ts at
// f844dad4) drop every empty string, list and object, those §8.4.1 keeps
// included: REQUIRED members ("description": "", "skills": []), optional
// members set to "" ("iconUrl": ""), present messages ({} for a mutual-TLS
// scheme) and members inside extension params; a2a-python also escapes
// non-ASCII characters, which RFC 8785 writes as UTF-8. The a2a-samples Go
// sample, on a2a-go's struct types, also drops optional bools set to false
// and escapes <, > and &. Their signatures verify here on cards free of
// these, whose payload they compute as [SigningPayload] does; accepting
// their forms would leave such members unsigned.
func Verify(raw []byte, keys []crypto.PublicKey) (Verified, error) {
	none := Verified{Signature: -1}
	var card struct {
		Signatures []struct {
			Protected string `json:"protected"`
			Signature string `json:"signature"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(raw, &card); err != nil {
		return none, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	if len(card.Signatures) == 0 {
		return none, fmt.Errorf("%w: the card carries no signature", ErrSignature)
	}
	var tried []byte
	for _, form := range []struct {
		name    PayloadForm
		payload func([]byte) ([]byte, error)
	}{
		{PayloadDefaultsRemoved, SigningPayload},
		{PayloadDefaultsKept, SigningInput},
	} {
		payload, err := form.payload(raw)
		if err != nil {
			return none, err
		}
		if bytes.Equal(payload, tried) {
			continue // a card without default-valued members: one payload
		}
		tried = payload
		for i, s := range card.Signatures {
			jws, err := jose.ParseDetached(s.Protected+".."+s.Signature, payload, SignatureAlgorithms)
			if err != nil {
				continue
			}
			for _, k := range keys {
				if _, err := jws.Verify(k); err == nil {
					return Verified{Signature: i, Payload: form.name}, nil
				}
			}
		}
	}
	return none, fmt.Errorf("%w: none of its %d signatures verifies with a pinned key", ErrSignature, len(card.Signatures))
}

// VerifySignatures is [Verify] reporting only the index of the signature
// that verified, or -1.
func VerifySignatures(raw []byte, keys []crypto.PublicKey) (int, error) {
	v, err := Verify(raw, keys)
	return v.Signature, err
}

// ReadPublicKeys reads PEM files of public keys (PKIX) or certificates.
func ReadPublicKeys(paths []string) ([]crypto.PublicKey, error) {
	var out []crypto.PublicKey
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("agentcard: signing key: %w", err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("agentcard: signing key %s: not PEM", p)
		}
		var k crypto.PublicKey
		switch blk.Type {
		case "PUBLIC KEY":
			k, err = x509.ParsePKIXPublicKey(blk.Bytes)
		case "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(blk.Bytes); err == nil {
				k = c.PublicKey
			}
		default:
			err = fmt.Errorf("PEM block %q is not PUBLIC KEY or CERTIFICATE", blk.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("agentcard: signing key %s: %w", p, err)
		}
		out = append(out, k)
	}
	return out, nil
}
