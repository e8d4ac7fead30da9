package mcpedge

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	p := &broker.Principal{Subject: "s", Tenant: "default", Scopes: []string{ScopeRead, ScopeDelegate}}
	s := NewServer(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Stdio: p, ConformanceTools: true})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "suite", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	cs, err := client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
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
