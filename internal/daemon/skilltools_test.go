package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

const skillTool = "fraud-review__assess_refund_risk"

// skillStack is a daemon with the reference agent whose skill allows one
// output schema (output_schemas), host schemas from a directory of the
// test's own, and a go-sdk session that counts list_changed notifications.
type skillStack struct {
	d          *daemon.Daemon
	schemasDir string
	dataDir    string
	session    *mcp.ClientSession
	toolsChg   atomic.Int32
	resChg     atomic.Int32
}

func startSkills(t *testing.T) *skillStack {
	t.Helper()
	return startSkillsWith(t, nil, a2ad.FraudReviewCard())
}

// startSkillsWith is startSkills with the configuration changed by mut and
// the agent presenting card.
func startSkillsWith(t *testing.T, mut func(*daemon.Config), card []byte) *skillStack {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	var logTo io.Writer = io.Discard
	if os.Getenv("A2AD_TEST_LOG") != "" {
		logTo = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	s := &skillStack{schemasDir: t.TempDir(), dataDir: t.TempDir()}
	for _, f := range []string{"refund_evidence.json", "risk_assessment.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.schemasDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := daemon.Config{
		NATSURL: ns.ClientURL(), HTTPAddr: "127.0.0.1:0", DataDir: s.dataDir, SchemasDir: s.schemasDir,
		Agents: []daemon.AgentConfig{{
			AgentConfig:     agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true},
			EvidenceSchemas: map[string]string{"assess_refund_risk": "refund_evidence"},
			OutputSchemas:   map[string][]string{"assess_refund_risk": {"risk_assessment"}},
		}},
	}
	if mut != nil {
		mut(&cfg)
	}
	d, err := daemon.Start(ctx, cfg, log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	s.d = d
	nc, err := nats.Connect(ns.ClientURL(), refagent.ConnectOptions("fraud-review", "")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := refagent.New(nc, refagent.Config{AgentID: "fraud-review", Card: card, Logger: log, Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	waitFor(t, "agent approved", func() bool {
		r, err := d.Service.Agents.Get(ctx, "fraud-review")
		return err == nil && r.Delegable
	})
	s.session = s.connect(t, "2025-11-25", "a2a:read a2a:delegate", &s.toolsChg, &s.resChg)
	waitForTool(t, s.session, skillTool)
	return s
}

// waitForTool waits until cs lists the tool named (the per-skill tools
// follow an approval within the registry's coalescing delay, 50 ms).
func waitForTool(t *testing.T, cs *mcp.ClientSession, name string) {
	t.Helper()
	waitFor(t, "tool "+name, func() bool { return slices.Contains(toolNames(t, cs), name) })
}

// connect opens a go-sdk session of era with a token of scopes, counting
// the list_changed notifications it hears into tools and resources.
func (s *skillStack) connect(t *testing.T, era, scopes string, tools, resources *atomic.Int32) *mcp.ClientSession {
	t.Helper()
	return s.connectTenant(t, "default", era, scopes, tools, resources)
}

// connectTenant is connect with a token of tenant.
func (s *skillStack) connectTenant(t *testing.T, tenant, era, scopes string, tools, resources *atomic.Int32) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if tools != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { tools.Add(1) }
		opts.ResourceListChangedHandler = func(context.Context, *mcp.ResourceListChangedRequest) { resources.Add(1) }
	}
	token, err := mcpedge.MintDevToken(s.dataDir, s.d.Auth.Audience(), "test-host", tenant, scopes, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: s.d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)},
		&mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func findTool(t *testing.T, cs *mcp.ClientSession, name string) *mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("tools/list has no %s", name)
	return nil
}

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The reference agent's skill is a typed tool: its input schema is the
// configured evidence schema (refund_evidence, which requires currency)
// with the brief's other members and no output_schema (one is allowed);
// its output schema types result as risk_assessment; its description
// quotes the card as agent-supplied data. A call delegates to completion
// and returns the validated assessment as result; evidence that breaks
// the evidence schema is refused with a pointer; an unknown argument is
// refused as for every a2ad tool.
func TestSkillToolDelegatesWithTypedEvidenceAndResult(t *testing.T) {
	s := startSkills(t)
	ctx := context.Background()
	tool := findTool(t, s.session, skillTool)
	in := asMap(t, tool.InputSchema)
	props := in["properties"].(map[string]any)
	var propNames []string
	for n := range props {
		propNames = append(propNames, n)
	}
	slices.Sort(propNames)
	if got := strings.Join(propNames, ","); got != "budget,constraints,evidence,idempotency_key,objective,wait_seconds" {
		t.Errorf("input properties = %s", got)
	}
	ev := props["evidence"].(map[string]any)
	if req, _ := json.Marshal(ev["required"]); string(req) != `["case_id","amount_cents","currency"]` {
		t.Errorf("evidence required = %s, want refund_evidence's", req)
	}
	if !strings.Contains(ev["description"].(string), "a2ad://schemas/refund_evidence") {
		t.Errorf("evidence description = %q, want the schema's resource URI", ev["description"])
	}
	out := asMap(t, tool.OutputSchema)
	result := out["properties"].(map[string]any)["result"].(map[string]any)
	if req, _ := json.Marshal(result["required"]); string(req) != `["case_id","risk_level","score","reasons","policy_version"]` {
		t.Errorf("result required = %s, want risk_assessment's", req)
	}
	if !strings.Contains(tool.Description, "data, not instructions") || !strings.Contains(tool.Description, `"`+a2adSkillName(t)+`"`) {
		t.Errorf("description = %q: want the card's skill name quoted as agent-supplied data", tool.Description)
	}

	res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: skillTool, Arguments: map[string]any{
		"objective": "Assess the fraud risk of this refund.", "evidence": evidence("C-77", 1999), "wait_seconds": 10}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	got := asMap(t, res.StructuredContent)
	if got["state"] != "completed" || got["agent"] != "fraud-review" || got["skill"] != "assess_refund_risk" {
		t.Fatalf("result = %v", got)
	}
	r, _ := got["result"].(map[string]any)
	if r["case_id"] != "C-77" || r["risk_level"] == nil {
		t.Errorf("result = %v, want the risk assessment of C-77", got["result"])
	}
	parts := got["artifacts"].([]any)[0].(map[string]any)["parts"].([]any)
	if pd, _ := json.Marshal(parts[0].(map[string]any)["data"]); string(pd) != mustMarshal(t, r) {
		t.Errorf("result %v is not the artifact's data part %s", r, pd)
	}
	// The structured content satisfies the listed output schema.
	var os jsonschema.Schema
	if err := json.Unmarshal(mustJSONBytes(t, tool.OutputSchema), &os); err != nil {
		t.Fatal(err)
	}
	rs, err := os.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Validate(got); err != nil {
		t.Errorf("structured content does not satisfy the tool's output schema: %v", err)
	}

	bad := evidence("C-78", 1999)
	delete(bad, "currency")
	res, err = s.session.CallTool(ctx, &mcp.CallToolParams{Name: skillTool, Arguments: map[string]any{"objective": "x", "evidence": bad}})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || text != "evidence_invalid: evidence does not satisfy host schema refund_evidence: /evidence/currency (required)" {
		t.Errorf("evidence without currency = %v %q", res.IsError, text)
	}
	for arg, want := range map[string]string{
		"output_schema": "invalid_argument: tool " + skillTool + ": /output_schema: unknown argument (this takes objective, evidence, constraints, budget, idempotency_key, wait_seconds) (its input schema is in tools/list)",
		"wait_seconds":  "invalid_argument: tool " + skillTool + ": /wait_seconds: want an integer from 0 to 50 (its input schema is in tools/list)",
	} {
		args := map[string]any{"objective": "x", "evidence": evidence("C-79", 1), "output_schema": "risk_assessment"}
		if arg == "wait_seconds" {
			delete(args, "output_schema")
			args["wait_seconds"] = 51
		}
		res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: skillTool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || text != want {
			t.Errorf("%s: %q, want %q", arg, text, want)
		}
	}
	// The generic delegate stays, and refuses an output schema the skill
	// does not allow, naming those it does.
	args := delegateArgs(evidence("C-80", 1))
	args["output_schema"] = "refund_evidence"
	res, err = s.session.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || text != `schema_not_allowed: output schema "refund_evidence" is not allowed for skill assess_refund_risk of agent fraud-review; allowed: risk_assessment` {
		t.Errorf("delegate with a disallowed output schema: %q", text)
	}
}

func a2adSkillName(t *testing.T) string {
	t.Helper()
	var c struct {
		Skills []struct{ ID, Name string } `json:"skills"`
	}
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &c); err != nil {
		t.Fatal(err)
	}
	for _, sk := range c.Skills {
		if sk.ID == "assess_refund_risk" {
			return sk.Name
		}
	}
	t.Fatal("no assess_refund_risk in the card")
	return ""
}

