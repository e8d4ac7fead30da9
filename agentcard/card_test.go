package agentcard

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

const fixturePath = "../testdata/cards/fraud-review.json"

// fixture returns the reference fraud-review card as sent on the wire.
func fixture(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// edit decodes the fixture, applies change to it and encodes it again.
func edit(t testing.TB, change func(card map[string]any)) []byte {
	t.Helper()
	var card map[string]any
	if err := json.Unmarshal(fixture(t), &card); err != nil {
		t.Fatal(err)
	}
	change(card)
	raw, err := json.Marshal(card)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// at walks a decoded card by member names and array indexes.
func at(card map[string]any, path ...any) map[string]any {
	var v any = card
	for _, p := range path {
		switch p := p.(type) {
		case string:
			v = v.(map[string]any)[p]
		case int:
			v = v.([]any)[p]
		}
	}
	return v.(map[string]any)
}

func TestParseFixture(t *testing.T) {
	c, err := Parse(fixture(t))
	if err != nil {
		t.Fatalf("Parse(fixture) = %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if c.Name != "Fraud Review Agent" || c.Version != "1.0.0" {
		t.Errorf("name, version = %q, %q", c.Name, c.Version)
	}
	if c.Provider == nil || *c.Provider != (Provider{URL: "https://github.com/a2ad/a2ad", Organization: "a2ad reference agents"}) {
		t.Errorf("provider = %+v", c.Provider)
	}
	want := Interface{URL: "nats://127.0.0.1:4222/a2a.agent.fraud-review", ProtocolBinding: "urn:a2ad:binding:nats:v1", ProtocolVersion: "1.0"}
	if got, ok := NATSInterface(c); !ok || got != want {
		t.Errorf("NATSInterface = %+v, %v; want %+v", got, ok, want)
	}
	if s := c.Capabilities.Streaming; s == nil || *s {
		t.Errorf("capabilities.streaming = %v, want explicit false", s)
	}
	if c.Capabilities.ExtendedAgentCard != nil {
		t.Errorf("capabilities.extendedAgentCard = %v, want absent", *c.Capabilities.ExtendedAgentCard)
	}
	if !reflect.DeepEqual(c.DefaultInputModes, []string{"application/json", "text/plain"}) || !reflect.DeepEqual(c.DefaultOutputModes, []string{"application/json"}) {
		t.Errorf("default modes = %q, %q", c.DefaultInputModes, c.DefaultOutputModes)
	}
	s, ok := c.Skill("assess_refund_risk")
	if !ok {
		t.Fatal(`Skill("assess_refund_risk") not found`)
	}
	if !reflect.DeepEqual(s.Tags, []string{"fraud", "refunds", "risk"}) || !reflect.DeepEqual(s.OutputModes, []string{"application/json"}) || len(s.Examples) == 0 {
		t.Errorf("skill = %+v", s)
	}
	if !strings.Contains(s.Description, "manual_review_above_cents") {
		t.Errorf("skill description does not mention manual_review_above_cents: %q", s.Description)
	}
	if _, ok := c.Skill("assess"); ok {
		t.Error(`Skill("assess") found`)
	}
}

func TestNATSInterfacePicksFirstSpeakingTheBinding(t *testing.T) {
	c := &Card{SupportedInterfaces: []Interface{
		{URL: "https://a.example/a2a", ProtocolBinding: "JSONRPC", ProtocolVersion: "1.0"},
		{URL: "nats://old:4222/a2a.agent.x", ProtocolBinding: "urn:a2ad:binding:nats:v1", ProtocolVersion: "0.3"},
		{URL: "nats://n1:4222/a2a.agent.x", ProtocolBinding: "urn:a2ad:binding:nats:v1", ProtocolVersion: "1.0"},
		{URL: "nats://n2:4222/a2a.agent.x", ProtocolBinding: "urn:a2ad:binding:nats:v1", ProtocolVersion: "1.0"},
	}}
	if in, ok := NATSInterface(c); !ok || in.URL != "nats://n1:4222/a2a.agent.x" {
		t.Errorf("NATSInterface = %+v, %v; want the nats://n1 entry", in, ok)
	}
	c.SupportedInterfaces = c.SupportedInterfaces[:2]
	if in, ok := NATSInterface(c); ok {
		t.Errorf("NATSInterface = %+v, want none", in)
	}
}

func TestParseRefuses(t *testing.T) {
	del := func(name string, path ...any) func(map[string]any) {
		return func(c map[string]any) { delete(at(c, path...), name) }
	}
	set := func(name string, v any, path ...any) func(map[string]any) {
		return func(c map[string]any) { at(c, path...)[name] = v }
	}
	manySkills := func(c map[string]any) {
		skills := make([]any, MaxSkills+1)
		for i := range skills {
			skills[i] = map[string]any{"id": strings.Repeat("s", i+1), "name": "n", "description": "d", "tags": []any{}}
		}
		c["skills"] = skills
	}
	tests := []struct {
		name    string
		change  func(map[string]any)
		pointer string
		reason  string
	}{
		{"no name", del("name"), "/name", "required"},
		{"empty name", set("name", ""), "/name", "required"},
		{"null name", set("name", nil), "/name", "required"},
		{"no description", del("description"), "/description", "required"},
		{"no version", del("version"), "/version", "required"},
		{"no supportedInterfaces", del("supportedInterfaces"), "/supportedInterfaces", "required"},
		{"empty supportedInterfaces", set("supportedInterfaces", []any{}), "/supportedInterfaces", "required"},
		{"interface without url", del("url", "supportedInterfaces", 0), "/supportedInterfaces/0/url", "required"},
		{"interface without protocolBinding", del("protocolBinding", "supportedInterfaces", 0), "/supportedInterfaces/0/protocolBinding", "required"},
		{"interface without protocolVersion", del("protocolVersion", "supportedInterfaces", 0), "/supportedInterfaces/0/protocolVersion", "required"},
		{"no capabilities", del("capabilities"), "/capabilities", "required"},
		{"null capabilities", set("capabilities", nil), "/capabilities", "required"},
		{"no defaultInputModes", del("defaultInputModes"), "/defaultInputModes", "required"},
		{"empty defaultInputModes", set("defaultInputModes", []any{}), "/defaultInputModes", "required"},
		{"empty input mode", set("defaultInputModes", []any{"text/plain", ""}), "/defaultInputModes/1", "required"},
		{"no defaultOutputModes", del("defaultOutputModes"), "/defaultOutputModes", "required"},
		{"no skills", del("skills"), "/skills", "required"},
		{"skill without id", del("id", "skills", 0), "/skills/0/id", "required"},
		{"skill without name", del("name", "skills", 0), "/skills/0/name", "required"},
		{"skill without description", del("description", "skills", 0), "/skills/0/description", "required"},
		{"skill without tags", del("tags", "skills", 0), "/skills/0/tags", "required"},
		{"provider without organization", del("organization", "provider"), "/provider/organization", "required"},
		{"provider without url", del("url", "provider"), "/provider/url", "required"},

		{"interface url scheme ftp", set("url", "ftp://files.example/a2a", "supportedInterfaces", 0), "/supportedInterfaces/0/url", `scheme "ftp" is not allowed (want nats, tls, ws, wss, https, http, grpc)`},
		{"relative interface url", set("url", "/a2a", "supportedInterfaces", 0), "/supportedInterfaces/0/url", `scheme "" is not allowed (want nats, tls, ws, wss, https, http, grpc)`},
		{"interface url without host", set("url", "nats:a2a.agent.x", "supportedInterfaces", 0), "/supportedInterfaces/0/url", "must be an absolute URL with a host"},
		{"interface url with credentials", set("url", "https://user:secret@agent.example/a2a", "supportedInterfaces", 0), "/supportedInterfaces/0/url", "must not carry user info"},
		{"unparsable url", set("url", "https://agent.example/%zz", "supportedInterfaces", 0), "/supportedInterfaces/0/url", "not a valid URL"},

		{"name not a string", set("name", 5), "/name", "must be a string"},
		{"tags not an array", set("tags", "fraud", "skills", 0), "/skills/0/tags", "must be an array"},
		{"tag not a string", set("tags", []any{"fraud", 7}, "skills", 0), "/skills/0/tags/1", "must be a string"},
		{"null tag", set("tags", []any{nil}, "skills", 0), "/skills/0/tags/0", "must be a string"},
		{"streaming not a boolean", set("streaming", "yes", "capabilities"), "/capabilities/streaming", "must be a boolean"},
		{"capabilities not an object", set("capabilities", []any{}), "/capabilities", "must be an object"},
		{"skill not an object", set("skills", []any{"assess_refund_risk"}), "/skills/0", "must be an object"},
		{"signature not an object", set("signatures", []any{"eyJhbGciOi"}), "/signatures/0", "must be an object"},
		{"extension not an object", set("extensions", []any{"urn:x"}, "capabilities"), "/capabilities/extensions/0", "must be an object"},
		{"security scheme not an object", set("securitySchemes", map[string]any{"bearer": map[string]any{}, "apiKey": 1}), "/securitySchemes/apiKey", "must be an object"},
		{"securitySchemes not an object", set("securitySchemes", []any{}), "/securitySchemes", "must be an object"},
		{"two kinds of one security scheme", set("securitySchemes", map[string]any{"k": map[string]any{"apiKeySecurityScheme": map[string]any{}, "mtlsSecurityScheme": map[string]any{}}}),
			"/securitySchemes/k", "declares 2 kinds of security scheme (apiKeySecurityScheme, mtlsSecurityScheme), an A2A 1.0 scheme is one"},
		{"requirement of an undeclared scheme", set("securityRequirements", []any{map[string]any{"schemes": map[string]any{"oauth": map[string]any{"list": []any{}}}}}),
			"/securityRequirements/0/schemes/oauth", "names a security scheme that securitySchemes does not declare"},
		{"skill requirement of an undeclared scheme", set("securityRequirements", []any{map[string]any{"schemes": map[string]any{"oauth": map[string]any{}}}}, "skills", 0),
			"/skills/0/securityRequirements/0/schemes/oauth", "names a security scheme that securitySchemes does not declare"},
		{"requirement scopes not a list", func(c map[string]any) {
			c["securitySchemes"] = map[string]any{"oauth": map[string]any{"oauth2SecurityScheme": map[string]any{}}}
			c["securityRequirements"] = []any{map[string]any{"schemes": map[string]any{"oauth": map[string]any{"list": "read"}}}}
		}, "/securityRequirements/0/schemes/oauth/list", "must be an array"},

		{"duplicate skill id", func(c map[string]any) {
			s := c["skills"].([]any)
			c["skills"] = append(s, map[string]any{"id": "assess_refund_risk", "name": "again", "description": "d", "tags": []any{}})
		}, "/skills/1/id", "duplicate skill id (also /skills/0)"},
		{"too many skills", manySkills, "/skills", "65 skills, more than 64"},
		{"long name", set("name", strings.Repeat("n", MaxStringBytes+1)), "/name", "4097 bytes, more than 4096"},
		{"long example", set("examples", []any{"ok", strings.Repeat("e", MaxStringBytes+1)}, "skills", 0), "/skills/0/examples/1", "4097 bytes, more than 4096"},
		{"long tenant", set("tenant", strings.Repeat("t", MaxStringBytes+1), "supportedInterfaces", 0), "/supportedInterfaces/0/tenant", "4097 bytes, more than 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(edit(t, tt.change))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error = %v, want *ValidationError", err)
			}
			if ve.Pointer != tt.pointer || ve.Reason != tt.reason {
				t.Errorf("Parse error at %q: %q; want at %q: %q", ve.Pointer, ve.Reason, tt.pointer, tt.reason)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(map[string]any)
	}{
		{"empty capabilities", func(c map[string]any) { c["capabilities"] = map[string]any{} }},
		{"empty tags", func(c map[string]any) { at(c, "skills", 0)["tags"] = []any{} }},
		{"no provider", func(c map[string]any) { delete(c, "provider") }},
		{"null optional member", func(c map[string]any) { c["iconUrl"] = nil }},
		{"grpc and https interfaces first", func(c map[string]any) {
			c["supportedInterfaces"] = append([]any{
				map[string]any{"url": "grpc://agent.example:443", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
				map[string]any{"url": "https://agent.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "t1"},
			}, c["supportedInterfaces"].([]any)...)
		}},
		{"opaque members", func(c map[string]any) {
			c["securitySchemes"] = map[string]any{"bearer": map[string]any{"httpAuthSecurityScheme": map[string]any{"scheme": "Bearer"}}}
			c["securityRequirements"] = []any{map[string]any{"schemes": map[string]any{"bearer": map[string]any{"list": []any{}}}}}
			c["signatures"] = []any{map[string]any{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}}
			at(c, "capabilities")["extensions"] = []any{map[string]any{"uri": "urn:x", "required": false}}
		}},
		{"max skills", func(c map[string]any) {
			skills := make([]any, MaxSkills)
			for i := range skills {
				skills[i] = map[string]any{"id": strings.Repeat("s", i+1), "name": "n", "description": "d", "tags": []any{}}
			}
			c["skills"] = skills
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse(edit(t, tt.change)); err != nil {
				t.Errorf("Parse = %v", err)
			}
		})
	}
}

func TestParseRefusesDocument(t *testing.T) {
	big := edit(t, func(c map[string]any) {
		// Under the per-string cap, over the card cap.
		list := make([]any, 20)
		for i := range list {
			list[i] = strings.Repeat("x", MaxStringBytes)
		}
		at(c, "skills", 0)["examples"] = list
	})
	tests := []struct {
		name   string
		raw    string
		reason string
	}{
		{"empty", "", "invalid JSON: unexpected end of JSON input"},
		{"not JSON", "{name: 1}", "invalid JSON: invalid character 'n' looking for beginning of object key string"},
		{"array", "[]", "card must be a JSON object"},
		{"null", "null", "card must be a JSON object"},
		{"duplicate member", `{"name": "a", "name": "b"}`, `cannot canonicalize (RFC 8785): Duplicate key: "name"`},
		{"too big", string(big), fmt.Sprintf("card is %d bytes, more than 65536", len(big))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.raw))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error = %v, want *ValidationError", err)
			}
			if ve.Pointer != "" || ve.Reason != tt.reason {
				t.Errorf("Parse error at %q: %q; want the whole card: %q", ve.Pointer, ve.Reason, tt.reason)
			}
		})
	}
}

func TestValidationErrorString(t *testing.T) {
	tests := []struct {
		err  ValidationError
		want string
	}{
		{ValidationError{"/skills/0/id", "required"}, "agentcard: /skills/0/id: required"},
		{ValidationError{"", "card must be a JSON object"}, "agentcard: card must be a JSON object"},
		{ValidationError{"/x\nERROR forged", "unknown field"}, `agentcard: "/x\nERROR forged": unknown field`},
		{ValidationError{"/" + strings.Repeat("k", 300), "unknown field"}, `agentcard: "/` + strings.Repeat("k", 199) + `"…: unknown field`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestValidateBuiltCard(t *testing.T) {
	c, err := Parse(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Skills[0].Tags = nil
	var ve *ValidationError
	if err := c.Validate(); !errors.As(err, &ve) || ve.Pointer != "/skills/0/tags" {
		t.Errorf("Validate with nil tags = %v, want /skills/0/tags required", err)
	}
	c.Skills[0].Tags = []string{}
	c.Capabilities = Capabilities{}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with empty tags and capabilities = %v", err)
	}
}

func BenchmarkParse(b *testing.B) {
	raw := fixture(b)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// What is there but says nothing, or cannot be used, is a note and never
// refuses the card (issue 15 point 1: refuse only what is unsafe or
// unusable): an empty tag list, an empty or blank tag, a blank name, an
// extension without its uri and a signature without its value (both
// ignored, and the note says so). An empty ("") required string stays a
// fault.
func TestBlankAndUnusableMembersAreNotes(t *testing.T) {
	skill0 := func(c map[string]any) map[string]any { return c["skills"].([]any)[0].(map[string]any) }
	for _, tt := range []struct {
		name string
		edit func(map[string]any)
		note Note
	}{
		{"tags []", func(c map[string]any) { skill0(c)["tags"] = []any{} }, Note{"/skills/0/tags", "empty: the skill has no tags"}},
		{`tags [""]`, func(c map[string]any) { skill0(c)["tags"] = []any{""} }, Note{"/skills/0/tags/0", "an empty or blank tag: ignored"}},
		{"name blank", func(c map[string]any) { c["name"] = "   " }, Note{"/name", "blank (white space only): says nothing"}},
		{"extension without uri", func(c map[string]any) {
			c["capabilities"].(map[string]any)["extensions"] = []any{map[string]any{"required": true}}
		}, Note{"/capabilities/extensions/0/uri", "an extension without its uri is unusable (a2a.proto AgentExtension.uri is required): ignored"}},
		{"signature without value", func(c map[string]any) { c["signatures"] = []any{map[string]any{"protected": "eyJhbGciOiJFUzI1NiJ9"}} },
			Note{"/signatures/0/signature", "a signature without its signature value is unusable (a2a.proto AgentCardSignature.signature is required): ignored, never verified"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, notes, err := Check(edit(t, tt.edit))
			if err != nil || !reflect.DeepEqual(notes, []Note{tt.note}) {
				t.Errorf("Check = %v, notes %+v; want accepted with the one note %+v", err, notes, tt.note)
			}
		})
	}
	_, _, err := Check(edit(t, func(c map[string]any) { c["name"] = "" }))
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Pointer != "/name" || ve.Reason != "required" {
		t.Errorf(`Check(name "") = %v, want /name: required`, err)
	}
}

// The card docs/nats-binding.md §3.3 gives as the binding's declaration is
// accepted as it stands: no fault, no note, delegable as fraud-review.
func TestNATSBindingDocCardIsAccepted(t *testing.T) {
	doc, err := os.ReadFile("../docs/nats-binding.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### 3.3. Agent card declaration\n")
	section, _, _ = strings.Cut(section, "\n### ")
	_, block, ok2 := strings.Cut(section, "```json\n")
	block, _, ok3 := strings.Cut(block, "\n```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/nats-binding.md §3.3 has no JSON card")
	}
	card, notes, err := Check([]byte(block))
	if err != nil || len(notes) != 0 {
		t.Fatalf("Check(§3.3 card) = %v, notes %+v; want accepted with no note", err, notes)
	}
	if r := DelegationFault("fraud-review", card); r != "" {
		t.Errorf("not delegable as fraud-review: %s", r)
	}
	if n := AgentNotes("fraud-review", card); len(n) != 0 {
		t.Errorf("notes as fraud-review: %+v", n)
	}
}
