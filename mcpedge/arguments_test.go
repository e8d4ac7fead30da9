package mcpedge

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// argumentsHost is a host connected (in memory) to a server with a2ad's
// task_get and delegate argument types and a2ad's argument check; the
// tools answer "ok".
func argumentsHost(t *testing.T) *mcp.ClientSession {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	ok := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}
	mcp.AddTool(s, &mcp.Tool{Name: "task_get", InputSchema: encodedInputSchema[TaskGetInput]()}, func(context.Context, *mcp.CallToolRequest, TaskGetInput) (*mcp.CallToolResult, TaskOutput, error) {
		return ok, TaskOutput{}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "delegate", InputSchema: encodedInputSchema[DelegateInput]()}, func(context.Context, *mcp.CallToolRequest, DelegateInput) (*mcp.CallToolResult, TaskOutput, error) {
		return ok, TaskOutput{}, nil
	})
	s.AddReceivingMiddleware(secondInitialize, checkToolArguments(schemaLimits{}))
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Arguments of the wrong type, out of range, unknown or missing get one
// tool execution error (isError, invalid_argument) naming every fault at
// once by its JSON pointer and what is wanted, in a2ad's words: never a
// Go type name or a library's phrase.
func TestToolArgumentFaultsInA2adsWords(t *testing.T) {
	cs := argumentsHost(t)
	const intRange = "want an integer from -9223372036854775808 to 9223372036854775807, in digits (no fraction, no exponent)"
	for _, c := range []struct {
		tool, args, want string
	}{
		{"task_get", `{"task_id":"x","wait_seconds":99999999999999999999999}`, "invalid_argument: tool task_get: /wait_seconds: " + intRange + " (its input schema is in tools/list)"},
		{"task_get", `{"task_id":"x","wait_seconds":-9223372036854775809}`, "invalid_argument: tool task_get: /wait_seconds: " + intRange + " (its input schema is in tools/list)"},
		{"task_get", `{"task_id":"x","wait_seconds":1e+23}`, "invalid_argument: tool task_get: /wait_seconds: " + intRange + " (its input schema is in tools/list)"},
		{"task_get", `{"task_id":5,"wait":1}`, "invalid_argument: tool task_get: /task_id: want a string; /wait: unknown argument (this takes task_id, wait_seconds) (its input schema is in tools/list)"},
		{"task_get", `{}`, "invalid_argument: tool task_get: /task_id: required (its input schema is in tools/list)"},
		{"delegate", `{"agent":"a","skill":"s","objective":"o","evidence":[],"output_schema":"r","budget":{"deadline_seconds":1e30},"constraints":["a",2]}`,
			"invalid_argument: tool delegate: /budget/deadline_seconds: " + intRange + "; /constraints/1: want a string; /evidence: want a JSON object (its input schema is in tools/list)"},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: json.RawMessage(c.args)})
		if err != nil || !res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != c.want {
			t.Errorf("%s %s:\n got %v %+v\nwant the tool error %s", c.tool, c.args, err, res, c.want)
		}
	}
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "task_get", Arguments: json.RawMessage(`{"task_id":"x","wait_seconds":5}`)}); err != nil || res.IsError {
		t.Errorf("good arguments: %v %+v", err, res)
	}
}

// A second initialize on one session is JSON-RPC -32600 in a2ad's words
// (the go-sdk answers code 0).
func TestSecondInitializeIsInvalidRequest(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	s.AddReceivingMiddleware(secondInitialize)
	var runErr error
	p, _ := serveStdio(t, s, time.Minute, &runErr)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	m := p.next()
	e, _ := m["error"].(map[string]any)
	want := "invalid request: initialize was already received on this session; send it once, first"
	if m["id"] != float64(2) || e["code"] != float64(-32600) || e["message"] != want {
		t.Errorf("second initialize: %v, want -32600 %q", m, want)
	}
}

// FuzzCheckArguments: whatever the arguments, either a2ad finds faults,
// named in its own words (no Go type or package name), or the go-sdk can
// decode them into the tool's input type without error: a host never
// reads a decoder's text.
func FuzzCheckArguments(f *testing.F) {
	for _, s := range []string{`{"task_id":"x","wait_seconds":1e+23}`, `{"task_id":"x","wait_seconds":-9223372036854775809}`, `{"task_id":5}`,
		`{"agent":"a","skill":"s","objective":"o","evidence":{},"output_schema":"r","budget":{"deadline_seconds":1e30}}`,
		`{"agent":"a","skill":"s","objective":"o","evidence":{},"output_schema":"r","constraints":null,"budget":null}`, `null`, `{"~/":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		if !json.Valid([]byte(args)) {
			return
		}
		for name, typ := range toolInputs {
			faults := checkArguments(typ, json.RawMessage(args))
			for _, fl := range faults {
				for _, lib := range []string{"Go ", "mcpedge.", "json:", "interface", "struct", "int64", "float64", "unmarshal", "validating"} {
					if strings.Contains(fl, lib) {
						t.Fatalf("%s %s: fault %q has %q", name, args, fl, lib)
					}
				}
			}
			if len(faults) == 0 && args != "null" {
				v := reflect.New(typ).Interface()
				if err := json.Unmarshal([]byte(args), v); err != nil {
					t.Fatalf("%s %s: no fault found, but decoding fails: %v", name, args, err)
				}
			}
		}
	})
}
