package agentcard

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/gowebpki/jcs"
)

func legacyFixture(t testing.TB) []byte {
	t.Helper()
	return readCard(t, "fraud-review-0.3.json")
}

func readCard(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/cards/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// canonical is the RFC 8785 form of a parsed card, so that cards whose opaque
// members (security schemes and requirements) differ only in member order and
// whitespace compare equal.
func canonical(t *testing.T, c *Card) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := jcs.Transform(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(canon)
}

// Each 0.3 fixture and its 1.0 counterpart describe the same agent:
// normalised, they parse to the same card, but for the protocol version the
// 0.3 card declares on its interfaces.
func TestNormalizeLegacyCardMatchesTheSameCardIn10(t *testing.T) {
	for _, c := range []struct{ legacy, current string }{
		{"fraud-review-0.3.json", "fraud-review.json"},
		{"refund-ledger-0.3.json", "refund-ledger.json"}, // every 0.3 security scheme type, card and skill security
	} {
		t.Run(c.legacy, func(t *testing.T) {
			n, err := Normalize(readCard(t, c.legacy))
			if err != nil {
				t.Fatal(err)
			}
			c3, err := Parse(n)
			if err != nil {
				t.Fatalf("normalised 0.3 card does not parse: %v\n%s", err, n)
			}
			current := readCard(t, c.current)
			c1, err := Parse(current)
			if err != nil {
				t.Fatal(err)
			}
			for i, in := range c3.SupportedInterfaces {
				if in.ProtocolVersion != "0.3.0" {
					t.Fatalf("interface %d: %+v", i, in)
				}
				c3.SupportedInterfaces[i].ProtocolVersion = "1.0"
			}
			if got, want := canonical(t, c3), canonical(t, c1); got != want {
				t.Errorf("normalised 0.3 card:\n%s\nwant the 1.0 card:\n%s", got, want)
			}
			if same, err := Normalize(current); err != nil || string(same) != string(current) {
				t.Errorf("a 1.0 card changed: %v", err)
			}
		})
	}
}

// normalizedMember normalises card and returns the named top-level member of
// the result.
func normalizedMember(t *testing.T, card, member string) string {
	t.Helper()
	n, err := Normalize([]byte(card))
	if err != nil {
		t.Fatalf("%s: %v", card, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(n, &m); err != nil {
		t.Fatal(err)
	}
	return string(m[member])
}

func TestNormalizeSecuritySchemes(t *testing.T) {
	for _, c := range []struct{ name, scheme, want string }{
		{"apiKey", `{"type":"apiKey","in":"header","name":"X-Key","description":"Per-tenant key"}`,
			`{"apiKeySecurityScheme":{"description":"Per-tenant key","location":"header","name":"X-Key"}}`},
		{"apiKey in query", `{"type":"apiKey","name":"key","in":"query"}`,
			`{"apiKeySecurityScheme":{"location":"query","name":"key"}}`},
		{"apiKey in cookie", `{"type":"apiKey","name":"sid","in":"cookie"}`,
			`{"apiKeySecurityScheme":{"location":"cookie","name":"sid"}}`},
		{"http bearer", `{"type":"http","scheme":"Bearer","bearerFormat":"JWT","description":"d"}`,
			`{"httpAuthSecurityScheme":{"description":"d","scheme":"Bearer","bearerFormat":"JWT"}}`},
		{"http basic, null member", `{"type":"http","scheme":"Basic","bearerFormat":null}`,
			`{"httpAuthSecurityScheme":{"scheme":"Basic"}}`},
		{"oauth2 authorizationCode", `{"type":"oauth2","description":"d","oauth2MetadataUrl":"https://as/.well-known/oauth-authorization-server",
			"flows":{"authorizationCode":{"authorizationUrl":"https://as/authorize","tokenUrl":"https://as/token","refreshUrl":"https://as/refresh","scopes":{"r":"Read","w":"Write"}}}}`,
			`{"oauth2SecurityScheme":{"description":"d","flows":{"authorizationCode":{"authorizationUrl":"https://as/authorize","tokenUrl":"https://as/token","refreshUrl":"https://as/refresh","scopes":{"r":"Read","w":"Write"}}},"oauth2MetadataUrl":"https://as/.well-known/oauth-authorization-server"}}`},
		{"oauth2 clientCredentials, no scopes", `{"type":"oauth2","flows":{"clientCredentials":{"tokenUrl":"https://as/token","scopes":{}}}}`,
			`{"oauth2SecurityScheme":{"flows":{"clientCredentials":{"tokenUrl":"https://as/token","scopes":{}}}}}`},
		// Deprecated in 1.0 but still in a2a.proto OAuthFlows.
		{"oauth2 implicit", `{"type":"oauth2","flows":{"implicit":{"authorizationUrl":"https://as/authorize","scopes":{"r":"Read"}},"password":null}}`,
			`{"oauth2SecurityScheme":{"flows":{"implicit":{"authorizationUrl":"https://as/authorize","scopes":{"r":"Read"}}}}}`},
		{"oauth2 password", `{"type":"oauth2","flows":{"password":{"tokenUrl":"https://as/token","refreshUrl":"https://as/refresh","scopes":{"r":"Read"}}}}`,
			`{"oauth2SecurityScheme":{"flows":{"password":{"tokenUrl":"https://as/token","refreshUrl":"https://as/refresh","scopes":{"r":"Read"}}}}}`},
		{"openIdConnect", `{"type":"openIdConnect","openIdConnectUrl":"https://idp/.well-known/openid-configuration","description":"d"}`,
			`{"openIdConnectSecurityScheme":{"description":"d","openIdConnectUrl":"https://idp/.well-known/openid-configuration"}}`},
		{"mutualTLS", `{"type":"mutualTLS","description":"Partner CA"}`, `{"mtlsSecurityScheme":{"description":"Partner CA"}}`},
		{"mutualTLS bare", `{"type":"mutualTLS"}`, `{"mtlsSecurityScheme":{}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := normalizedMember(t, `{"url":"https://a.example/a2a","securitySchemes":{"s":`+c.scheme+`}}`, "securitySchemes")
			if want := `{"s":` + c.want + `}`; got != want {
				t.Errorf("securitySchemes\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestNormalizeSecurityRequirements(t *testing.T) {
	// A requirement naming an undeclared scheme is mapped as it is: Parse
	// does not check 1.0 requirements against securitySchemes either.
	const card = `{"url":"https://a.example/a2a","securitySchemes":{"o":{"type":"mutualTLS"}},
		"security":[{"o":["read","write"]},{"k":[],"m":[]},{}],
		"skills":[{"id":"a"},{"id":"b","security":[{"o":["write"]}]},{"id":"c","security":null},{"id":"d","security":[]}]}`
	if got, want := normalizedMember(t, card, "securityRequirements"),
		`[{"schemes":{"o":{"list":["read","write"]}}},{"schemes":{"k":{},"m":{}}},{}]`; got != want {
		t.Errorf("securityRequirements\n got %s\nwant %s", got, want)
	}
	if got, want := normalizedMember(t, card, "skills"),
		`[{"id":"a"},{"id":"b","securityRequirements":[{"schemes":{"o":{"list":["write"]}}}]},{"id":"c"},{"id":"d","securityRequirements":[]}]`; got != want {
		t.Errorf("skills\n got %s\nwant %s", got, want)
	}
	if got := normalizedMember(t, card, "security"); got != "" {
		t.Errorf("security kept: %s", got)
	}
	if got := normalizedMember(t, `{"url":"https://a.example/a2a","security":null}`, "securityRequirements"); got != "" {
		t.Errorf("null security became %s", got)
	}
}

func TestNormalizeRefusals(t *testing.T) {
	const url = `"url":"https://a.example/a2a"`
	scheme := func(s string) string { return `{` + url + `,"securitySchemes":{"k":` + s + `}}` }
	flows := func(f string) string { return scheme(`{"type":"oauth2","flows":` + f + `}`) }
	for _, c := range []struct{ card, ptr, reason string }{
		{`{"url":7}`, "/url", ""},
		{`{"protocolVersion":"0.3.0"}`, "/url", ""},
		{`{"url":"https://a.example/a2a","additionalInterfaces":[{"url":"https://b.example"}]}`, "/additionalInterfaces/0", ""},
		// Duplicate members would be collapsed by decoding: refused first.
		{scheme(`{"type":"mutualTLS"},"k":{"type":"apiKey"}`), "", "cannot canonicalize"},

		{`{` + url + `,"securitySchemes":[]}`, "/securitySchemes", "must be an object"},
		{scheme(`"apiKey"`), "/securitySchemes/k", "must be an object"},
		{scheme(`null`), "/securitySchemes/k", "must be an object"},
		{scheme(`{}`), "/securitySchemes/k/type", "required"},
		{scheme(`{"type":null,"scheme":"Basic"}`), "/securitySchemes/k/type", "required"},
		{scheme(`{"type":7}`), "/securitySchemes/k/type", "must be a string"},
		{scheme(`{"type":"basic"}`), "/securitySchemes/k/type", `unknown security scheme type "basic"`},
		{`{` + url + `,"securitySchemes":{"a/b":{"type":"x"}}}`, "/securitySchemes/a~1b/type", "unknown security scheme type"},
		{scheme(`{"type":"apiKey","name":"k"}`), "/securitySchemes/k/in", "required"},
		{scheme(`{"type":"apiKey","name":"k","in":"body"}`), "/securitySchemes/k/in", "must be query, header or cookie"},
		{scheme(`{"type":"apiKey","in":"header"}`), "/securitySchemes/k/name", "required"},
		{scheme(`{"type":"apiKey","in":"header","name":7}`), "/securitySchemes/k/name", "must be a string"},
		{scheme(`{"type":"apiKey","in":"header","name":"k","description":7}`), "/securitySchemes/k/description", "must be a string"},
		{scheme(`{"type":"http","bearerFormat":"JWT"}`), "/securitySchemes/k/scheme", "required"},
		{scheme(`{"type":"oauth2"}`), "/securitySchemes/k/flows", "required"},
		{scheme(`{"type":"oauth2","flows":[]}`), "/securitySchemes/k/flows", "must be an object"},
		{flows(`{}`), "/securitySchemes/k/flows", "required: one of"},
		// 1.0 OAuthFlows is a oneof: a second flow has no place.
		{flows(`{"authorizationCode":{"authorizationUrl":"https://as/a","tokenUrl":"https://as/t","scopes":{}},"implicit":{"authorizationUrl":"https://as/a","scopes":{}}}`),
			"/securitySchemes/k/flows/implicit", "one OAuth flow, and this one already has authorizationCode"},
		{flows(`{"deviceCode":{}}`), "/securitySchemes/k/flows/deviceCode", "unknown field"},
		{flows(`{"authorizationCode":{"authorizationUrl":"https://as/a","scopes":{}}}`), "/securitySchemes/k/flows/authorizationCode/tokenUrl", "required"},
		{flows(`{"authorizationCode":{"tokenUrl":"https://as/t","scopes":{}}}`), "/securitySchemes/k/flows/authorizationCode/authorizationUrl", "required"},
		{flows(`{"clientCredentials":{"tokenUrl":"https://as/t"}}`), "/securitySchemes/k/flows/clientCredentials/scopes", "required"},
		{flows(`{"clientCredentials":{"tokenUrl":"","scopes":{}}}`), "/securitySchemes/k/flows/clientCredentials/tokenUrl", "required"},
		{flows(`{"clientCredentials":{"tokenUrl":"https://as/t","scopes":{"r":1}}}`), "/securitySchemes/k/flows/clientCredentials/scopes/r", "must be a string"},
		{flows(`{"clientCredentials":{"tokenUrl":"https://as/t","scopes":["r"]}}`), "/securitySchemes/k/flows/clientCredentials/scopes", "must be an object"},
		{flows(`{"implicit":{"scopes":{}}}`), "/securitySchemes/k/flows/implicit/authorizationUrl", "required"},
		{flows(`{"password":{"tokenUrl":"https://as/t"}}`), "/securitySchemes/k/flows/password/scopes", "required"},
		{flows(`{"password":"x"}`), "/securitySchemes/k/flows/password", "must be an object"},
		{scheme(`{"type":"openIdConnect"}`), "/securitySchemes/k/openIdConnectUrl", "required"},

		{`{` + url + `,"security":{}}`, "/security", "must be an array"},
		{`{` + url + `,"security":[[]]}`, "/security/0", "must be an object"},
		{`{` + url + `,"security":[{},null]}`, "/security/1", "must be an object"},
		{`{` + url + `,"security":[{"k":"r"}]}`, "/security/0/k", "must be an array"},
		{`{` + url + `,"security":[{"k":[1]}]}`, "/security/0/k/0", "must be a string"},
		{`{` + url + `,"security":[],"securityRequirements":[]}`, "/securityRequirements", "mixes in 1.0 securityRequirements"},
		{`{` + url + `,"securityRequirements":[{"schemes":{}}]}`, "/securityRequirements", "mixes in 1.0 securityRequirements"},
		{`{` + url + `,"skills":[{"id":"s"},{"id":"t","security":[{"k":[7]}]}]}`, "/skills/1/security/0/k/0", "must be a string"},
		{`{` + url + `,"skills":[{"id":"s","securityRequirements":[]}]}`, "/skills/0/securityRequirements", "mixes in 1.0 securityRequirements"},
	} {
		_, err := Normalize([]byte(c.card))
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Pointer != c.ptr || !strings.Contains(ve.Reason, c.reason) {
			t.Errorf("%s: %v, want a ValidationError at %q saying %q", c.card, err, c.ptr, c.reason)
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
	// A small secured card rather than the refund-ledger fixture: the fuzzer
	// would spend its run minimizing a large seed.
	f.Add([]byte(`{"url":"x","securitySchemes":{"a":{"type":"apiKey","in":"header","name":"n"},"h":{"type":"http","scheme":"Bearer"},` +
		`"o":{"type":"oauth2","flows":{"implicit":{"authorizationUrl":"u","scopes":{"r":""}}}},"i":{"type":"openIdConnect","openIdConnectUrl":"u"},"m":{"type":"mutualTLS"}},` +
		`"security":[{"o":["r"]},{"a":[],"m":[]}],"skills":[{"id":"s","security":[{"h":[]}]}]}`))
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

// A 0.3 security scheme's members its type does not define are no fault:
// they are kept in the 1.0 form, where Check notes them, and a vendor
// member of a flow is kept too.
func TestNormalizeKeepsUnknownSchemeMembers(t *testing.T) {
	var card map[string]any
	if err := json.Unmarshal(legacyFixture(t), &card); err != nil {
		t.Fatal(err)
	}
	card["securitySchemes"] = map[string]any{
		"bearer": map[string]any{"type": "http", "scheme": "Bearer", "x-vendor": true},
		"oauth": map[string]any{"type": "oauth2", "flows": map[string]any{"implicit": map[string]any{
			"authorizationUrl": "https://as.example/a", "tokenUrl": "https://as.example/t", "scopes": map[string]any{}}}},
	}
	raw, _ := json.Marshal(card)
	normal, err := Normalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer","x-vendor":true}}`, `"tokenUrl":"https://as.example/t"`} {
		if !strings.Contains(string(normal), want) {
			t.Errorf("the 1.0 form lacks %s: %s", want, normal)
		}
	}
	_, notes, err := Check(raw)
	if err != nil {
		t.Fatal(err)
	}
	// The note names the member of the card as presented.
	if want := []Note{{"/securitySchemes/bearer/x-vendor", "unknown field: kept, not used"}}; !reflect.DeepEqual(notes, want) {
		t.Errorf("notes %+v, want %+v", notes, want)
	}
}

// A 0.3 card is refused for every fault at once, of its rewriting (an
// additionalInterfaces entry without url) and of its 1.0 form, each at the
// pointer of the card as presented: /url, not /supportedInterfaces/0/url;
// /security/0/nope, not /securityRequirements/0/schemes/nope.
func TestNormalize03EveryFaultAtPresentedPointers(t *testing.T) {
	var c map[string]any
	if err := json.Unmarshal(readCard(t, "fraud-review-0.3.json"), &c); err != nil {
		t.Fatal(err)
	}
	delete(c, "description")
	c["url"] = "ftp://x"
	c["preferredTransport"] = natsbind.BindingURI
	c["securitySchemes"] = map[string]any{"s": map[string]any{"type": "apiKey", "name": "k", "in": "header"}}
	c["security"] = []any{map[string]any{"nope": []any{}}}
	c["additionalInterfaces"] = []any{map[string]any{"transport": "GRPC"}}
	c["skills"].([]any)[0].(map[string]any)["security"] = []any{map[string]any{"s": []any{"a"}, "other": []any{}}}
	raw, _ := json.Marshal(c)
	_, _, err := Check(raw)
	var ce *CardError
	if !errors.As(err, &ce) {
		t.Fatalf("Check = %v, want a *CardError", err)
	}
	var got []string
	for _, f := range ce.Faults {
		got = append(got, f.Pointer+": "+f.Reason)
	}
	want := []string{
		"/additionalInterfaces/0: url and transport are required",
		"/description: required",
		`/url: scheme "ftp" is not allowed (want nats, tls, ws, wss, https, http, grpc)`,
		"/security/0/nope: names a security scheme that securitySchemes does not declare",
		"/skills/0/security/0/other: names a security scheme that securitySchemes does not declare",
	}
	if !reflect.DeepEqual(got, want) || ce.Total != len(want) {
		t.Errorf("faults (total %d)\n%s\nwant\n%s", ce.Total, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
