package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/testlog"
)

// The binding from a second language (issue 18, point 5): the JavaScript agent
// in examples/ts-agent, written from docs/nats-binding.md alone with the
// official NATS client from npm, run by Node as a process against the real
// a2ad binary, approved by the operator with the CLI and used by a host
// through MCP. .ci/ts-agent installs Node and the agent's packages and sets:
//
//	A2AD_TS_AGENT_NODE  the node binary
//	A2AD_TS_AGENT_DIR   examples/ts-agent with its node_modules installed
func TestTypeScriptAgentSpeaksTheBinding(t *testing.T) {
	node, dir := os.Getenv("A2AD_TS_AGENT_NODE"), os.Getenv("A2AD_TS_AGENT_DIR")
	if node == "" || dir == "" {
		t.Skip("A2AD_TS_AGENT_NODE and A2AD_TS_AGENT_DIR are unset: .ci/ts-agent installs Node and the agent and runs this test")
	}
	work := t.TempDir()
	cfg := filepath.Join(work, "a2ad.yaml")
	// Explicit approval: the operator reviews the card's fingerprint.
	if err := os.WriteFile(cfg, []byte("agents:\n  - id: ts-review\n    tenants: [default]\n    evidence_schemas:\n      assess_refund_risk: refund_evidence\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(work, "data")
	d := startDaemon(t, nil, "--config", cfg, "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--data-dir", dataDir)...).CombinedOutput()
		return string(out), err
	}

	// The operator mints the agent's credential into a file.
	cred, err := exec.Command(bin, "agents", "credential", "ts-review", "--data-dir", dataDir, "--ttl", "1h").Output()
	if err != nil {
		t.Fatalf("a2ad agents credential: %v", err)
	}
	credFile := filepath.Join(work, "ts-review.jwt")
	if err := os.WriteFile(credFile, cred, 0o600); err != nil {
		t.Fatal(err)
	}

	agent := exec.Command(node, filepath.Join(dir, "agent.mjs"), "--nats-url", d.NATS, "--credential-file", credFile)
	agent.Dir = dir
	var logs testlog.Buffer
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Kill()
		_ = agent.Wait()
		if t.Failed() || testing.Verbose() {
			t.Logf("node agent log:\n%s", logs.String())
		}
	})

	// It registers; the card waits for the operator, who approves the
	// fingerprint the agent was told.
	var rec struct {
		Status      string `json:"status"`
		Fingerprint string `json:"fingerprint"`
		Delegable   bool   `json:"delegable"`
	}
	waitUntil(t, "the node agent's registration", func() bool {
		out, err := run("agents", "show", "ts-review", "--json")
		return err == nil && json.Unmarshal([]byte(out), &rec) == nil && rec.Status == "pending" && rec.Fingerprint != ""
	})
	if want := "registered: status pending fingerprint " + rec.Fingerprint; !strings.Contains(logs.String(), want) {
		t.Errorf("agent log lacks %q:\n%s", want, logs.String())
	}
	// The card was sent byte for byte: a2ad's fingerprint of what it received
	// is check-card's of the file (§9).
	if out, err := exec.Command(bin, "agents", "check-card", "--agent", "ts-review", filepath.Join(dir, "card.json")).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "fingerprint: "+rec.Fingerprint+"\n") || !strings.Contains(string(out), "accepted: 0 notes, 0 warnings") {
		t.Errorf("check-card of the agent's card (want fingerprint %s, no notes): %v\n%s", rec.Fingerprint, err, out)
	}
	if out, err := run("agents", "approve", "ts-review", "--fingerprint", rec.Fingerprint); err != nil ||
		!regexp.MustCompile(`(?m)^Delegable:\s+true$`).MatchString(out) {
		t.Fatalf("approve: %v\n%s", err, out)
	}

	h := connectHost(t, d)
	delegate := func(caseID string, amount int) toolResult {
		return h.mustCall("delegate", map[string]any{
			"agent": "ts-review", "skill": "assess_refund_risk", "objective": "Assess the fraud risk of this refund.",
			"evidence":      map[string]any{"case_id": caseID, "amount_cents": amount, "currency": "EUR", "manual_review_above_cents": 50000},
			"output_schema": "risk_assessment", "budget": map[string]any{"deadline_seconds": 120}, "wait_seconds": 20,
		})
	}
	artifactJSON := func(r toolResult) string {
		if len(r.Artifacts) != 1 || len(r.Artifacts[0].Parts) != 1 {
			t.Fatalf("task %s: %d artifacts, want 1 with one part: %+v", r.TaskID, len(r.Artifacts), r)
		}
		b, _ := json.Marshal(r.Artifacts[0].Parts[0].Data)
		return string(b)
	}
	noRefusals := func(id string) adminRecord {
		r := settledRecord(t, d, id)
		for _, e := range r.History {
			if e.Refused {
				t.Errorf("task %s: a2ad refused an event of the node agent: %+v", id, e)
			}
		}
		return r
	}

	// 1. A task that completes, with a schema-valid artifact (a2ad validates
	// it against risk_assessment before it reports completed).
	done := delegate("C-7", 1999)
	if done.State != "completed" {
		t.Fatalf("C-7: %s %q, want completed", done.State, done.Reason)
	}
	if got, want := artifactJSON(done), `{"case_id":"C-7","policy_version":"fraud-policy-2026.11","reasons":["no risk signals in the evidence"],"risk_level":"low","score":0.1}`; got != want {
		t.Errorf("C-7 artifact = %s, want %s", got, want)
	}
	if ev := strings.Join(noRefusals(done.TaskID).events(), " "); ev != smallCaseHistory {
		t.Errorf("C-7 history = %q, want %q", ev, smallCaseHistory)
	}

	// 2. A task that asks a question and completes after the answer.
	ask := delegate("C-41", 125000)
	if ask.State != "input-required" || ask.Question != "Case C-41: the refund of 125000 cents is above the manual review threshold of 50000 cents. Has a human reviewer verified the customer's identity? Answer yes or no." {
		t.Fatalf("C-41: %s question %q, want input-required with the identity question", ask.State, ask.Question)
	}
	answered := h.mustCall("task_respond", map[string]any{"task_id": ask.TaskID, "answer": "yes", "wait_seconds": 20})
	if answered.State != "completed" {
		t.Fatalf("C-41 after the answer: %s %q, want completed", answered.State, answered.Reason)
	}
	if got, want := artifactJSON(answered), `{"case_id":"C-41","policy_version":"fraud-policy-2026.11","reasons":["amount 125000 cents above 50000","identity verified by a human reviewer"],"risk_level":"low","score":0.2}`; got != want {
		t.Errorf("C-41 artifact = %s, want %s", got, want)
	}
	if ev := strings.Join(noRefusals(ask.TaskID).events(), " "); ev != reviewCaseHistory {
		t.Errorf("C-41 history = %q, want %q", ev, reviewCaseHistory)
	}

	// 3. A task that is canceled while it waits for an answer: the agent
	// receives CancelTask (its log says so) and publishes nothing after.
	wait := delegate("C-42", 125000)
	if wait.State != "input-required" {
		t.Fatalf("C-42: %s, want input-required", wait.State)
	}
	canceled := h.mustCall("task_cancel", map[string]any{"task_id": wait.TaskID})
	if canceled.State != "canceled" || canceled.Reason != "canceled_by_host" {
		t.Fatalf("task_cancel: %s %q", canceled.State, canceled.Reason)
	}
	cancelLine := regexp.MustCompile(`task (ts-[0-9a-f]{16}) \(a2ad task ` + regexp.QuoteMeta(wait.TaskID) + `\) canceled: no more events for it`)
	waitUntil(t, "the node agent to log the cancel", func() bool { return cancelLine.MatchString(logs.String()) })
	// A later task completes: the agent, still serving, had every chance to
	// publish for C-42 meanwhile, and published nothing.
	if after := delegate("C-43", 1999); after.State != "completed" {
		t.Fatalf("C-43: %s %q, want completed", after.State, after.Reason)
	}
	all := logs.String()
	since := all[cancelLine.FindStringIndex(all)[1]:]
	if strings.Contains(since, "event "+wait.TaskID+".") {
		t.Errorf("the agent published for %s after the cancel:\n%s", wait.TaskID, since)
	}
	// Two events before the cancel (working, the question), acked.
	for _, seq := range []string{".1 acked", ".2 acked"} {
		if !strings.Contains(all, "event "+wait.TaskID+seq) {
			t.Errorf("agent log lacks event %s%s", wait.TaskID, seq)
		}
	}
	if ev, want := strings.Join(noRefusals(wait.TaskID).events(), " "), ">submitted submitted>working working>input-required input-required>canceled"; ev != want {
		t.Errorf("C-42 history = %q, want %q", ev, want)
	}
}
