package agentcard

import (
	"crypto"
	"crypto/x509"
	"encoding/base64"
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

// VerifySignatures checks the card's JWS signatures (A2A 1.0 card signing:
// each {protected, signature} signs SigningInput, detached) against the
// pinned keys only: a key the card names (jku, jwk, x5u) is never fetched
// or trusted. It returns the index of the first signature that verifies
// with a pinned key, or an error wrapping ErrSignature: none verify, or the
// card has none.
func VerifySignatures(raw []byte, keys []crypto.PublicKey) (int, error) {
	var card struct {
		Signatures []struct {
			Protected string `json:"protected"`
			Signature string `json:"signature"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(raw, &card); err != nil {
		return -1, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	if len(card.Signatures) == 0 {
		return -1, fmt.Errorf("%w: the card carries no signature", ErrSignature)
	}
	payload, err := SigningInput(raw)
	if err != nil {
		return -1, err
	}
	enc := base64.RawURLEncoding.EncodeToString(payload)
	for i, s := range card.Signatures {
		jws, err := jose.ParseSignedCompact(s.Protected+"."+enc+"."+s.Signature, SignatureAlgorithms)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if _, err := jws.Verify(k); err == nil {
				return i, nil
			}
		}
	}
	return -1, fmt.Errorf("%w: none of its %d signatures verifies with a pinned key", ErrSignature, len(card.Signatures))
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
