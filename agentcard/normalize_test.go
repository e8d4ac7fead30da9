package agentcard

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
)

func legacyFixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/cards/fraud-review-0.3.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The 0.3 fixture and the 1.0 fixture describe the same agent: normalised,
// they parse to the same card, but for the protocol version the 0.3 card
// declares on its interface.
func TestNormalizeLegacyCardMatchesTheSameCardIn10(t *testing.T) {
	n, err := Normalize(legacyFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	c3, err := Parse(n)
	if err != nil {
		t.Fatalf("normalised 0.3 card does not parse: %v\n%s", err, n)
	}
	c1, err := Parse(a2ad.FraudReviewCard())
	if err != nil {
		t.Fatal(err)
	}
	if len(c3.SupportedInterfaces) != 1 || c3.SupportedInterfaces[0].ProtocolVersion != "0.3.0" {
		t.Fatalf("interfaces %+v", c3.SupportedInterfaces)
	}
	c3.SupportedInterfaces[0].ProtocolVersion = "1.0"
	if !reflect.DeepEqual(c1, c3) {
		t.Errorf("normalised 0.3 card:\n%+v\nwant the 1.0 card:\n%+v", c3, c1)
	}
	if same, err := Normalize(a2ad.FraudReviewCard()); err != nil || string(same) != string(a2ad.FraudReviewCard()) {
		t.Errorf("a 1.0 card changed: %v", err)
	}
}

func TestNormalizeRefusals(t *testing.T) {
	for _, c := range []struct{ card, ptr string }{
		{`{"url":"https://a.example/a2a","supportedInterfaces":[]}`, "/supportedInterfaces"},
		{`{"url":"https://a.example/a2a","securitySchemes":{"k":{"type":"apiKey"}}}`, "/securitySchemes"},
		{`{"url":"https://a.example/a2a","skills":[{"id":"s","security":[{"k":[]}]}]}`, "/skills/0/security"},
		{`{"url":7}`, "/url"},
		{`{"protocolVersion":"0.3.0"}`, "/url"},
		{`{"url":"https://a.example/a2a","additionalInterfaces":[{"url":"https://b.example"}]}`, "/additionalInterfaces/0"},
	} {
		_, err := Normalize([]byte(c.card))
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Pointer != c.ptr {
			t.Errorf("%s: %v, want a ValidationError at %s", c.card, err, c.ptr)
		}
	}
}

func TestNormalizeAdditionalInterfaces(t *testing.T) {
	n, err := Normalize([]byte(`{"url":"https://a.example/a2a","preferredTransport":"JSONRPC","additionalInterfaces":[
		{"url":"https://a.example/a2a","transport":"JSONRPC"},{"url":"https://a.example/grpc","transport":"GRPC"}],
		"supportsAuthenticatedExtendedCard":true,"capabilities":{"stateTransitionHistory":true,"streaming":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `"supportedInterfaces":[{"url":"https://a.example/a2a","protocolBinding":"JSONRPC","protocolVersion":"0.3.0"},{"url":"https://a.example/grpc","protocolBinding":"GRPC","protocolVersion":"0.3.0"}]`
	if !strings.Contains(string(n), want) || !strings.Contains(string(n), `"capabilities":{"extendedAgentCard":true,"streaming":true}`) {
		t.Errorf("normalised: %s", n)
	}
}

// A registered 0.3 card is kept in its 1.0 form; speaking A2A 0.3, the
// agent is listed but not delegable, with the reason.
func TestRegisterLegacyCard(t *testing.T) {
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true})
	rec := register(t, r, agent, legacyFixture(t))
	if !strings.Contains(string(rec.Card), `"supportedInterfaces"`) || strings.Contains(string(rec.Card), `"preferredTransport"`) {
		t.Errorf("stored card: %s", rec.Card)
	}
	if rec.Delegable || !strings.Contains(rec.NotDelegableReason, "protocolVersion 1.0") {
		t.Errorf("delegable %v, reason %q", rec.Delegable, rec.NotDelegableReason)
	}
}

// Untrusted cards: Normalize never panics, and what it returns Parse either
// accepts or refuses with a ValidationError.
func FuzzNormalize(f *testing.F) {
	f.Add(a2ad.FraudReviewCard())
	f.Add(legacyFixture(f))
	f.Add([]byte(`{"url":"x","additionalInterfaces":[{"url":"y","transport":"z"}],"capabilities":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := Normalize(raw)
		var ve *ValidationError
		if err != nil {
			if !errors.As(err, &ve) {
				t.Fatalf("Normalize error %T %v", err, err)
			}
			return
		}
		if _, err := Parse(n); err != nil && !errors.As(err, &ve) {
			t.Fatalf("Parse error %T %v", err, err)
		}
	})
}