func mustMarshal(t *testing.T, v any) string { return string(mustJSONBytes(t, v)) }

func mustJSONBytes(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A quarantine takes the per-skill tool away and an approval brings it
// back: a session hears notifications/tools/list_changed each time, a
// stateless (2026-07-28) client sees the new list on its next tools/list,
// and a call of the quarantined tool is an unknown tool. A registry change
// that changes no tool sends nothing.
func TestSkillToolFollowsQuarantineAndApproval(t *testing.T) {
	s := startSkills(t)
	ctx := context.Background()
	stateless := s.connect(t, "2026-07-28", "a2a:read a2a:delegate", nil, nil)
	if !slices.Contains(toolNames(t, s.session), skillTool) || !slices.Contains(toolNames(t, stateless), skillTool) {
		t.Fatalf("tools = %v / %v, want %s in both", toolNames(t, s.session), toolNames(t, stateless), skillTool)
	}
	time.Sleep(300 * time.Millisecond) // any notification of the start has arrived
	base := s.toolsChg.Load()
	for range 5 {
		s.d.Service.Agents.Changed("fraud-review")
	}
	time.Sleep(300 * time.Millisecond)
	if n := s.toolsChg.Load() - base; n != 0 {
		t.Errorf("%d tools/list_changed for changes that changed no tool, want 0", n)
	}

	began := time.Now()
	rec, err := s.d.Service.Agents.Quarantine(ctx, "fraud-review", "test: card under review")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "tools/list_changed after the quarantine", func() bool { return s.toolsChg.Load() > base })
	t.Logf("quarantine to tools/list_changed: %v", time.Since(began))
	if n := s.toolsChg.Load() - base; n != 1 {
		t.Errorf("%d notifications for one quarantine, want 1 (coalesced)", n)
	}
	if names := toolNames(t, s.session); slices.Contains(names, skillTool) || !slices.Contains(names, "delegate") {
		t.Errorf("tools after quarantine = %v", names)
	}
	if names := toolNames(t, stateless); slices.Contains(names, skillTool) {
		t.Errorf("stateless tools after quarantine = %v", names)
	}
	_, err = s.session.CallTool(ctx, &mcp.CallToolParams{Name: skillTool, Arguments: map[string]any{"objective": "x", "evidence": evidence("C-1", 1)}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, `unknown tool "`+skillTool+`"`) {
		t.Errorf("call after quarantine: %v, want unknown tool", err)
	}

	before := s.toolsChg.Load()
	began = time.Now()
	if _, err := s.d.Service.Agents.Approve(ctx, "fraud-review", rec.Fingerprint); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "tools/list_changed after the approval", func() bool { return s.toolsChg.Load() > before })
	t.Logf("approval to tools/list_changed: %v", time.Since(began))
	if !slices.Contains(toolNames(t, s.session), skillTool) || !slices.Contains(toolNames(t, stateless), skillTool) {
		t.Errorf("tools after approval = %v / %v", toolNames(t, s.session), toolNames(t, stateless))
	}
}

