package daemon_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	testIssuer   = "https://idp.example.com"
	testAudience = "https://a2ad.example.com/mcp"
)

// idp is an identity provider for the tests: an ES256 key pair whose public
// half a2ad is configured with (public_key_file).
type idp struct {
	key    *ecdsa.PrivateKey
	pubPEM []byte
	s      *stack
}

func startIDP(t *testing.T) *idp { t.Helper(); return startIDPWith(t, nil) }

func startIDPWith(t *testing.T, misbehave map[string]string) *idp {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	path := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(path, pubPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startWithAuth(t, misbehave, mcpedge.AuthConfig{Issuer: testIssuer, Audience: testAudience, PublicKeyFile: path})
	return &idp{key: key, pubPEM: pubPEM, s: s}
}

// claims are a valid token's claims; tests change one thing each.
func claims(sub, tenant, scope string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "sub": sub, "tenant": tenant, "scope": scope,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

func (p *idp) sign(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodES256, c).SignedString(p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// post sends one JSON-RPC body to /mcp with an optional bearer token.
func (p *idp) post(t *testing.T, token, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.s.d.HTTPURL+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// Every refusal on /mcp, with the exact status and RFC 6750 challenge.
func TestBearerTokensAreVerified(t *testing.T) {
	p := startIDP(t)
	meta := `resource_metadata="` + p.s.d.HTTPURL + `/.well-known/oauth-protected-resource"`
	invalid := func(desc string) string {
		return `Bearer ` + meta + `, error="invalid_token", error_description="` + desc + `"`
	}
	expired := claims("h", "default", "a2a:read")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	expired["iat"] = time.Now().Add(-2 * time.Hour).Unix()
	noExp := claims("h", "default", "a2a:read")
	delete(noExp, "exp")
	wrongAud := claims("h", "default", "a2a:read")
	wrongAud["aud"] = "https://other.example.com/mcp"
	wrongIss := claims("h", "default", "a2a:read")
	wrongIss["iss"] = "https://evil.example.com"
	noTenant := claims("h", "default", "a2a:read")
	delete(noTenant, "tenant")
	algNone, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims("h", "default", "a2a:read")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hsWithPublicKey, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims("h", "default", "a2a:read")).SignedString(p.pubPEM)
	critTok := jwt.NewWithClaims(jwt.SigningMethodES256, claims("h", "default", "a2a:read"))
	critTok.Header["crit"] = []string{"x-a2ad-unknown"}
	critTok.Header["x-a2ad-unknown"] = true
	critical, _ := critTok.SignedString(p.key)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	foreignKey, _ := jwt.NewWithClaims(jwt.SigningMethodES256, claims("h", "default", "a2a:read")).SignedString(otherKey)

	for _, c := range []struct {
		name, header string
		status       int
		challenge    string
	}{
		{"no token", "", 401, `Bearer ` + meta},
		{"not a bearer scheme", "Basic dXNlcjpwYXNz", 401, `Bearer ` + meta},
		{"garbage", "Bearer not.a.jwt", 401, invalid("malformed")},
		{"expired", "Bearer " + p.sign(t, expired), 401, invalid("expired")},
		{"no exp", "Bearer " + p.sign(t, noExp), 401, invalid("a required claim is missing")},
		{"wrong audience", "Bearer " + p.sign(t, wrongAud), 401, invalid("minted for another audience")},
		{"wrong issuer", "Bearer " + p.sign(t, wrongIss), 401, invalid("wrong issuer")},
		{"alg none", "Bearer " + algNone, 401, invalid("bad signature or algorithm not allowed")},
		{"HS256 signed with the public key", "Bearer " + hsWithPublicKey, 401, invalid("bad signature or algorithm not allowed")},
		{"another key", "Bearer " + foreignKey, 401, invalid("bad signature or algorithm not allowed")},
		{"no tenant", "Bearer " + p.sign(t, noTenant), 401, invalid("no tenant claim")},
		{"control character in tenant", "Bearer " + p.sign(t, claims("h", "a\x00b", "a2a:read")), 401,
			invalid("sub or tenant holds control characters or is longer than 256 bytes")},
		{"unknown critical header", "Bearer " + critical, 401, invalid("critical header extensions are not supported")},
		{"no a2a:read", "Bearer " + p.sign(t, claims("h", "default", "a2a:delegate")), 403,
			`Bearer ` + meta + `, error="insufficient_scope", error_description="this request needs scope a2a:read", scope="a2a:read"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, p.s.d.HTTPURL+"/mcp", strings.NewReader(initialize))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || resp.Header.Get("WWW-Authenticate") != c.challenge {
				t.Errorf("status %d, WWW-Authenticate %q\nwant %d, %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.status, c.challenge)
			}
			if strings.Contains(string(body), strings.TrimPrefix(c.header, "Bearer ")) && c.header != "" && len(c.header) > 20 {
				t.Errorf("the response echoes the token: %s", body)
			}
		})
	}
	// A valid token is accepted.
	if resp, body := p.post(t, p.sign(t, claims("h", "default", "a2a:read")), initialize); resp.StatusCode != 200 || !strings.Contains(body, `"protocolVersion"`) {
		t.Errorf("valid token: %d %s", resp.StatusCode, body)
	}
}

// connect opens an MCP session with token.
func (p *idp) connect(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// Scopes decide which tools a principal sees and may call; a call beyond
// them is an HTTP 403 naming the scope (MCP step-up authorization).
func TestScopesPerTool(t *testing.T) {
	p := startIDP(t)
	reader := p.sign(t, claims("reader", "default", "a2a:read"))
	cs := p.connect(t, reader)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"agents_list", "task_get"}) {
		t.Errorf("a2a:read sees %v, want [agents_list task_get]", names)
	}
	all := p.connect(t, p.sign(t, claims("both", "default", "a2a:read a2a:delegate")))
	if res, err := all.ListTools(context.Background(), nil); err != nil || ownTools(res.Tools) != 5 {
		t.Errorf("a2a:read a2a:delegate sees %d of a2ad's own tools (%v), want 5", ownTools(res.Tools), err)
	}

	// A direct tools/call of delegate with a read-only token: HTTP 403.
	resp, _ := p.post(t, reader, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delegate","arguments":{}}}`)
	want := `Bearer resource_metadata="` + p.s.d.HTTPURL + `/.well-known/oauth-protected-resource", error="insufficient_scope", error_description="tool delegate needs scope a2a:delegate", scope="a2a:delegate"`
	if resp.StatusCode != 403 || resp.Header.Get("WWW-Authenticate") != want {
		t.Errorf("delegate with a2a:read: %d %q\nwant 403 %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}

	// A body naming the tool twice, in two cases, is held to the strongest scope.
	if resp, _ := p.post(t, reader, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delegate","Name":"task_get","arguments":{}}}`); resp.StatusCode != 403 {
		t.Errorf("case-folded duplicate name: %d, want 403", resp.StatusCode)
	}
	if res.CacheScope != "private" {
		t.Errorf("a filtered tools/list has cacheScope %q, want private", res.CacheScope)
	}

	// The admin API needs a2a:admin.
	req, _ := http.NewRequest(http.MethodGet, p.s.d.HTTPURL+"/v1/tasks", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	aresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	aresp.Body.Close()
	if aresp.StatusCode != 403 || !strings.Contains(aresp.Header.Get("WWW-Authenticate"), `scope="a2a:admin"`) {
		t.Errorf("admin API with a2a:read: %d %q", aresp.StatusCode, aresp.Header.Get("WWW-Authenticate"))
	}
	req.Header.Set("Authorization", "Bearer "+p.sign(t, claims("ops", "default", "a2a:admin")))
	if aresp, err = http.DefaultClient.Do(req); err != nil || aresp.StatusCode != 200 {
		t.Errorf("admin API with a2a:admin: %v %v", aresp.Status, err)
	}
	aresp.Body.Close()
}

// A task belongs to its tenant: another tenant gets exactly the answer a
// task that does not exist gets; agents_list shows each tenant its agents.
func TestTenantsAreIsolated(t *testing.T) {
	p := startIDP(t)
	ctx := context.Background()
	def := p.connect(t, p.sign(t, claims("alice", "default", "a2a:read a2a:delegate")))
	acme := p.connect(t, p.sign(t, claims("bob", "acme", "a2a:read a2a:delegate")))
	other := p.connect(t, p.sign(t, claims("carol", "nobody", "a2a:read a2a:delegate")))

	res, err := def.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-77", 10))})
	if err != nil || res.IsError {
		t.Fatalf("delegate: %v %+v", err, res)
	}
	id := res.StructuredContent.(map[string]any)["task_id"].(string)
	rec, _, err := p.s.d.Service.Tasks.Get(ctx, id)
	if err != nil || rec.Tenant != "default" || rec.Subject != "alice" {
		t.Fatalf("record tenant %q subject %q (%v), want default alice", rec.Tenant, rec.Subject, err)
	}
	text := func(cs *mcp.ClientSession, taskID string) string {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "task_get", Arguments: map[string]any{"task_id": taskID}})
		if err != nil {
			t.Fatal(err)
		}
		if !r.IsError {
			b, _ := json.Marshal(r.StructuredContent)
			return "ok " + string(b)
		}
		return r.Content[0].(*mcp.TextContent).Text
	}
	foreign, missing := text(acme, id), text(acme, "tsk-000000000000000000000000")
	if !strings.HasPrefix(foreign, "task_not_found:") || strings.ReplaceAll(foreign, id, "X") != strings.ReplaceAll(missing, "tsk-000000000000000000000000", "X") {
		t.Errorf("another tenant's task: %q; a missing task: %q (must read alike)", foreign, missing)
	}
	if got := text(def, id); !strings.HasPrefix(got, "ok ") {
		t.Errorf("own task: %q", got)
	}
	agents := func(cs *mcp.ClientSession) int {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
		if err != nil || r.IsError {
			t.Fatalf("agents_list: %v %+v", err, r)
		}
		list, _ := r.StructuredContent.(map[string]any)["agents"].([]any)
		return len(list)
	}
	if a, b, c := agents(def), agents(acme), agents(other); a != 1 || b != 1 || c != 0 {
		t.Errorf("agents seen by default/acme/nobody = %d/%d/%d, want 1/1/0", a, b, c)
	}
}

// The protected resource metadata (RFC 9728) names the resource, the
// scopes and the header method; unauthenticated.
func TestProtectedResourceMetadata(t *testing.T) {
	p := startIDP(t)
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		resp, err := http.Get(p.s.d.HTTPURL + path)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			Scopes               []string `json:"scopes_supported"`
			Methods              []string `json:"bearer_methods_supported"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != 200 || m.Resource != testAudience || !slices.Equal(m.AuthorizationServers, []string{testIssuer}) ||
			!slices.Equal(m.Scopes, []string{"a2a:read", "a2a:delegate", "a2a:admin"}) || !slices.Equal(m.Methods, []string{"header"}) {
			t.Errorf("%s: %d %+v", path, resp.StatusCode, m)
		}
	}
}

// Both MCP eras on one /mcp: 2026-07-28 (stateless, server/discover) and
// 2025-11-25 (initialize, a session), each listing the tools and running a
// delegation to completion.
func TestBothProtocolEras(t *testing.T) {
	p := startIDP(t)
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	for _, era := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(era, func(t *testing.T) {
			client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
				HTTPClient: mcpedge.BearerClient(token)}, &mcp.ClientSessionOptions{ProtocolVersion: era})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != era {
				t.Fatalf("negotiated %s, want %s", got, era)
			}
			if stateful := cs.ID() != ""; stateful != (era == "2025-11-25") {
				t.Errorf("session id %q for %s", cs.ID(), era)
			}
			tools, err := cs.ListTools(context.Background(), nil)
			if err != nil || ownTools(tools.Tools) != 5 {
				t.Fatalf("tools/list: %v, %d of a2ad's own tools", err, ownTools(tools.Tools))
			}
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-8"+era[3:4], 10))})
			if err != nil || res.IsError {
				t.Fatalf("delegate: %v %+v", err, res)
			}
			if st := res.StructuredContent.(map[string]any)["state"]; st != "completed" {
				t.Errorf("state %v, want completed", st)
			}
		})
	}
}

// The shipped configurations load (strictly: an unknown key would fail).
func TestDeployConfigsLoad(t *testing.T) {
	for _, f := range []string{"../../deploy/a2ad.yaml", "../../deploy/a2ad-cluster.yaml"} {
		c, err := daemon.LoadConfig(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(c.Agents) < 1 || c.Agents[0].ID != "fraud-review" {
			t.Errorf("%s: agents %+v", f, c.Agents)
		}
	}
	c, _ := daemon.LoadConfig("../../deploy/a2ad-cluster.yaml")
	if c.Replicas != 3 || c.Auth.PublicKeyFile == "" || c.Auth.Issuer == "" || c.Auth.Audience == "" {
		t.Errorf("cluster config: replicas %d auth %+v; want 3 and a shared key", c.Replicas, c.Auth)
	}
}

// A host that can ask its user gets the agent's question as an MCP input
// request on the pending call (2026-07-28; the go-sdk performs it as
// elicitation/create for 2025-11-25 clients); the user's answer reaches the
// agent and the same call ends with the completed task.
func TestQuestionAsInputRequest(t *testing.T) {
	p := startIDP(t)
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	for i, era := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(era, func(t *testing.T) {
			var asked []string
			client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked = append(asked, r.Params.Message)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
				},
			})
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
				HTTPClient: mcpedge.BearerClient(token)}, &mcp.ClientSessionOptions{ProtocolVersion: era})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			caseID := fmt.Sprintf("C-9%d", i)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence(caseID, 125000))})
			if err != nil || res.IsError {
				t.Fatalf("delegate: %v %+v", err, res)
			}
			out := res.StructuredContent.(map[string]any)
			if out["state"] != "completed" {
				t.Fatalf("state %v, want completed after the answer", out["state"])
			}
			wantQ := fmt.Sprintf("Case %s: the refund of 125000 cents is above the manual review threshold of 50000 cents. Has a human reviewer verified the customer's identity? Answer yes or no.", caseID)
			if len(asked) != 1 || !strings.Contains(asked[0], strconv.Quote(wantQ)) {
				t.Fatalf("the user was asked %q, want one question quoting %q", asked, wantQ)
			}
			rec, _, _ := p.s.d.Service.Tasks.Get(context.Background(), out["task_id"].(string))
			if h := rec.History[len(rec.History)-2]; rec.Turns != 2 || h.Event != "resume" || h.Source != "host" {
				t.Errorf("turns %d, history %+v", rec.Turns, rec.History)
			}
		})
	}
}

// A request state is bound to task, tenant, subject and turn, and
// integrity-protected: tampered, or presented by another tenant, it is
// refused and nothing is sent to the agent.
func TestRequestStateIsBoundAndProtected(t *testing.T) {
	p := startIDP(t)
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}, // the test drives the retry itself
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	connect := func(sub, tenant string) *mcp.ClientSession {
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
			HTTPClient: mcpedge.BearerClient(p.sign(t, claims(sub, tenant, "a2a:read a2a:delegate")))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	alice, mallory := connect("alice", "default"), connect("mallory", "acme")
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-95", 125000))})
	if err != nil || res.IsError || res.RequestState == "" || res.InputRequests[mcpedge.AnswerInput] == nil {
		t.Fatalf("want an input request with a request state: %v %+v", err, res)
	}
	answer := mcp.InputResponseMap{mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}}
	call := func(cs *mcp.ClientSession, state string) (*mcp.CallToolResult, error) {
		// The retry of the call the state came with (a state is good for
		// that call only).
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-95", 125000)),
			InputResponses: answer, RequestState: state})
	}
	retry := func(cs *mcp.ClientSession, state string) *mcp.CallToolResult {
		r, err := call(cs, state)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A state a2ad cannot verify is a JSON-RPC error (SEP-2322), not a
	// tool result.
	tampered := res.RequestState[:len(res.RequestState)-2] + "AA"
	for name, c := range map[string]struct {
		cs    *mcp.ClientSession
		state string
	}{"tampered": {alice, tampered}, "another tenant": {mallory, res.RequestState}, "not a state": {alice, "x"}} {
		r, err := call(c.cs, c.state)
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams ||
			we.Message != "requestState not valid: a2ad did not issue it to this caller, it was changed, or it expired (15m0s); call the tool again without requestState and inputResponses" {
			t.Errorf("%s state: %v %+v, want JSON-RPC error -32602", name, err, r)
		}
	}
	if n := p.s.agent.Stats(); n.BriefsReceived != 1 {
		t.Fatalf("agent briefs %d", n.BriefsReceived)
	}
	// A read-only principal of the same tenant is shown the question, never
	// asked it, and cannot answer with a state it was given.
	client2 := mcp.NewClient(&mcp.Implementation{Name: "reader", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	ro, err := client2.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(p.sign(t, claims("reader", "default", "a2a:read")))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	taskID := func() string {
		rec, _ := p.s.d.Service.Tasks.List(ctx)
		return rec[0].ID
	}()
	g, err := ro.CallTool(ctx, &mcp.CallToolParams{Name: "task_get", Arguments: map[string]any{"task_id": taskID}})
	if err != nil || g.IsError || g.InputRequests != nil || g.StructuredContent.(map[string]any)["question"] == "" {
		t.Errorf("read-only task_get: %v %+v", err, g)
	}
	if r, err := ro.CallTool(ctx, &mcp.CallToolParams{Name: "task_get", Arguments: map[string]any{"task_id": taskID},
		InputResponses: answer, RequestState: res.RequestState}); err != nil || !r.IsError ||
		!strings.HasPrefix(r.Content[0].(*mcp.TextContent).Text, "insufficient_scope:") {
		t.Errorf("read-only answer: %v %+v", err, r)
	}
	if r := retry(alice, res.RequestState); r.IsError || r.StructuredContent.(map[string]any)["state"] != "completed" {
		t.Errorf("the genuine state: %+v", r)
	}
}

// auth-required reaches a host that can ask its user the same way, as an
// input request carrying the agent's sign-in message; a2ad answers nothing
// to the agent (never the host's credentials) and the call goes on waiting
// until the agent, authorized out of band, completes.
func TestAuthRequiredIsSurfacedNeverSatisfiedWithCredentials(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-96": "auth-required"})
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	var asked []string
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"done": true}}, nil
		},
	})
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-96", 1999))})
	if err != nil || res.IsError {
		t.Fatalf("delegate: %v %+v", err, res)
	}
	if st := res.StructuredContent.(map[string]any)["state"]; st != "completed" {
		t.Fatalf("state %v, want completed", st)
	}
	if len(asked) != 1 || !strings.Contains(asked[0], "https://fraud-review.example/authorize") || !strings.Contains(asked[0], "never forwards your credentials") {
		t.Fatalf("asked %q", asked)
	}
	st := p.s.agent.Stats()
	if st.BriefsReceived != 1 || strings.Contains(string(st.Received[0]), token) {
		t.Errorf("agent: %d briefs; the token must never reach it", st.BriefsReceived)
	}
	rec, _, _ := p.s.d.Service.Tasks.Get(context.Background(), res.StructuredContent.(map[string]any)["task_id"].(string))
	if rec.Turns != 1 {
		t.Errorf("turns %d: nothing may be sent to the agent for auth-required", rec.Turns)
	}
}

// Keys from a JWKS URL (keyfunc) and an RS256 PEM key both verify; a token
// whose kid the JWK Set does not hold is refused.
func TestJWKSAndRS256Keys(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	point, _ := ec.PublicKey.Bytes() // 0x04 || X || Y
	jwks := fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","alg":"ES256","use":"sig","x":%q,"y":%q}]}`,
		base64.RawURLEncoding.EncodeToString(point[1:33]), base64.RawURLEncoding.EncodeToString(point[33:65]))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(jwks))
	}))
	defer srv.Close()
	s := startWithAuth(t, nil, mcpedge.AuthConfig{Issuer: testIssuer, Audience: testAudience, JWKSURL: srv.URL})
	p := &idp{s: s}
	sign := func(kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims("h", "default", "a2a:read"))
		tok.Header["kid"] = kid
		str, err := tok.SignedString(ec)
		if err != nil {
			t.Fatal(err)
		}
		return str
	}
	if resp, _ := p.post(t, sign("k1"), initialize); resp.StatusCode != 200 {
		t.Errorf("JWKS key k1: %d", resp.StatusCode)
	}
	if resp, _ := p.post(t, sign("k2"), initialize); resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("unknown kid: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	path := filepath.Join(t.TempDir(), "rsa.pem")
	_ = os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	rs := &idp{s: startWithAuth(t, nil, mcpedge.AuthConfig{Issuer: testIssuer, Audience: testAudience, PublicKeyFile: path})}
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, claims("h", "default", "a2a:read")).SignedString(rk)
	if resp, _ := rs.post(t, tok, initialize); resp.StatusCode != 200 {
		t.Errorf("RS256: %d", resp.StatusCode)
	}
	ps, _ := jwt.NewWithClaims(jwt.SigningMethodPS256, claims("h", "default", "a2a:read")).SignedString(rk)
	if resp, _ := rs.post(t, ps, initialize); resp.StatusCode != 401 {
		t.Errorf("PS256 with an RS256-only configuration: %d, want 401", resp.StatusCode)
	}
}

// Cancelling a tools/call stops only the wait: the delegated task goes on.
func TestCancellingACallLeavesTheTask(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-97": "silent"})
	cs := p.connect(t, p.sign(t, claims("h", "default", "a2a:read a2a:delegate")))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	args := delegateArgs(evidence("C-97", 1999))
	args["idempotency_key"] = "cancel-the-wait"
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args}); err == nil {
		t.Fatal("the call was not cancelled")
	}
	// The same key names the task, still open.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: map[string]any{
		"agent": "fraud-review", "skill": "assess_refund_risk", "objective": args["objective"], "evidence": args["evidence"],
		"constraints": args["constraints"], "output_schema": "risk_assessment", "budget": args["budget"],
		"idempotency_key": "cancel-the-wait", "wait_seconds": 0}})
	if err != nil || res.IsError {
		t.Fatalf("delegate again: %v %+v", err, res)
	}
	if st := res.StructuredContent.(map[string]any)["state"]; st != "submitted" {
		t.Errorf("state after the call was cancelled: %v, want submitted (still open)", st)
	}
	if n := p.s.agent.Stats().CancelsReceived; n != 0 {
		t.Errorf("the agent got %d CancelTask", n)
	}
}
