package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/failpoint"
	"github.com/a2ad/a2ad/internal/refagent"
)

// These tests kill real a2ad processes while a standard A2A agent over HTTP
// (the reference agent served by the official Go SDK's a2asrv, in the test
// process so its counters can be read) has the task. Standard agents do
// not deduplicate messageId, so what a host relies on is stricter than
// for NATS agents: the agent got exactly one SendMessage per delegation
// (and one per answer), whatever a2ad's crash.

// httpAgentOn serves the HTTP reference agent on a loopback port.
func httpAgentOn(t *testing.T, misbehave map[string]string) (*refagent.HTTPAgent, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	a, err := refagent.NewHTTP(refagent.HTTPConfig{BaseURL: "http://" + srv.Listener.Addr().String(), Streaming: true, Misbehave: misbehave,
		SlowFor: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = a.Handler()
	srv.Start()
	t.Cleanup(func() { a.Stop(); srv.Close() })
	return a, srv.URL
}

// httpAgentConfig names the HTTP agent fraud-http, its card at agentURL.
func httpAgentConfig(agentURL string) string {
	return `  - id: fraud-http
    tenants: [default]
    trust_on_first_use: true
    card_url: ` + agentURL + `
    evidence_schemas:
      assess_refund_risk: refund_evidence
`
}

// startWithHTTPAgent runs a2ad (embedded NATS, env for its first start)
// with the HTTP agent configured and returns it and the flags that restart
// it on the same data directory and NATS port.
func startWithHTTPAgent(t *testing.T, agentURL string, env []string) (*daemonProc, []string) {
	t.Helper()
	flags := []string{"--config", configFile(t, httpAgentConfig(agentURL)), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"}
	d := startDaemon(t, env, append(flags, "--nats-listen", "127.0.0.1:-1")...)
	return d, append(flags, "--nats-listen", strings.TrimPrefix(d.NATS, "nats://"))
}

// checkHTTPCompleted asserts the task completed once with one risk
// assessment for caseID, each transition at most once and nothing left in
// its outbox. a2ad observes an HTTP agent's task (stream, polls): a state
// the agent passed through while no a2ad watched (working, while a2ad was
// down) is not in the history, so the history may skip it.
func checkHTTPCompleted(t *testing.T, got toolResult, rec adminRecord, caseID string, answered bool) {
	t.Helper()
	if got.State != "completed" || len(got.Artifacts) != 1 || len(got.Artifacts[0].Parts) != 1 {
		t.Fatalf("task %s: state %s reason %q, %d artifacts; want completed with one", got.TaskID, got.State, got.Reason, len(got.Artifacts))
	}
	if data := got.Artifacts[0].Parts[0].Data; data["case_id"] != caseID || data["policy_version"] != refagent.PolicyVersion {
		t.Errorf("artifact = %v, want case_id %s policy_version %s", data, caseID, refagent.PolicyVersion)
	}
	ev := rec.events()
	seen := map[string]bool{}
	for _, e := range ev {
		if seen[e] {
			t.Errorf("history %q: %s twice", ev, e)
		}
		seen[e] = true
	}
	if len(ev) < 2 || ev[0] != ">submitted" || !strings.HasSuffix(ev[len(ev)-1], ">completed") {
		t.Errorf("history %q, want >submitted first and one completion last", ev)
	}
	if answered && !seen["input-required>working"] {
		t.Errorf("history %q lacks the host's answer (input-required>working)", ev)
	}
	if rec.Outbox != nil {
		t.Errorf("outbox still holds %v", rec.Outbox)
	}
}

func httpDelegate(caseID string, amount int, key string, wait int) map[string]any {
	args := delegateArgs(caseID, amount, key, wait)
	args["agent"] = "fraud-http"
	return args
}

// Each crash point of a delegation to an HTTP agent: after the restart the
// host's retry (same idempotency key, or task_get) gets the true final
// state, every transition happened once, and the agent got exactly one
// SendMessage with the brief (and one with the answer).
func TestKillWithHTTPAgentLosesNothing(t *testing.T) {
	cases := []struct {
		point  string // a failpoint, or "while-working" for kill -9 while the agent works
		caseID string
		amount int
	}{
		{"delegate-after-create", "C-201", 1999},
		{"delegate-after-send", "C-202", 1999},
		{"while-working", "C-203", 1999},
		{"respond-after-resume", "C-204", 125000},
		{"event-completed-before-apply", "C-205", 1999},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			t.Parallel() // most of each case is waiting out a lease or the reconciliation grace
			agent, agentURL := httpAgentOn(t, map[string]string{"C-203": refagent.ModeSlow})
			var env []string
			if c.point != "while-working" {
				env = []string{failpoint.Env + "=" + c.point}
			}
			d, flags := startWithHTTPAgent(t, agentURL, env)
			h := connectHost(t, d)
			key := "retry-" + c.caseID
			args := httpDelegate(c.caseID, c.amount, key, 10)
			if c.point == "while-working" {
				args["wait_seconds"] = 1
			}
			first, err := h.delegateWhenAgentKnown(args)
			id := ""
			switch c.point {
			case "while-working":
				if err != nil || first.State != "working" {
					t.Fatalf("delegate: %v %+v, want working", err, first)
				}
				id = first.TaskID
				d.kill(t)
			case "respond-after-resume":
				if err != nil || first.State != "input-required" {
					t.Fatalf("delegate: %v %+v", err, first)
				}
				id = first.TaskID
				if _, err := h.call("task_respond", map[string]any{"task_id": id, "answer": "yes", "wait_seconds": 10}); err == nil {
					t.Fatal("task_respond returned although a2ad was to die")
				}
				d.waitExit(t)
			default:
				if err == nil {
					t.Fatalf("delegate returned although a2ad was to die: %+v", first)
				}
				d.waitExit(t)
			}
			if c.point != "while-working" && !strings.Contains(d.log.String(), "failpoint "+c.point+" reached") {
				t.Fatalf("a2ad died elsewhere:\n%s", tail(d.log.String(), 20))
			}

			d2 := startDaemon(t, nil, flags...)
			h2 := connectHost(t, d2)
			if id == "" {
				id = h2.mustCall("delegate", args).TaskID // the host never got an answer: it retries with its key
			}
			got := h2.waitFinal(id, 120*time.Second) // a brief whose send is in doubt waits out ReconcileGrace (36 s)
			checkHTTPCompleted(t, got, settledRecord(t, d2, id), c.caseID, c.amount > 50000)
			st := agent.Stats()
			if st.ByA2ADTask[id] != 1 || st.Briefs != 1 {
				t.Errorf("the agent got %d SendMessage with the brief of %s (%d in all), want exactly 1", st.ByA2ADTask[id], id, st.Briefs)
			}
			if c.amount > 50000 && st.Answers != 1 {
				t.Errorf("the agent got %d answers, want exactly 1", st.Answers)
			}
			if again := h2.mustCall("delegate", args); again.TaskID != id || again.State != "completed" {
				t.Errorf("repeated delegate = %s %s, want %s completed", again.TaskID, again.State, id)
			}
			if n := agent.Stats().Briefs; n != 1 {
				t.Errorf("after the repeat the agent has %d briefs, want 1", n)
			}
		})
	}
}