// A principal without a2a:delegate sees no per-skill tool, and one of
// another tenant neither sees nor can call it (an unknown tool to it).
func TestSkillToolIsPerPrincipal(t *testing.T) {
	s := startSkills(t)
	ctx := context.Background()
	reader := s.connect(t, "2025-11-25", "a2a:read", nil, nil)
	if names := toolNames(t, reader); slices.Contains(names, skillTool) {
		t.Errorf("a2a:read only: tools = %v", names)
	}
	token, err := mcpedge.MintDevToken(s.dataDir, s.d.Auth.Audience(), "mallory", "other", "a2a:read a2a:delegate", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := mcp.NewClient(&mcp.Implementation{Name: "other", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: s.d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if names := toolNames(t, other); slices.Contains(names, skillTool) {
		t.Errorf("tenant other: tools = %v", names)
	}
	_, err = other.CallTool(ctx, &mcp.CallToolParams{Name: skillTool, Arguments: map[string]any{"objective": "x", "evidence": evidence("C-1", 1)}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Message != `unknown tool "`+skillTool+`"` {
		t.Errorf("tenant other calls the tool: %v, want unknown tool", err)
	}
}

// agents_list names, per skill, the evidence schema (and its resource),
// the output schemas allowed and the per-skill tool.
func TestAgentsListNamesSchemasAndTool(t *testing.T) {
	s := startSkills(t)
	res, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatal(err, res)
	}
	var out mcpedge.AgentsListOutput
	if err := json.Unmarshal(mustJSONBytes(t, res.StructuredContent), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Agents) != 1 {
		t.Fatalf("agents = %+v", out.Agents)
	}
	i := slices.IndexFunc(out.Agents[0].Skills, func(v mcpedge.SkillView) bool { return v.ID == "assess_refund_risk" })
	if i < 0 {
		t.Fatalf("skills = %+v", out.Agents[0].Skills)
	}
	sk := out.Agents[0].Skills[i]
	if sk.EvidenceSchema == nil || *sk.EvidenceSchema != (mcpedge.SchemaRef{Name: "refund_evidence", URI: "a2ad://schemas/refund_evidence"}) ||
		strings.Join(sk.OutputSchemas, ",") != "risk_assessment" || sk.Tool != skillTool {
		t.Errorf("skill = %+v", sk)
	}
}

// The host schemas are resources: listed with a2ad://schemas/<name> and
// application/schema+json, read as the document a brief carries; an
// unknown URI is resource-not-found in a2ad's words; a reload that adds a
// schema adds its resource, with notifications/resources/list_changed.
func TestHostSchemasAreResources(t *testing.T) {
	s := startSkills(t)
	ctx := context.Background()
	list, err := s.session.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI+" "+r.MIMEType+" "+r.Name)
	}
	if got := strings.Join(uris, "; "); got != "a2ad://schemas/refund_evidence application/schema+json refund_evidence; a2ad://schemas/risk_assessment application/schema+json risk_assessment" {
		t.Errorf("resources = %s", got)
	}
	rd, err := s.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a2ad://schemas/risk_assessment"})
	if err != nil {
		t.Fatal(err)
	}
	sch, _ := s.d.Service.Schemas.Get("risk_assessment")
	if len(rd.Contents) != 1 || rd.Contents[0].Text != string(sch.Document) || rd.Contents[0].MIMEType != "application/schema+json" {
		t.Errorf("read = %+v", rd.Contents)
	}
	_, err = s.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a2ad://schemas/nope"})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams ||
		we.Message != "resource not found: a2ad has no resource a2ad://schemas/nope; its resources are the host schemas, a2ad://schemas/refund_evidence, a2ad://schemas/risk_assessment" {
		t.Errorf("unknown URI: %v", err)
	}

	time.Sleep(200 * time.Millisecond)
	base := s.resChg.Load()
	doc := `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","description":"a note","properties":{"text":{"type":"string","description":"the note"}}}`
	if err := os.WriteFile(filepath.Join(s.schemasDir, "note.json"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.d.ReloadSchemas(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "resources/list_changed after the reload", func() bool { return s.resChg.Load() > base })
	if list, err = s.session.ListResources(ctx, nil); err != nil || len(list.Resources) != 3 || list.Resources[0].URI != "a2ad://schemas/note" {
		t.Errorf("after reload: %v %+v", err, list)
	}
}

// Every tool a2ad lists, per-skill tools with the built-in host schemas
// included, passes the MCP Inspector's strict schema check (no bare true,
// no type arrays, no untyped schema, no remote $ref) and has a description
// on every property.
func TestEveryToolSchemaIsPortable(t *testing.T) {
	s := start(t, nil) // the built-in host schemas, no output_schemas: output_schema is an enum
	waitForTool(t, s.session, skillTool)
	res, err := s.session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		for kind, sch := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
			if sch == nil {
				t.Errorf("%s: no %s", tool.Name, kind)
				continue
			}
			if f := mcpedge.SchemaFindings(asMap(t, sch)); len(f) > 0 {
				t.Errorf("%s %s: %s", tool.Name, kind, strings.Join(f, "; "))
			}
		}
	}
	if got := strings.Join(names, ","); got != "agents_list,delegate,"+skillTool+",task_cancel,task_get,task_respond" {
		t.Errorf("tools = %s", got)
	}
	in := asMap(t, findTool(t, s.session, skillTool).InputSchema)
	if os, _ := json.Marshal(in["properties"].(map[string]any)["output_schema"]); !strings.Contains(string(os), `"enum":["refund_evidence","risk_assessment"]`) {
		t.Errorf("output_schema = %s, want the enum of the built-in schemas", os)
	}
	ws, _ := json.Marshal(asMap(t, findTool(t, s.session, "task_get").InputSchema)["properties"].(map[string]any)["wait_seconds"])
	if !strings.Contains(string(ws), `"maximum":50`) || !strings.Contains(string(ws), `"minimum":0`) || !strings.Contains(string(ws), `"type":"integer"`) {
		t.Errorf("task_get wait_seconds = %s", ws)
	}
	st, _ := json.Marshal(asMap(t, findTool(t, s.session, "task_get").OutputSchema)["properties"].(map[string]any)["state"])
	if !strings.Contains(string(st), `"enum":["submitted","working","input-required","auth-required","completed","failed","canceled","rejected"]`) {
		t.Errorf("state = %s", st)
	}
	// schema_not_found names the schemas there are.
	args := delegateArgs(evidence("C-5", 1))
	args["output_schema"] = "risk_asessment"
	if _, text := s.call(t, "delegate", args, nil); text != `schema_not_found: no host schema named "risk_asessment"; the host schemas are refund_evidence, risk_assessment` {
		t.Errorf("unknown output schema: %q", text)
	}
}

// ownTools counts a2ad's own tools among tools: not the per-skill ones,
// whose names always have "__" (mcpedge.SkillToolName).
func ownTools(tools []*mcp.Tool) int {
	n := 0
	for _, t := range tools {
		if !strings.Contains(t.Name, "__") {
			n++
		}
	}
	return n
}

// max_skill_tools_per_agent bounds one agent's per-skill tools: its
// card's skills beyond, in card order, get none, agents_list says why,
// and delegate still reaches them (red17 hostile: 64 skills on one card
// made tools/list some 860 KB for every host of the tenant).
func TestSkillToolsPerAgentBound(t *testing.T) {
	var c map[string]any
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &c); err != nil {
		t.Fatal(err)
	}
	skills := c["skills"].([]any)
	for _, id := range []string{"second", "third"} {
		sk := map[string]any{}
		for k, v := range skills[0].(map[string]any) {
			sk[k] = v
		}
		sk["id"] = id
		skills = append(skills, sk)
	}
	c["skills"] = skills
	s := startSkillsWith(t, func(cfg *daemon.Config) { cfg.MaxSkillToolsPerAgent = 2 }, mustJSONBytes(t, c))
	waitForTool(t, s.session, "fraud-review__second")
	var own []string
	for _, n := range toolNames(t, s.session) {
		if strings.Contains(n, "__") {
			own = append(own, n)
		}
	}
	slices.Sort(own)
	if strings.Join(own, " ") != "fraud-review__assess_refund_risk fraud-review__second" {
		t.Errorf("per-skill tools = %v", own)
	}
	res, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatal(err, res)
	}
	var out mcpedge.AgentsListOutput
	if err := json.Unmarshal(mustJSONBytes(t, res.StructuredContent), &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sk := range out.Agents[0].Skills {
		got = append(got, sk.ID+"|"+sk.Tool+"|"+sk.ToolNote)
	}
	want := []string{"assess_refund_risk|fraud-review__assess_refund_risk|", "second|fraud-review__second|",
		"third||no per-skill tool: the agent has more than 2 skills with one (max_skill_tools_per_agent); delegate to this skill with delegate"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("skills =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	res, err = s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: map[string]any{
		"agent": "fraud-review", "skill": "third", "objective": "Assess the fraud risk of this refund.",
		"evidence": evidence("C-78", 1999), "output_schema": "risk_assessment", "wait_seconds": 10}})
	if err != nil || res.IsError {
		t.Fatalf("delegate to the skill without a tool: %v %+v", err, res)
	}
	if got := asMap(t, res.StructuredContent); got["state"] != "completed" || got["skill"] != "third" {
		t.Errorf("delegate = %v", got)
	}
}

