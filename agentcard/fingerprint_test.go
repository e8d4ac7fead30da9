package agentcard

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// fixtureFingerprint is the fingerprint of testdata/cards/fraud-review.json.
// Operators pin it in configuration: it must not drift with the code.
const fixtureFingerprint = "sha256:25def1edcba40677aa566a020fe76c1d30dc9124faf5eaaafbdff4e119f157a5"

func mustFingerprint(t testing.TB, raw []byte) string {
	t.Helper()
	fp, err := Fingerprint(raw)
	if err != nil {
		t.Fatalf("Fingerprint = %v", err)
	}
	return fp
}

func TestFingerprintFixture(t *testing.T) {
	raw := fixture(t)
	if got := mustFingerprint(t, raw); got != fixtureFingerprint {
		t.Errorf("Fingerprint(fixture) = %s, want %s", got, fixtureFingerprint)
	}
	if got := mustFingerprint(t, raw); got != fixtureFingerprint {
		t.Errorf("second Fingerprint(fixture) = %s, want %s", got, fixtureFingerprint)
	}
}

// TestFingerprintIsOverCanonicalForm writes the RFC 8785 form by hand:
// members sorted, no whitespace, signatures gone.
func TestFingerprintIsOverCanonicalForm(t *testing.T) {
	raw := []byte(`{ "skills": [ {"tags": [], "id": "s"} ],
		"name": "\u0041gent",  "signatures": [{"protected": "x", "signature": "y"}] }`)
	canonical := `{"name":"Agent","skills":[{"id":"s","tags":[]}]}`
	sum := sha256.Sum256([]byte(canonical))
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := mustFingerprint(t, raw); got != want {
		t.Errorf("Fingerprint = %s, want sha256 of %s = %s", got, canonical, want)
	}
}

func TestFingerprintInvariants(t *testing.T) {
	raw := fixture(t)
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	sorted, _ := json.Marshal(generic) // Go sorts members; the fixture does not
	indented := bytes.ReplaceAll(raw, []byte("  "), []byte("\t\t"))
	reordered := []byte(`{"version":"1.0.0",` + strings.TrimPrefix(strings.Replace(string(raw), `"version": "1.0.0",`, "", 1), "{"))

	same := []struct {
		name string
		raw  []byte
	}{
		{"members sorted and compact", sorted},
		{"other indentation", indented},
		{"version moved first", reordered},
		{"with signatures", edit(t, func(c map[string]any) {
			c["signatures"] = []any{map[string]any{"protected": "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0", "signature": "c2lnbmF0dXJl"}}
		})},
		{"escaped characters", bytes.Replace(raw, []byte(`"Fraud Review Agent"`), []byte(`"Fraud \u0052eview Agent"`), 1)},
	}
	for _, tt := range same {
		t.Run("same/"+tt.name, func(t *testing.T) {
			if bytes.Equal(tt.raw, raw) {
				t.Fatal("variant equals the fixture byte for byte")
			}
			if got := mustFingerprint(t, tt.raw); got != fixtureFingerprint {
				t.Errorf("Fingerprint = %s, want %s", got, fixtureFingerprint)
			}
		})
	}

	different := []struct {
		name   string
		change func(map[string]any)
	}{
		{"description", func(c map[string]any) { c["description"] = c["description"].(string) + "." }},
		{"skill tag", func(c map[string]any) { at(c, "skills", 0)["tags"] = []any{"fraud", "refunds"} }},
		{"interface url", func(c map[string]any) {
			at(c, "supportedInterfaces", 0)["url"] = "nats://10.0.0.1:4222/a2a.agent.fraud-review"
		}},
		{"default-valued member added", func(c map[string]any) { at(c, "supportedInterfaces", 0)["tenant"] = "" }},
		{"nested signatures", func(c map[string]any) { at(c, "capabilities")["signatures"] = []any{} }},
	}
	for _, tt := range different {
		t.Run("different/"+tt.name, func(t *testing.T) {
			if got := mustFingerprint(t, edit(t, tt.change)); got == fixtureFingerprint {
				t.Errorf("Fingerprint unchanged (%s)", got)
			}
		})
	}
}

func TestFingerprintRefuses(t *testing.T) {
	tests := []struct {
		name   string
		raw    []byte
		reason string
	}{
		{"not JSON", []byte(`{"a":`), "cannot canonicalize (RFC 8785): "},
		{"array", []byte(`[1]`), "card must be a JSON object"},
		{"duplicate member", []byte(`{"a":1,"a":2}`), `cannot canonicalize (RFC 8785): Duplicate key: "a"`},
		{"lone surrogate", []byte(`{"a":"\ud800"}`), "cannot canonicalize (RFC 8785): "},
		{"too big", []byte(`{"a":"` + strings.Repeat("x", MaxCardBytes) + `"}`), "card is 65544 bytes, more than 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp, err := Fingerprint(tt.raw)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Fingerprint = %q, %v; want *ValidationError", fp, err)
			}
			if !strings.HasPrefix(ve.Reason, tt.reason) {
				t.Errorf("reason = %q, want prefix %q", ve.Reason, tt.reason)
			}
		})
	}
}

func TestValidFingerprint(t *testing.T) {
	tests := map[string]bool{
		fixtureFingerprint:                  true,
		strings.ToUpper(fixtureFingerprint): false,
		"sha256:" + strings.Repeat("0", 63): false,
		strings.Repeat("0", 64):             false,
		"sha512:" + strings.Repeat("0", 64): false,
	}
	for s, want := range tests {
		if got := validFingerprint(s); got != want {
			t.Errorf("validFingerprint(%q) = %v, want %v", s, got, want)
		}
	}
}
