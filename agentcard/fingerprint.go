package agentcard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/gowebpki/jcs"
)

// fingerprintPrefix starts every fingerprint; it names the hash so that
// another one can follow without ambiguity.
const fingerprintPrefix = "sha256:"

// Fingerprint identifies the content of an agent card, as an operator
// approves it: "sha256:" followed by the lowercase hex SHA-256 of the card's
// RFC 8785 (JCS) canonical JSON with the top-level "signatures" member
// removed. Member order and insignificant whitespace do not change it, nor do
// signatures added or removed; any change of content does.
//
// raw must be one JSON object of at most [MaxCardBytes] that RFC 8785 can
// canonicalize (no duplicate member names, valid UTF-8 and surrogate pairs,
// numbers within IEEE 754 double range); otherwise the error is a
// *[ValidationError]. Fingerprint does not validate the card: see [Parse].
//
// Unlike the signing input of A2A 1.0 §8.4, default-valued members are not
// dropped: the fingerprint pins the bytes' content exactly.
func Fingerprint(raw []byte) (string, error) {
	if len(raw) > MaxCardBytes {
		return "", invalid("", "card is %d bytes, more than %d", len(raw), MaxCardBytes)
	}
	return fingerprint(raw)
}

func fingerprint(raw []byte) (string, error) {
	canon, err := SigningInput(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return fingerprintPrefix + hex.EncodeToString(sum[:]), nil
}

// SigningInput is the RFC 8785 canonical form of a card without its
// signatures member: what its fingerprint hashes, and the second payload
// form [Verify] accepts a signature over ([PayloadDefaultsKept]); the A2A
// 1.0 §8.4 payload, with default values removed, is [SigningPayload].
// Errors are *ValidationError.
func SigningInput(raw []byte) ([]byte, error) {
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, invalid("", "cannot canonicalize (RFC 8785): %v", err)
	}
	// Canonicalizing first also refuses duplicate members, which decoding
	// into a map would silently collapse.
	if len(canon) == 0 || canon[0] != '{' {
		return nil, invalid("", "card must be a JSON object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(canon, &top); err != nil {
		return nil, invalid("", "card must be a JSON object")
	}
	if _, ok := top["signatures"]; ok {
		delete(top, "signatures")
		b, err := json.Marshal(top)
		if err != nil {
			return nil, err
		}
		if canon, err = jcs.Transform(b); err != nil {
			return nil, invalid("", "cannot canonicalize (RFC 8785): %v", err)
		}
	}
	return canon, nil
}

// validFingerprint reports whether s has the shape Fingerprint returns.
func validFingerprint(s string) bool {
	h, ok := strings.CutPrefix(s, fingerprintPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
