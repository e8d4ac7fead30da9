package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/mcpedge"
)

// The per-skill tool is a delegation tool as delegate is: for a host that
// declares the MCP Tasks extension, a task-augmented call of it returns a
// task handle once the task is stored, and tasks/get follows it to the
// validated assessment, with the per-skill tool's result.
func TestMCPTasksOfAPerSkillTool(t *testing.T) {
	d, _, _ := restartable(t, "embedded-nats", nil)
	h := newTasksHost(t, d, d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate), true)
	const tool = "fraud-review__assess_refund_risk"
	args := map[string]any{"objective": "Assess the fraud risk of this refund.", "output_schema": "risk_assessment",
		"evidence": map[string]any{"case_id": "C-931", "amount_cents": 1999, "currency": "EUR"}, "budget": map[string]any{"deadline_seconds": 120}}
	var res map[string]any
	for until := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := h.send("tools/call", tool, map[string]any{"name": tool, "arguments": args})
		if r.Error == nil && r.Result != nil {
			res = r.Result
			break
		}
		if time.Now().After(until) {
			t.Fatalf("%s: HTTP %d %+v (not listed within 15 s?)", tool, r.Status, r.Error)
		}
	}
	if res["isError"] == true && strings.Contains(fmt.Sprint(res["content"]), "/output_schema: unknown argument") {
		t.Fatalf("the configuration allows one output schema: %v", res)
	}
	id := checkCreated(t, res, 120)
	sc := structured(t, h.poll(id, mcpedge.TaskStatusCompleted, 20*time.Second))
	r, _ := sc["result"].(map[string]any)
	if sc["state"] != "completed" || sc["skill"] != "assess_refund_risk" || r["case_id"] != "C-931" {
		t.Errorf("structuredContent = %v, want the completed task with its result for C-931", sc)
	}
}
