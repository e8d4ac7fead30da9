package agentcard

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const legacyNote = "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used"

// Cards the ecosystem publishes are accepted: the A2A 1.0 specification's
// own sample (§8.5, as released in v1.0.1, which still spells its security
// requirement the 0.3 way), the same sample with the gRPC interface as
// a2a.proto spells a gRPC target (host:443) and an extension, the card
// @a2a-js/sdk 1.3 serves (0.3 fields beside supportedInterfaces: read as
// 1.0), and a template card with `example` for `examples` and a later
// top-level field. What a2ad does not know is a note with its pointer, and
// stays in the stored card and its fingerprint.
func TestEcosystemCardsAccepted(t *testing.T) {
	for _, c := range []struct {
		file    string
		notes   []Note
		unknown string // a member that must survive into the stored card
	}{
		{"a2a-1.0-spec-sample.json", []Note{{"/security", legacyNote + " (1.0 spells it securityRequirements)"}}, `"security":[{"google":["openid","profile","email"]}]`},
		{"a2a-1.0-spec-sample-grpc-target.json", nil, ""},
		{"a2a-js-1.3-mixed.json", []Note{
			{"/url", legacyNote}, {"/preferredTransport", legacyNote}, {"/protocolVersion", legacyNote},
			{"/supportsAuthenticatedExtendedCard", legacyNote + " (1.0 has capabilities.extendedAgentCard)"},
		}, `"preferredTransport":"JSONRPC"`},
		{"template-example.json", []Note{
			{"/skills/0/example", "unknown field: kept, not used (did you mean examples?)"},
			{"/agentIdentity", "unknown field: kept, not used"},
		}, `"agentIdentity":{"did":"did:web:invoice-summary.example.com"}`},
	} {
		t.Run(c.file, func(t *testing.T) {
			raw := readCard(t, c.file)
			card, notes, err := Check(raw)
			if err != nil {
				t.Fatalf("Check = %v", err)
			}
			if !reflect.DeepEqual(notes, c.notes) {
				t.Errorf("notes %+v, want %+v", notes, c.notes)
			}
			if card.Name == "" || len(card.Skills) == 0 {
				t.Errorf("read %+v", card)
			}

			r, _ := newRegistry(t, AgentConfig{ID: "eco", Tenants: []string{"default"}, TrustOnFirstUse: true})
			rec := register(t, r, "eco", raw)
			// The record adds the notes of the id it is registered under.
			if want := append(slices.Clone(c.notes), AgentNotes("eco", card)...); !reflect.DeepEqual(rec.Notes, want) {
				t.Errorf("record notes %+v, want %+v", rec.Notes, want)
			}
			if c.unknown == "" {
				return
			}
			if !bytes.Contains(rec.Card, []byte(c.unknown)) {
				t.Errorf("stored card lost %s: %s", c.unknown, rec.Card)
			}
			want, err := Fingerprint(raw)
			if err != nil || rec.Fingerprint != want {
				t.Errorf("fingerprint %s, want the card's own %s (%v)", rec.Fingerprint, want, err)
			}
			compact := compactT(t, raw)
			without, err := Fingerprint(bytes.Replace(bytes.Replace(compact, []byte(c.unknown+","), nil, 1), []byte(","+c.unknown), nil, 1))
			if err != nil || without == rec.Fingerprint {
				t.Errorf("the fingerprint does not cover %s (%v)", c.unknown, err)
			}
		})
	}
}

