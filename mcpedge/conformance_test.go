package mcpedge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// With ConformanceTools the suite's test tools are listed beside a2ad's
// five, and their request states are a2ad's: a changed one is JSON-RPC
// -32602, the genuine one completes, and a multi-round state carries what
// the earlier round answered. (The suite itself runs them in cmd/a2ad
// TestConformanceInputRequestScenarios.)
func TestConformanceToolsUseA2adRequestStates(t *testing.T) {
	ctx := context.Background()
	cs := conformanceSession(t, ScopeRead, ScopeDelegate)
	if tools, err := cs.ListTools(ctx, nil); err != nil || len(tools.Tools) != 5+len(conformanceTools) {
		t.Fatalf("tools/list: %v, want a2ad's 5 and %d test tools", err, len(conformanceTools))
	}
	call := func(name string, in mcp.InputResponseMap, state string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}, InputResponses: in, RequestState: state})
	}
	text := func(r *mcp.CallToolResult) string {
		if r == nil || len(r.Content) != 1 {
			return ""
		}
		tc, _ := r.Content[0].(*mcp.TextContent)
		return tc.Text
	}
	const tool = "test_input_required_result_tampered_state"
	r, err := call(tool, nil, "")
	if err != nil || r.RequestState == "" || r.InputRequests["confirm"] == nil {
		t.Fatalf("round 1: %v %+v", err, r)
	}
	ok := mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}}
	other, err := call("test_input_required_result_request_state", nil, "")
	if err != nil || other.RequestState == "" {
		t.Fatalf("request_state round 1: %v %+v", err, other)
	}
	for name, state := range map[string]string{"changed": r.RequestState + "-TAMPERED", "another tool's": other.RequestState} {
		_, err := call(tool, ok, state)
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s state: %v, want JSON-RPC error -32602", name, err)
		}
	}
	if r, err := call(tool, ok, r.RequestState); err != nil || text(r) != "state-ok: confirmed true" {
		t.Errorf("genuine state: %v %q", err, text(r))
	}
	const multi = "test_input_required_result_multi_round"
	r1, _ := call(multi, nil, "")
	r2, err := call(multi, mcp.InputResponseMap{"step1": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}}, r1.RequestState)
	if err != nil || r2.InputRequests["step2"] == nil || r2.RequestState == r1.RequestState {
		t.Fatalf("round 2: %v %+v", err, r2)
	}
	r3, err := call(multi, mcp.InputResponseMap{"step2": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"color": "blue"}}}, r2.RequestState)
	if err != nil || text(r3) != "Alice's favorite color is blue." {
		t.Errorf("round 3: %v %q", err, text(r3))
	}
}

// With ConformanceTools a2ad declares prompts (and only then) and serves
// the suite's test prompt in two rounds: prompts/get without responses is
// an input request for user_context under an a2ad request state; the
// retry with the answer and that state is the prompt; a changed state is
// -32602. (The suite runs it in cmd/a2ad TestConformanceInputRequestScenarios.)
func TestConformancePromptAsksForItsContext(t *testing.T) {
	ctx := context.Background()
	cs := conformanceSession(t, ScopeRead)
	if caps, _ := json.Marshal(cs.InitializeResult().Capabilities); string(caps) != `{"prompts":{},"resources":{"listChanged":true},"tools":{"listChanged":true}}` {
		t.Errorf("declared capabilities %s, want prompts, resources and tools", caps)
	}
	if l, err := cs.ListPrompts(ctx, nil); err != nil || len(l.Prompts) != 1 || l.Prompts[0].Name != conformancePrompt {
		t.Fatalf("prompts/list: %v %+v", err, l)
	}
	r1, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: conformancePrompt})
	if err != nil || !r1.NeedsInput() || r1.RequestState == "" || len(r1.Messages) != 0 {
		t.Fatalf("round 1: %v %+v", err, r1)
	}
	wire, _ := json.Marshal(r1)
	var got struct {
		ResultType    string          `json:"resultType"`
		InputRequests json.RawMessage `json:"inputRequests"`
	}
	_ = json.Unmarshal(wire, &got)
	const want = `{"user_context":{"method":"elicitation/create","params":{"mode":"form","message":"What context should the prompt use?","requestedSchema":{"type":"object","properties":{"context":{"type":"string"}},"required":["context"]}}}}`
	var gotRequests, wantRequests any
	_ = json.Unmarshal(got.InputRequests, &gotRequests)
	_ = json.Unmarshal([]byte(want), &wantRequests)
	if got.ResultType != "input_required" || !reflect.DeepEqual(gotRequests, wantRequests) {
		t.Errorf("round 1 on the wire: %s, want resultType input_required and inputRequests %s", wire, want)
	}
	answer := mcp.InputResponseMap{"user_context": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"context": "test context"}}}
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: conformancePrompt, InputResponses: answer, RequestState: r1.RequestState + "-TAMPERED"})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("tampered state: %v, want JSON-RPC error -32602", err)
	}
	r2, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: conformancePrompt, InputResponses: answer, RequestState: r1.RequestState})
	if err != nil || r2.NeedsInput() || len(r2.Messages) != 1 || r2.Messages[0].Role != "user" {
		t.Fatalf("round 2: %v %+v", err, r2)
	}
	if tc, _ := r2.Messages[0].Content.(*mcp.TextContent); tc == nil || tc.Text != "Use this context: test context" {
		t.Errorf("round 2 message: %+v, want text %q", r2.Messages[0].Content, "Use this context: test context")
	}
}

// conformanceSession is a 2026-07-28 client session, as the suite opens
// one (multi-round trips left to the test), with an a2ad that has the
// conformance tools and a principal with scopes; closed at test end.
func conformanceSession(t *testing.T, scopes ...string) *mcp.ClientSession {
	t.Helper()
	p := &broker.Principal{Subject: "s", Tenant: "default", Scopes: scopes}
	s := NewServer(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Stdio: p, ConformanceTools: true})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "suite", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	cs, err := client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}
