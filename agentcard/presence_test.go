package agentcard

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
	"github.com/gowebpki/jcs"
)

// signingVector is one entry of testdata/cards/signing-vectors.json: a card
// as published, the exact payload A2A 1.0 §8.4 signs for it, and what other
// implementations sign for it instead.
type signingVector struct {
	Name    string          `json:"name"`
	Source  string          `json:"source"`
	Card    json.RawMessage `json:"card"`
	Payload string          `json:"payload"`
	Signers []struct {
		Signer   string `json:"signer"`
		Payload  string `json:"payload"`
		Verifies bool   `json:"verifies"`
		Why      string `json:"why"`
	} `json:"signers"`
}

func signingVectors(t testing.TB) []signingVector {
	t.Helper()
	var vs []signingVector
	if err := json.Unmarshal(readCard(t, "signing-vectors.json"), &vs); err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestSigningPayloadVectors(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys := []crypto.PublicKey{&key.PublicKey}
	for _, v := range signingVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			got, err := SigningPayload(v.Card)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != v.Payload {
				t.Fatalf("SigningPayload (%s)\n got %s\nwant %s", v.Source, got, v.Payload)
			}
			if again, err := SigningPayload(got); err != nil || !bytes.Equal(again, got) {
				t.Errorf("payload of the payload = %s, %v", again, err)
			}
			// A signature over the payload verifies the card as published.
			if _, err := Verify(signOver(t, v.Card, got, key, nil), keys); err != nil {
				t.Errorf("signed over its payload: %v", err)
			}
			for _, s := range v.Signers {
				_, err := Verify(signOver(t, v.Card, []byte(s.Payload), key, nil), keys)
				if s.Verifies && err != nil || !s.Verifies && !errors.Is(err, ErrSignature) {
					t.Errorf("signed as %s (%s): Verify = %v, want verified %v", s.Signer, s.Why, err, s.Verifies)
				}
			}
		})
	}
}

// Each rule of SigningPayload on its own, on the smallest card that shows
// it.
func TestSigningPayloadRules(t *testing.T) {
	for _, c := range []struct{ rule, card, want string }{
		{"REQUIRED kept at its default",
			`{"name":"","skills":[],"capabilities":{},"supportedInterfaces":[{"url":"","protocolVersion":""}]}`,
			`{"capabilities":{},"name":"","skills":[],"supportedInterfaces":[{"protocolVersion":"","url":""}]}`},
		{"optional kept at its default",
			`{"documentationUrl":"","iconUrl":"","capabilities":{"streaming":false,"pushNotifications":false,"extendedAgentCard":false}}`,
			`{"capabilities":{"extendedAgentCard":false,"pushNotifications":false,"streaming":false},"documentationUrl":"","iconUrl":""}`},
		{"implicit string and bool dropped at their default",
			`{"supportedInterfaces":[{"tenant":""}],"capabilities":{"extensions":[{"uri":"","description":"","required":false}]}}`,
			`{"capabilities":{"extensions":[{}]},"supportedInterfaces":[{}]}`},
		{"implicit string and bool kept otherwise",
			`{"supportedInterfaces":[{"tenant":"t"}],"capabilities":{"extensions":[{"uri":"u","required":true}]}}`,
			`{"capabilities":{"extensions":[{"required":true,"uri":"u"}]},"supportedInterfaces":[{"tenant":"t"}]}`},
		{"repeated and map dropped when empty",
			`{"securitySchemes":{},"securityRequirements":[],"capabilities":{"extensions":[]},"skills":[{"tags":[],"examples":[],"inputModes":[],"outputModes":[],"securityRequirements":[{"schemes":{}}]}]}`,
			`{"capabilities":{},"skills":[{"securityRequirements":[{}],"tags":[]}]}`},
		{"REQUIRED map kept when empty, implicit map dropped",
			`{"securitySchemes":{"a":{"oauth2SecurityScheme":{"flows":{"clientCredentials":{"tokenUrl":"t","scopes":{}}}}},"b":{"oauth2SecurityScheme":{"flows":{"password":{"tokenUrl":"t","scopes":{}}}}}}}`,
			`{"securitySchemes":{"a":{"oauth2SecurityScheme":{"flows":{"clientCredentials":{"scopes":{},"tokenUrl":"t"}}}},"b":{"oauth2SecurityScheme":{"flows":{"password":{"tokenUrl":"t"}}}}}}`},
		{"message and oneof member kept when empty",
			`{"provider":{},"securitySchemes":{"m":{"mtlsSecurityScheme":{"description":""}}}}`,
			`{"provider":{},"securitySchemes":{"m":{"mtlsSecurityScheme":{}}}}`},
		{"elements and map values never dropped",
			`{"defaultInputModes":[""],"securityRequirements":[{},{"schemes":{"a":{},"b":{"list":[""]}}}]}`,
			`{"defaultInputModes":[""],"securityRequirements":[{},{"schemes":{"a":{},"b":{"list":[""]}}}]}`},
		{"Struct kept verbatim",
			`{"capabilities":{"extensions":[{"params":{"a":"","b":[],"c":{},"d":null,"e":false,"f":0.0}},{"params":{}}]}}`,
			`{"capabilities":{"extensions":[{"params":{"a":"","b":[],"c":{},"d":null,"e":false,"f":0}},{"params":{}}]}}`},
		{"null dropped",
			`{"name":null,"provider":null,"iconUrl":null,"capabilities":{"streaming":null,"extensions":[{"params":null}]},"skills":null}`,
			`{"capabilities":{"extensions":[{}]}}`},
		{"unknown member kept verbatim",
			`{"x":{"tenant":"","list":[],"n":null},"default_input_modes":[],"capabilities":{"stateTransitionHistory":false}}`,
			`{"capabilities":{"stateTransitionHistory":false},"default_input_modes":[],"x":{"list":[],"n":null,"tenant":""}}`},
		{"wrong JSON type kept verbatim",
			`{"capabilities":[],"skills":{},"provider":"","supportedInterfaces":[{"tenant":false},"x"],"securitySchemes":{"a":[]}}`,
			`{"capabilities":[],"provider":"","securitySchemes":{"a":[]},"skills":{},"supportedInterfaces":[{"tenant":false},"x"]}`},
		{"signatures excluded at the top only",
			`{"signatures":[{"protected":"p","signature":"s"}],"x":{"signatures":[]}}`,
			`{"x":{"signatures":[]}}`},
	} {
		t.Run(c.rule, func(t *testing.T) {
			got, err := SigningPayload([]byte(c.card))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("SigningPayload(%s)\n got %s\nwant %s", c.card, got, c.want)
			}
		})
	}
}

