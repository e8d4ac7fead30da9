package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/nats-io/nats.go"
)

// The binding from a second language (issue 18, point 5): the JavaScript agent
// in examples/ts-agent, written from docs/nats-binding.md alone with the
// official NATS client from npm, run by Node as a process against the real
// a2ad binary, approved by the operator with the CLI and used by a host
// through MCP: a task that completes, one that asks a question and completes
// after the answer, one canceled while it waits (the agent logs the cancel and
// publishes nothing after), the agent's error replies as a2ad's connection
// sees them, and a restart of a2ad mid-task (the agent reconnects, registers
// again, and the task resumes on the answer). .ci/ts-agent installs Node and
// the agent's packages and sets:
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
	cred, err := exec.Command(bin, "agents", "credential", "ts-review", "--out", "-", "--data-dir", dataDir, "--ttl", "1h").Output()
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
	waitUntil(t, "the node agent to log a2ad's answer to its registration", func() bool {
		return strings.Contains(logs.String(), "registered: status pending fingerprint "+rec.Fingerprint)
	})
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

	// 4. What a2ad sees of the agent on the wire, as a2ad's own connection
	// (user a2ad, §10) asks it: the error mapping (§8), the probe (§5.7),
	// GetTask and CancelTask of an ended task (§5.5, §5.6).
	pw, err := os.ReadFile(filepath.Join(dataDir, "nats", "daemon-password"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(d.NATS, nats.UserInfo("a2ad", strings.TrimSpace(string(pw))))
	if err != nil {
		t.Fatal(err)
	}
	doneID := regexp.MustCompile(`task (ts-[0-9a-f]{16}) for a2ad task ` + regexp.QuoteMeta(done.TaskID)).FindStringSubmatch(all)
	if doneID == nil {
		t.Fatalf("agent log names no task for %s", done.TaskID)
	}
	ask1 := func(version, body string) string {
		t.Helper()
		m := nats.NewMsg("a2a.agent.ts-review.rpc")
		if version != "" {
			m.Header.Set("A2A-Version", version)
		}
		m.Data = []byte(body)
		r, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", body, err)
		}
		if v := r.Header.Get("A2A-Version"); v != "1.0" {
			t.Errorf("reply to %s has A2A-Version %q, want 1.0", body, v)
		}
		return string(r.Data)
	}
	code := func(reply string) string {
		var r struct {
			ID    string `json:"id"`
			Error struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(reply), &r); err != nil {
			return "undecodable: " + reply
		}
		return fmt.Sprintf("%s %d", r.ID, r.Error.Code)
	}
	other := `"metadata":{"a2ad/taskId":"tsk-x1","a2ad/eventsSubject":"a2a.events.fraud-review.tsk-x1"}`
	for _, c := range []struct{ what, version, body, want string }{
		{"the liveness probe", "1.0", `{"jsonrpc":"2.0","id":"42","method":"GetTask","params":{"id":"a2ad-liveness-probe"}}`, "42 -32001"},
		{"A2A-Version 2.0", "2.0", `{"jsonrpc":"2.0","id":"3","method":"GetTask","params":{"id":"x"}}`, "3 -32009"},
		{"no A2A-Version (0.3)", "", `{"jsonrpc":"2.0","id":"4","method":"GetTask","params":{"id":"x"}}`, "4 -32009"},
		{"a 0.3 method", "1.0", `{"jsonrpc":"2.0","id":"5","method":"tasks/get","params":{"id":"x"}}`, "5 -32601"},
		{"not JSON", "1.0", `{"jsonrpc":`, " -32700"},
		{"a number id", "1.0", `{"jsonrpc":"2.0","id":6,"method":"GetTask","params":{"id":"x"}}`, " -32600"},
		{"events steered to another agent", "1.0", `{"jsonrpc":"2.0","id":"7","method":"SendMessage","params":{"message":{"messageId":"tsk-x1-m1","role":"ROLE_USER","parts":[{"data":{"objective":"x"},"mediaType":"application/json"}],` + other + `}}}`, "7 -32602"},
		{"CancelTask of a completed task", "1.0", `{"jsonrpc":"2.0","id":"8","method":"CancelTask","params":{"id":"` + doneID[1] + `"}}`, "8 -32002"},
	} {
		if got := code(ask1(c.version, c.body)); got != c.want {
			t.Errorf("%s: reply id and code %q, want %q", c.what, got, c.want)
		}
	}
	var got struct {
		Result struct {
			ID     string `json:"id"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
			Artifacts []struct {
				ArtifactID string `json:"artifactId"`
			} `json:"artifacts"`
		} `json:"result"`
	}
	reply := ask1("1.0", `{"jsonrpc":"2.0","id":"9","method":"GetTask","params":{"id":"`+doneID[1]+`"}}`)
	if err := json.Unmarshal([]byte(reply), &got); err != nil || got.Result.ID != doneID[1] || got.Result.Status.State != "TASK_STATE_COMPLETED" ||
		len(got.Result.Artifacts) != 1 || got.Result.Artifacts[0].ArtifactID != "risk-assessment" {
		t.Errorf("GetTask %s = %s, want it completed with its risk-assessment artifact", doneID[1], reply)
	}

	nc.Close()

	// 5. a2ad is killed while a task waits for its answer, and restarted on
	// the same NATS address: the agent reconnects and registers again (the
	// card is still approved), and the answer through the new instance
	// resumes the task, which completes.
	pending := delegate("C-44", 125000)
	if pending.State != "input-required" {
		t.Fatalf("C-44: %s, want input-required", pending.State)
	}
	d.kill(t)
	d2 := startDaemon(t, nil, "--config", cfg, "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--nats-listen", strings.TrimPrefix(d.NATS, "nats://"))
	reregistered := "reconnected: registering again"
	waitUntil(t, "the node agent to register again", func() bool {
		l := logs.String()
		i := strings.Index(l, reregistered)
		return i >= 0 && strings.Contains(l[i:], "registered: status approved fingerprint "+rec.Fingerprint)
	})
	h2 := connectHost(t, d2)
	resumed := h2.mustCall("task_respond", map[string]any{"task_id": pending.TaskID, "answer": "no", "wait_seconds": 20})
	if resumed.State != "completed" {
		t.Fatalf("C-44 after the restart and the answer: %s %q, want completed", resumed.State, resumed.Reason)
	}
	if got, want := artifactJSON(resumed), `{"case_id":"C-44","policy_version":"fraud-policy-2026.11","reasons":["amount 125000 cents above 50000","identity not verified"],"risk_level":"high","score":0.7}`; got != want {
		t.Errorf("C-44 artifact = %s, want %s", got, want)
	}
	if ev := strings.Join(settledRecord(t, d2, pending.TaskID).events(), " "); ev != reviewCaseHistory {
		t.Errorf("C-44 history = %q, want %q", ev, reviewCaseHistory)
	}
}
