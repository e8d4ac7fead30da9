package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/refagent"
)

// retentionMetric is the value of d's Prometheus series name (no labels); -1 when
// absent.
func retentionMetric(t *testing.T, d *daemonProc, name string) float64 {
	t.Helper()
	line := metricLine(t, d, name)
	if line == "" {
		return -1
	}
	f, err := strconv.ParseFloat(strings.TrimPrefix(line, name+" "), 64)
	if err != nil {
		t.Fatalf("%s: %q", name, line)
	}
	return f
}

// As an operator runs it: `a2ad serve` with retention.ended_tasks in its
// configuration file, killed and started again once the retention passed
// while it was down. The restarted instance removes the ended task it
// loaded, keeps the open one that is older than the retention, counts the
// removal in /metrics, and a host finds the ended task gone and its
// idempotency key expired.
func TestRetentionRemovesEndedTasksAcrossARestart(t *testing.T) {
	const keep = 3 * time.Second
	flags := []string{"--config", configFile(t, "retention:\n  ended_tasks: 3s\n"), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"}
	d := startDaemon(t, nil, append(flags, "--nats-listen", "127.0.0.1:-1")...)
	flags = append(flags, "--nats-listen", strings.TrimPrefix(d.NATS, "nats://"))
	agent := agentOn(t, d.NATS, credentialFor(t, d.NATS, d.DataDir), map[string]string{"C-201": refagent.ModeSilent})
	h := connectHost(t, d)
	if got := retentionMetric(t, d, "a2ad_task_retention_seconds"); got != keep.Seconds() {
		t.Fatalf("a2ad_task_retention_seconds = %v; want %v", got, keep.Seconds())
	}
	ended, err := h.delegateWhenAgentKnown(delegateArgs("C-200", 1999, "key-C-200", 10))
	if err != nil || ended.State != "completed" {
		t.Fatalf("delegate C-200: %v %+v; want completed", err, ended)
	}
	open := h.mustCall("delegate", delegateArgs("C-201", 1999, "", 0)) // the agent never answers: open for its 120 s budget
	if terminalState(open.State) {
		t.Fatalf("delegate C-201: %+v; want it open", open)
	}
	d.kill(t)
	time.Sleep(keep + time.Second) // the retention passes while no a2ad runs
	d2 := startDaemon(t, nil, flags...)
	h2 := connectHost(t, d2)
	waitUntil(t, "the restarted instance to remove the ended task", func() bool { return retentionMetric(t, d2, "a2ad_tasks_removed_total") == 1 })
	if out := h2.retentionCallErr("task_get", map[string]any{"task_id": ended.TaskID}); out != "task_not_found: task not found: no task of that id is visible to this principal (never delegated, another tenant's, or removed after its retention)" {
		t.Fatalf("task_get of the removed task = %q; want task_not_found", out)
	}
	if got := h2.mustCall("task_get", map[string]any{"task_id": open.TaskID}); got.State != open.State {
		t.Fatalf("task_get of the open task older than the retention: %+v; want it %s", got, open.State)
	}
	briefs := agent.Stats().BriefsReceived
	if out := h2.retentionCallErr("delegate", delegateArgs("C-200", 1999, "key-C-200", 10)); !strings.HasPrefix(out, "idempotency_key_expired: ") {
		t.Fatalf("delegate with the removed task's key = %q; want idempotency_key_expired", out)
	}
	if n := agent.Stats().BriefsReceived; n != briefs {
		t.Fatalf("the agent received %d briefs for the expired key; want none", n-briefs)
	}
	if got := retentionMetric(t, d2, "a2ad_tasks_ended"); got != 0 {
		t.Fatalf("a2ad_tasks_ended = %v after the removal; want 0", got)
	}
}

// retentionCallErr runs a tool that must fail; it returns the error text.
func (h *host) retentionCallErr(tool string, args map[string]any) string {
	h.t.Helper()
	out, err := h.call(tool, args)
	if err != nil {
		h.t.Fatalf("%s: %v", tool, err)
	}
	if out.ErrText == "" {
		h.t.Fatalf("%s: %+v; want an error", tool, out)
	}
	return out.ErrText
}
