package agentcard

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// securityCard is the fixture with an HTTP interface at its fetch origin and
// the given security block (JSON objects of a2a.proto SecurityScheme and
// SecurityRequirement).
func securityCard(t *testing.T, schemes string, requirements string) []byte {
	t.Helper()
	return edit(t, func(c map[string]any) {
		c["supportedInterfaces"] = []any{map[string]any{"url": "https://rpc.vendor.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}}
		var s map[string]any
		var r []any
		if err := json.Unmarshal([]byte(schemes), &s); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(requirements), &r); err != nil {
			t.Fatal(err)
		}
		c["securitySchemes"], c["securityRequirements"] = s, r
	})
}

const (
	cardBearer   = `{"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer"}}}`
	cardOAuth    = `{"oauth":{"oauth2SecurityScheme":{"flows":{"clientCredentials":{"tokenUrl":"https://auth.vendor.example/token","scopes":{}}}}}}`
	cardOIDC     = `{"oidc":{"openIdConnectSecurityScheme":{"openIdConnectUrl":"https://auth.vendor.example/.well-known/openid-configuration"}}}`
	cardAPIKey   = `{"key":{"apiKeySecurityScheme":{"location":"header","name":"X-API-Key"}}}`
	cardMTLS     = `{"mtls":{"mtlsSecurityScheme":{}}}`
	cardAuthCode = `{"user":{"oauth2SecurityScheme":{"flows":{"authorizationCode":{"authorizationUrl":"https://auth.vendor.example/a","tokenUrl":"https://auth.vendor.example/t","scopes":{}}}}}}`
)

func requires(name string) string { return `[{"schemes":{"` + name + `":{"list":[]}}}]` }

const cannot = "a2ad cannot authenticate as the card requires: "

func TestAuthFindings(t *testing.T) {
	tests := []struct {
		name           string
		schemes, reqs  string
		auth           string
		warning, notes []Note
	}{
		{"bearer required, bearer configured", cardBearer, requires("bearer"), AuthBearer, nil, nil},
		{"bearer required, oauth2 configured: its token is a bearer token", cardBearer, requires("bearer"), AuthOAuth2, nil, nil},
		{"bearer required, nothing configured", cardBearer, requires("bearer"), AuthNone,
			[]Note{{"/securityRequirements", cannot + "no http.auth is configured, and no alternative of securityRequirements is met (/securitySchemes/bearer needs a bearer token (http.auth.bearer_token_file or http.auth.oauth2))"}}, nil},
		{"oauth2 client credentials required, oauth2 configured", cardOAuth, requires("oauth"), AuthOAuth2, nil, nil},
		{"oauth2 client credentials required, a bearer token file: works, not renewed", cardOAuth, requires("oauth"), AuthBearer, nil,
			[]Note{{"/securitySchemes/oauth", "a2ad sends the bearer_token_file's token as it is: it does not obtain or renew tokens for this scheme (configure http.auth.oauth2 for that)"}}},
		{"oauth2 required, nothing configured", cardOAuth, requires("oauth"), AuthNone,
			[]Note{{"/securityRequirements", cannot + "no http.auth is configured, and no alternative of securityRequirements is met (/securitySchemes/oauth needs OAuth 2.0 client credentials (http.auth.oauth2))"}}, nil},
		{"oauth2 without client credentials", cardAuthCode, requires("user"), AuthOAuth2,
			[]Note{{"/securityRequirements", cannot + "http.auth is oauth2 client credentials, and no alternative of securityRequirements is met (/securitySchemes/user is OAuth 2.0 without a clientCredentials flow: a2ad supports only client credentials)"}}, nil},
		{"openIdConnect with a bearer token file", cardOIDC, requires("oidc"), AuthBearer, nil,
			[]Note{{"/securitySchemes/oidc", "a2ad sends the bearer_token_file's token as it is: it does not obtain or renew tokens for this scheme (configure http.auth.oauth2 for that)"}}},
		{"apiKey is not supported", cardAPIKey, requires("key"), AuthBearer,
			[]Note{{"/securityRequirements", cannot + "http.auth is a bearer_token_file, and no alternative of securityRequirements is met (/securitySchemes/key is an API key, which a2ad does not support)"}}, nil},
		{"mtls is not supported", cardMTLS, requires("mtls"), AuthNone,
			[]Note{{"/securityRequirements", cannot + "no http.auth is configured, and no alternative of securityRequirements is met (/securitySchemes/mtls is mutual TLS, which a2ad does not support for HTTP agents)"}}, nil},
		{"an alternative a2ad meets is enough", `{"key":{"apiKeySecurityScheme":{"location":"header","name":"X"}},"bearer":{"httpAuthSecurityScheme":{"scheme":"bearer"}}}`,
			`[{"schemes":{"key":{"list":[]}}},{"schemes":{"bearer":{"list":[]}}}]`, AuthBearer, nil, nil},
		{"every scheme of an alternative is required", `{"key":{"apiKeySecurityScheme":{"location":"header","name":"X"}},"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer"}}}`,
			`[{"schemes":{"key":{"list":[]},"bearer":{"list":[]}}}]`, AuthBearer,
			[]Note{{"/securityRequirements", cannot + "http.auth is a bearer_token_file, and no alternative of securityRequirements is met (/securitySchemes/key is an API key, which a2ad does not support)"}}, nil},
		{"no requirement, auth configured: sent anyway", cardBearer, `[]`, AuthOAuth2, nil,
			[]Note{{"/securityRequirements", "the card requires no authentication; the configured http.auth (oauth2) is sent all the same"}}},
		{"no requirement, none configured", cardBearer, `[]`, AuthNone, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			card, _, err := Check(securityCard(t, tt.schemes, tt.reqs))
			if err != nil {
				t.Fatal(err)
			}
			w, n := AuthFindings(card, tt.auth)
			if !slices.Equal(w, tt.warning) || !slices.Equal(n, tt.notes) {
				t.Errorf("AuthFindings = %q, %q\nwant %q, %q", w, n, tt.warning, tt.notes)
			}
		})
	}
}

