package agentcard

import (
	"errors"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/natsbind"
)

// FuzzParse feeds Parse untrusted card bytes: it must never panic, refuse
// only with *ValidationError, and accept only cards that validate and have a
// fingerprint.
func FuzzParse(f *testing.F) {
	// Small seeds: the fuzzer minimizes every input that finds new coverage,
	// and a large seed such as the fixture would spend the run minimizing.
	const card = `{"name":"A","description":"d","version":"1","supportedInterfaces":[{"url":"nats://h:4222/a2a.agent.a","protocolBinding":"urn:a2ad:binding:nats:v1","protocolVersion":"1.0"}],` +
		`"provider":{"url":"https://p","organization":"o"},"capabilities":{"streaming":false},"defaultInputModes":["t"],"defaultOutputModes":["t"],` +
		`"skills":[{"id":"s","name":"n","description":"d","tags":[],"examples":["e"],"inputModes":["t"],"outputModes":["t"]}]}`
	const opaque = `{"name":"A","description":"d","version":"1","supportedInterfaces":[{"url":"grpc://h:1","protocolBinding":"GRPC","protocolVersion":"1.0","tenant":"t"}],` +
		`"capabilities":{"extensions":[{"uri":"u","params":{"n":1e300}}]},"securitySchemes":{"b":{}},"securityRequirements":[{}],"defaultInputModes":["t"],"defaultOutputModes":["t"],` +
		`"skills":[{"id":"s","name":"n","description":"d","tags":["x"],"securityRequirements":[{}]}],"signatures":[{"protected":"x","signature":"y"}],"documentationUrl":"https://d","iconUrl":"http://i"}`
	for _, s := range []string{
		card, opaque, `{}`, `[]`, `null`, `{"name":"a","name":"b"}`, `{"a/b~":1}`, `{"name":"\ud800"}`, `{"skills":[{"id":"s"},{"id":"s"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Parse(raw)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error %T %v, want *ValidationError", err, err)
			}
			// A refusal's reason quotes nothing of the card.
			if reason, ok := refusalReason(err); !ok || strings.ContainsAny(reason, "\"'`\\") || strings.ContainsFunc(reason, func(r rune) bool { return r < ' ' || r > '~' }) {
				t.Fatalf("refusal reason %q of %v", reason, err)
			}
			return
		}
		for _, n := range agentNotes("a", c.SupportedInterfaces) {
			if id, ok := strings.CutPrefix(n.Reason, "names agent "); ok && !natsbind.ValidToken(id[:strings.Index(id, ", not a")]) {
				t.Fatalf("agentNotes quotes %q", n.Reason)
			}
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a card that Validate refuses: %v", err)
		}
		fp, err := Fingerprint(raw)
		if err != nil {
			t.Fatalf("Parse accepted a card without a fingerprint: %v", err)
		}
		if !validFingerprint(fp) {
			t.Fatalf("Fingerprint = %q", fp)
		}
	})
}

// FuzzCheck feeds Check (Normalize, then Parse) untrusted card bytes, 0.3
// or 1.0: it must never panic; a refusal names at most MaxFaults faults
// (and one more saying how many were left), in a2ad's words only; notes
// are bounded likewise; an accepted card's 1.0 form has a fingerprint.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"name":"A","url":"https://a","preferredTransport":"GRPC","supportedInterfaces":[{"url":"h:443","protocolBinding":"GRPC","protocolVersion":"1.0"}],"x":1}`,
		`{"name":"A","url":"https://a","securitySchemes":{"k":{"type":"http","scheme":"b","x":1}},"security":[{"k":[]}]}`,
		`{"securitySchemes":{"k":{"apiKeySecurityScheme":{},"mtlsSecurityScheme":{}}},"securityRequirements":[{"schemes":{"z":{"list":[1]}}}]}`,
		`{"skills":[{"example":[]},7],"capabilities":{"extensions":[1]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, notes, err := Check(raw)
		if len(notes) > MaxNotes+1 {
			t.Fatalf("%d notes", len(notes))
		}
		if err != nil {
			var ce *CardError
			if errors.As(err, &ce) && len(ce.Faults) > MaxFaults+1 {
				t.Fatalf("%d faults", len(ce.Faults))
			}
			if reason, ok := refusalReason(err); !ok || strings.ContainsAny(reason, "\"'`\\") || strings.ContainsFunc(reason, func(r rune) bool { return r < ' ' || r > '~' }) {
				t.Fatalf("refusal reason %q of %v", reason, err)
			}
			return
		}
		normal, err := Normalize(raw)
		if err != nil {
			t.Fatalf("Check accepted a card Normalize refuses: %v", err)
		}
		if _, err := Fingerprint(normal); err != nil {
			t.Fatalf("Check accepted a card without a fingerprint: %v", err)
		}
	})
}