func TestSigningPayloadRefuses(t *testing.T) {
	for _, raw := range []string{``, `[]`, `null`, `"card"`, `{"name":"a","name":"b"}`, `{"name":"\ud800"}`, `{"a":1e400}`, `{`} {
		var ve *ValidationError
		if _, err := SigningPayload([]byte(raw)); !errors.As(err, &ve) {
			t.Errorf("SigningPayload(%s) = %v, want *ValidationError", raw, err)
		}
	}
}

// The presence table is closed: each field's type is a scalar, a Struct, or
// a message of the table, and every message is reachable from AgentCard.
func TestPresenceTableIsClosed(t *testing.T) {
	reached := map[string]bool{}
	var walk func(string)
	walk = func(name string) {
		if reached[name] {
			return
		}
		reached[name] = true
		for json, f := range cardMessages[name] {
			if strings.ContainsAny(json, "_ ") {
				t.Errorf("%s.%s: not a lowerCamelCase JSON name", name, json)
			}
			switch _, msg := cardMessages[f.typ]; {
			case msg:
				walk(f.typ)
			case f.typ == "string", f.typ == "bool", f.typ == "google.protobuf.Struct":
				if f.label == oneofMember {
					t.Errorf("%s.%s: a oneof of scalars is not in a2a.proto's card", name, json)
				}
			default:
				t.Errorf("%s.%s: unknown type %q", name, json, f.typ)
			}
		}
	}
	walk("AgentCard")
	if len(reached) != len(cardMessages) || len(cardMessages) != 21 {
		t.Errorf("reached %d of %d messages, want all 21 of a2a.proto v1.0.1", len(reached), len(cardMessages))
	}
}

func TestDeclareMessagesPanicsOnAMalformedDeclaration(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	declareMessages(map[string]map[string]string{"M": {"f": "repeated"}})
}

// FuzzSigningPayload feeds SigningPayload untrusted card bytes: it must
// never panic, refuse only with *ValidationError, and return canonical
// (RFC 8785) JSON that is its own payload.
func FuzzSigningPayload(f *testing.F) {
	// Small seeds: the fuzzer minimizes every input that finds new coverage.
	f.Add([]byte(`{"name":"Example Agent","description":"","capabilities":{"streaming":false,"pushNotifications":false,"extensions":[]},"skills":[]}`))
	f.Add([]byte(`{"securitySchemes":{"a":{"oauth2SecurityScheme":{"flows":{"implicit":{"scopes":{}},"authorizationCode":{"scopes":{},"pkceRequired":false}}}},"m":{"mtlsSecurityScheme":{}}},"securityRequirements":[{"schemes":{"a":{"list":[]}}}]}`))
	f.Add([]byte(`{"capabilities":{"extensions":[{"uri":"","required":false,"params":{"a":"","n":1.0}}]},"supportedInterfaces":[{"tenant":""}],"x":{"tenant":""},"signatures":[]}`))
	f.Add([]byte(`{"skills":[{"tags":[],"examples":[],"inputModes":null}],"provider":{},"iconUrl":"","skills ":[]}`))
	for _, s := range []string{`{}`, `[]`, `null`, `{"a/b~":1}`, `{"name":"\ud800"}`, `{"name":"a","name":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := SigningPayload(raw)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("SigningPayload error %T %v, want *ValidationError", err, err)
			}
			return
		}
		canon, err := jcs.Transform(p)
		if err != nil || !bytes.Equal(canon, p) {
			t.Fatalf("payload is not RFC 8785 canonical: %s (%v)", p, err)
		}
		again, err := SigningPayload(p)
		if err != nil || !bytes.Equal(again, p) {
			t.Fatalf("payload of the payload differs:\n%s\n%s (%v)", p, again, err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(p, &top); err != nil {
			t.Fatalf("payload is not an object: %v", err)
		}
		if _, ok := top["signatures"]; ok {
			t.Fatalf("payload keeps signatures: %s", p)
		}
	})
}

// The reference card has no member at its default value: its §8.4 payload
// is the card as published, so its fingerprint and its signatures cover
// the same bytes.
func TestSigningPayloadOfTheReferenceCard(t *testing.T) {
	card := a2ad.FraudReviewCard()
	spec, err := SigningPayload(card)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := SigningInput(card)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(spec, plain) {
		t.Errorf("payload differs from the card as published:\n%s\n%s", spec, plain)
	}
}
