package mcpedge

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type probeIn struct {
	N int    `json:"n"`
	S string `json:"s,omitempty"`
}

type probeOut struct {
	Zebra  string          `json:"zebra"`
	Amount json.RawMessage `json:"amount"`
	Apple  int             `json:"apple"`
}

// toolHandler passes a2ad's output through as encoded once: members in
// the order a2ad writes them and an agent's large integer exact (the
// go-sdk's typed tools decoded it into a float64 and sorted the keys), the
// same bytes as structuredContent and as the text block; a handler's own
// result, a JSON-RPC error and any other error keep their meaning, and
// arguments that do not decode get a2ad's words.
func TestToolHandlerEncodesTheOutputOnce(t *testing.T) {
	var got probeIn
	h := toolHandler("probe", func(_ context.Context, _ *mcp.CallToolRequest, in probeIn) (*mcp.CallToolResult, probeOut, error) {
		got = in
		switch in.S {
		case "ask":
			return &mcp.CallToolResult{RequestState: "sealed"}, probeOut{}, nil
		case "wire":
			return nil, probeOut{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such task"}
		case "fail":
			return nil, probeOut{}, errors.New("task_not_found: task not found")
		}
		return nil, probeOut{Zebra: "z", Amount: json.RawMessage(`12345678901234567891`), Apple: in.N}, nil
	})
	call := func(args string) (*mcp.CallToolResult, error) {
		return h(context.Background(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "probe", Arguments: json.RawMessage(args)}})
	}
	res, err := call(`{"n": 7}`)
	if err != nil || res.IsError || got.N != 7 {
		t.Fatalf("call = %+v, %v (in %+v)", res, err, got)
	}
	const want = `{"zebra":"z","amount":12345678901234567891,"apple":7}`
	if sc := string(res.StructuredContent.(json.RawMessage)); sc != want {
		t.Errorf("structuredContent = %s; want %s", sc, want)
	}
	if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != want {
		t.Errorf("content = %+v; want one text block %s", res.Content, want)
	}
	if res, err := call(`{"n": 1, "s": "ask"}`); err != nil || res.RequestState != "sealed" || res.StructuredContent != nil || res.Content != nil {
		t.Errorf("a handler's own result = %+v, %v; want it as it is", res, err)
	}
	var we *jsonrpc.Error
	if res, err := call(`{"s": "wire"}`); res != nil || !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("JSON-RPC error = %+v, %v; want it as it is", res, err)
	}
	if res, err := call(`{"s": "fail"}`); err != nil || !res.IsError || res.Content[0].(*mcp.TextContent).Text != "task_not_found: task not found" {
		t.Errorf("tool error = %+v, %v; want a tool error with its text", res, err)
	}
	if res, err := call(`{"n": "seven"}`); err != nil || !res.IsError ||
		res.Content[0].(*mcp.TextContent).Text != "invalid_argument: tool probe: arguments: they do not match the tool's input schema (its input schema is in tools/list)" {
		t.Errorf("undecodable arguments = %+v, %v; want a2ad's invalid_argument", res, err)
	}
	for _, args := range []string{``, `null`, ` `} {
		got = probeIn{N: -1}
		if res, err := call(args); err != nil || res.IsError || got.N != 0 {
			t.Errorf("arguments %q = %+v, %v (in %+v); want the zero input", args, res, err, got)
		}
	}
}