func compactT(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A card missing several required fields is refused naming every one, each
// with its JSON pointer, and the registry keeps them all in the refusal.
func TestCardWithSeveralFaults(t *testing.T) {
	raw := readCard(t, "missing-fields.json")
	_, _, err := Check(raw)
	var ce *CardError
	if !errors.As(err, &ce) {
		t.Fatalf("Check = %v, want *CardError", err)
	}
	want := []*ValidationError{
		{"/skills/0/tags", "must be an array"},
		{"/description", "required"},
		{"/supportedInterfaces/0/protocolVersion", "required"},
		{"/version", "required"},
		{"/defaultOutputModes", "required"},
		{"/skills/0/name", "required"},
	}
	if !reflect.DeepEqual(ce.Faults, want) {
		t.Errorf("faults %+v, want %+v", ce.Faults, want)
	}
	if got := err.Error(); got != "agentcard: 6 faults: /skills/0/tags: must be an array; /description: required; /supportedInterfaces/0/protocolVersion: required; /version: required; /defaultOutputModes: required; /skills/0/name: required" {
		t.Errorf("Error() = %q", got)
	}
	r, _ := newRegistry(t, AgentConfig{ID: "half-written", Tenants: []string{"default"}})
	if _, err := r.Register(t.Context(), "half-written", raw); !errors.As(err, &ce) {
		t.Fatalf("Register = %v, want *CardError", err)
	}
	rec, err := r.Get(t.Context(), "half-written")
	if err != nil || rec.LastRefusal == nil {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
	if want := "the card is invalid at /skills/0/tags: must be an array; at /description: required; at /supportedInterfaces/0/protocolVersion: required; " +
		"at /version: required; at /defaultOutputModes: required; at /skills/0/name: required"; rec.LastRefusal.Reason != want {
		t.Errorf("refusal %q, want %q", rec.LastRefusal.Reason, want)
	}
}

// Faults and notes are bounded: a card of a thousand unknown members and
// a thousand bad skills ids reports MaxNotes notes and MaxFaults faults,
// each list ending with how many more there were.
func TestCheckBounds(t *testing.T) {
	raw := edit(t, func(c map[string]any) {
		for i := range 1000 {
			c["x"+strings.Repeat("y", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26%26))] = i
		}
		modes := make([]any, 1000)
		for i := range modes {
			modes[i] = i
		}
		c["defaultInputModes"] = modes
	})
	_, notes, err := Check(raw)
	var ce *CardError
	if !errors.As(err, &ce) || len(ce.Faults) != MaxFaults+1 || ce.Faults[MaxFaults].Reason != "and 950 more faults" {
		t.Fatalf("faults: %d, last %+v", len(ce.Faults), ce.Faults[len(ce.Faults)-1])
	}
	if len(notes) != MaxNotes+1 || !strings.HasPrefix(notes[MaxNotes].Reason, "and ") {
		t.Errorf("notes: %d, last %+v", len(notes), notes[len(notes)-1])
	}
}

// gRPC targets as a2a.proto (AgentInterface.url: "hostname:port") and the
// gRPC name syntax spell them are usable; anything else is a note, never a
// refusal.
func TestGRPCTargets(t *testing.T) {
	for target, ok := range map[string]bool{
		"georoute-agent.example.com:443":   true,
		"127.0.0.1:50051":                  true,
		"[::1]:50051":                      true,
		"dns:///grpc.example.com:443":      true,
		"dns://8.8.8.8/grpc.example.com":   true,
		"dns:grpc.example.com":             true,
		"https://grpc.example.com/a2a":     true,
		"grpcs://grpc.example.com":         true,
		"grpc.example.com":                 false,
		"grpc.example.com:https":           false,
		"grpc.example.com:0":               false,
		":443":                             false,
		"ftp://grpc.example.com":           false,
		"https://user:pw@grpc.example.com": false,
	} {
		if got := grpcTarget(target); got != ok {
			t.Errorf("grpcTarget(%q) = %v, want %v", target, got, ok)
		}
		raw := edit(t, func(c map[string]any) {
			c["supportedInterfaces"] = append(c["supportedInterfaces"].([]any), map[string]any{"url": target, "protocolBinding": "GRPC", "protocolVersion": "1.0"})
		})
		_, notes, err := Check(raw)
		if err != nil {
			t.Errorf("%s: refused: %v", target, err)
		}
		if noted := len(notes) == 1 && notes[0].Pointer == "/supportedInterfaces/1/url"; noted == ok {
			t.Errorf("%s: notes %+v", target, notes)
		}
	}
}