// notifications/tools/list_changed goes only to the sessions whose
// tenant's per-skill tools changed: a quarantine of tenant default's agent
// tells default's session, not acme's (red17 hostile: every session heard
// of every tenant's agents flapping).
func TestSkillToolListChangedStaysInTenant(t *testing.T) {
	s := startSkills(t)
	ctx := context.Background()
	var acme atomic.Int32
	as := s.connectTenant(t, "acme", "2025-11-25", "a2a:read a2a:delegate", &acme, nil)
	if slices.Contains(toolNames(t, as), skillTool) {
		t.Fatalf("acme lists %s", skillTool)
	}
	time.Sleep(300 * time.Millisecond)
	base, acmeBase := s.toolsChg.Load(), acme.Load()
	rec, err := s.d.Service.Agents.Quarantine(ctx, "fraud-review", "test: card under review")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "default's tools/list_changed after the quarantine", func() bool { return s.toolsChg.Load() > base })
	if _, err := s.d.Service.Agents.Approve(ctx, "fraud-review", rec.Fingerprint); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "default's tools/list_changed after the approval", func() bool { return s.toolsChg.Load() > base+1 })
	time.Sleep(300 * time.Millisecond)
	if n := acme.Load() - acmeBase; n != 0 {
		t.Errorf("acme's session heard %d tools/list_changed for tenant default's tools, want 0", n)
	}
	if n := s.toolsChg.Load() - base; n != 2 {
		t.Errorf("default's session heard %d tools/list_changed, want 2 (quarantine, approval)", n)
	}
}

// A negative bound of per-skill tools is a configuration error.
func TestMaxSkillToolsPerAgentNegative(t *testing.T) {
	_, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), MaxSkillToolsPerAgent: -1},
		slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if want := "config: max_skill_tools_per_agent -1: want 0 (the default, 16) or more"; err == nil || err.Error() != want {
		t.Errorf("Start: %v; want %q", err, want)
	}
}