// The registry shows a card's auth mismatch on the agent: what a2ad
// cannot meet as AuthWarnings, the rest among Notes; a NATS agent's
// security block is not weighed (NATS credentials authenticate it).
func TestRegistryShowsAuthMismatch(t *testing.T) {
	const url = "https://rpc.vendor.example/.well-known/agent-card.json"
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: url})
	rec, _, err := r.RegisterFetched(t.Context(), agent, securityCard(t, cardOAuth, requires("oauth")), url)
	if err != nil {
		t.Fatal(err)
	}
	want := []Note{{"/securityRequirements", cannot + "no http.auth is configured, and no alternative of securityRequirements is met (/securitySchemes/oauth needs OAuth 2.0 client credentials (http.auth.oauth2))"}}
	if !rec.Delegable || rec.Binding != BindingJSONRPC || !slices.Equal(rec.AuthWarnings, want) {
		t.Errorf("RegisterFetched = %s binding %q auth warnings %q; want delegable over JSONRPC, warned %q", summary(rec), rec.Binding, rec.AuthWarnings, want)
	}

	withBearer, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: url, OutboundAuth: AuthBearer})
	rec, _, err = withBearer.RegisterFetched(t.Context(), agent, securityCard(t, cardOAuth, requires("oauth")), url)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.AuthWarnings) != 0 || !slices.ContainsFunc(rec.Notes, func(n Note) bool {
		return n.Pointer == "/securitySchemes/oauth" && strings.HasPrefix(n.Reason, "a2ad sends the bearer_token_file's token as it is")
	}) {
		t.Errorf("with a bearer token: auth warnings %q, notes %q; want the as-is note only", rec.AuthWarnings, rec.Notes)
	}

	nats, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true})
	rec = register(t, nats, agent, edit(t, func(c map[string]any) {
		c["securitySchemes"] = map[string]any{"key": map[string]any{"apiKeySecurityScheme": map[string]any{"location": "header", "name": "X"}}}
		c["securityRequirements"] = []any{map[string]any{"schemes": map[string]any{"key": map[string]any{"list": []any{}}}}}
	}))
	if !rec.Delegable || rec.Binding != BindingNATS || len(rec.AuthWarnings) != 0 {
		t.Errorf("NATS agent with an apiKey requirement = %s binding %q auth warnings %q", summary(rec), rec.Binding, rec.AuthWarnings)
	}
}

// The official Go SDK (a2a-go v2.4.0) writes a requirement's scopes as a
// bare array, not a2a.proto's {"list": [...]}: the card is accepted, with
// a note at the scopes, and its requirement is weighed as any other.
func TestRequirementScopesAsABareArray(t *testing.T) {
	card, notes, err := Check(securityCard(t, cardOAuth, `[{"schemes":{"oauth":["a2a.invoke"]}}]`))
	if err != nil {
		t.Fatalf("Check = %v, want the card accepted", err)
	}
	if !slices.Contains(notes, Note{"/securityRequirements/0/schemes/oauth", scopesShapeNote}) {
		t.Errorf("notes %q, want the scopes' shape noted", notes)
	}
	if w, _ := AuthFindings(card, AuthNone); len(w) != 1 {
		t.Errorf("AuthFindings with nothing configured = %q, want one warning", w)
	}
	if _, _, err := Check(securityCard(t, cardOAuth, `[{"schemes":{"oauth":["a2a.invoke", 7]}}]`)); err == nil ||
		!strings.Contains(err.Error(), "/securityRequirements/0/schemes/oauth/1") {
		t.Errorf("Check of a scope that is not a string = %v, want a fault at it", err)
	}
}
