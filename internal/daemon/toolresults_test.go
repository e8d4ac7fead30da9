package daemon_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every result of a2ad's tools satisfies the output schema tools/list
// gives for it, and carries its structuredContent once more, exactly, as
// its one text block: the go-sdk no longer validates a2ad's results
// (mcpedge's toolHandler), so this is the check that the contract holds,
// over a delegation asked a question, answered, completed, read and one
// cancelled.
func TestToolResultsMatchTheirOutputSchemas(t *testing.T) {
	s := start(t, nil)
	ctx := context.Background()
	tools, err := s.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range tools.Tools {
		if tool.OutputSchema == nil {
			continue
		}
		b, err := json.Marshal(tool.OutputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var sch jsonschema.Schema
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatalf("%s: output schema: %v", tool.Name, err)
		}
		if schemas[tool.Name], err = sch.Resolve(nil); err != nil {
			t.Fatalf("%s: output schema: %v", tool.Name, err)
		}
	}
	checked := map[string]int{}
	call := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
		if len(res.Content) != 1 {
			t.Fatalf("%s: %d content blocks; want 1, the structured content as text", tool, len(res.Content))
		}
		text := res.Content[0].(*mcp.TextContent).Text
		var fromText, structured any
		if err := json.Unmarshal([]byte(text), &fromText); err != nil {
			t.Fatalf("%s: text block %q is not JSON: %v", tool, text, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &structured)
		if a, b := mustJSON(t, fromText), mustJSON(t, structured); a != b {
			t.Fatalf("%s: text block %s; want the structured content %s", tool, a, b)
		}
		sch := schemas[tool]
		if sch == nil {
			t.Fatalf("%s lists no output schema", tool)
		}
		if err := sch.Validate(structured); err != nil {
			t.Fatalf("%s: result %s does not satisfy its output schema: %v", tool, text, err)
		}
		checked[tool]++
		return structured.(map[string]any)
	}
	call("agents_list", nil)
	asked := call("delegate", delegateArgs(evidence("C-41", 125000)))
	if asked["state"] != "input-required" {
		t.Fatalf("delegate above the threshold: %v; want input-required", asked)
	}
	id := asked["task_id"].(string)
	call("task_get", map[string]any{"task_id": id})
	if done := call("task_respond", map[string]any{"task_id": id, "answer": "yes", "wait_seconds": 10}); done["state"] != "completed" {
		t.Fatalf("task_respond: %v; want completed", done)
	}
	if got := call("task_get", map[string]any{"task_id": id}); got["state"] != "completed" || got["artifacts"] == nil {
		t.Fatalf("task_get of the completed task: %v; want its artifacts", got)
	}
	open := call("delegate", delegateArgs(evidence("C-42", 125000)))
	if c := call("task_cancel", map[string]any{"task_id": open["task_id"]}); c["state"] != "canceled" {
		t.Fatalf("task_cancel: %v; want canceled", c)
	}
	for _, tool := range []string{"agents_list", "delegate", "task_get", "task_respond", "task_cancel"} {
		if checked[tool] == 0 {
			t.Errorf("no result of %s checked", tool)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
