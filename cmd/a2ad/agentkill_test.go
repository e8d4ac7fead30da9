package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
)

// eventTap records every event published on the NATS binding's events
// subjects (docs/nats-binding.md §6), retries included, as the agent sent
// them: the Nats-Msg-Id of each publish and its body.
type eventTap struct {
	mu     sync.Mutex
	bodies map[string][]string // Nats-Msg-Id → the body of each publish with it
}

func tapEvents(t *testing.T, nc *nats.Conn, agentID string) *eventTap {
	t.Helper()
	tap := &eventTap{bodies: map[string][]string{}}
	sub, err := nc.Subscribe("a2a.events."+agentID+".>", func(m *nats.Msg) {
		tap.mu.Lock()
		defer tap.mu.Unlock()
		id := m.Header.Get(nats.MsgIdHdr)
		tap.bodies[id] = append(tap.bodies[id], string(m.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return tap
}

// check asserts that the events of a2ad task taskID carried the ids
// taskID.1 … taskID.n, no gaps and no other, and that every publish of one
// id (a retry) carried the same event: no seq was given to two events.
func (tap *eventTap) check(t *testing.T, taskID string, n int) {
	t.Helper()
	tap.mu.Lock()
	defer tap.mu.Unlock()
	var got, want []string
	for id, bodies := range tap.bodies {
		if !strings.HasPrefix(id, taskID+".") {
			continue
		}
		got = append(got, id)
		for _, b := range bodies[1:] {
			if b != bodies[0] {
				t.Errorf("Nats-Msg-Id %s carried two different events:\n%s\n%s", id, bodies[0], b)
			}
		}
	}
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("%s.%d", taskID, i))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("events of task %s carried Nats-Msg-Id %q, want %q", taskID, got, want)
	}
}

// waitState polls the admin record of task id until its state is want.
func waitState(t *testing.T, d *daemonProc, id, want string) adminRecord {
	t.Helper()
	until := time.Now().Add(20 * time.Second)
	for {
		r := getRecord(t, d, id)
		if r.State == want {
			return r
		}
		if time.Now().After(until) {
			t.Fatalf("task %s is %s (%s), want %s", id, r.State, r.Reason, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agentHistory lists the transitions of r the agent's events made, in
// order, as "from>to", refused ones marked "refused:".
func agentHistory(r adminRecord) string {
	var out []string
	for _, h := range r.History {
		if h.Source != "agent" {
			continue
		}
		e := h.From + ">" + h.To
		if h.Refused {
			e = "refused:" + e
		}
		out = append(out, e)
	}
	return strings.Join(out, " ")
}

// SIGKILL of the reference agent process (cmd/fraud-review-agent) in the
// middle of two tasks: one waiting for the host's answer to its question,
// one working slowly. The events it published before it died were
// acknowledged by JetStream and are applied exactly once (each transition
// once in the task's history, each Nats-Msg-Id <taskId>.<seq> used for one
// event only, seq from 1 without gaps). The agent keeps no task across a
// crash, so each of the two tasks ends as docs/durability.md says a task
// its agent no longer works on ends: the slow one at its deadline
// (canceled, deadline_exceeded, by the daemon), the one with a question by
// the host's task_cancel (canceled, canceled_by_host); the CancelTask each
// owes reaches the agent started again, which answers that it does not
// know the task (-32001), and the outbox empties. A new task to the
// restarted agent completes.
func TestAgentKilledMidTask(t *testing.T) {
	srv, nc, _ := natstest.Start(t)
	tap := tapEvents(t, nc, "fraud-review")
	d := startDaemon(t, nil, external(t, srv.ClientURL())...)
	credFile := filepath.Join(t.TempDir(), "cred")
	if err := os.WriteFile(credFile, []byte(credentialFor(t, srv.ClientURL(), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := runAgent(t, "--nats-url", srv.ClientURL(), "--credential-file", credFile, "--misbehave", "slow:C-402")
	h := connectHost(t, d)

	// A: above manual_review_above_cents the agent asks a question first.
	asks, err := h.delegateWhenAgentKnown(delegateArgs("C-401", 90000, "", 0))
	if err != nil || asks.ErrText != "" {
		t.Fatalf("delegate C-401: %v %s", err, asks.ErrText)
	}
	waitState(t, d, asks.TaskID, "input-required")
	// B: slow (3 s before it completes), with a deadline it cannot outlive.
	slowArgs := delegateArgs("C-402", 1999, "", 0)
	slowArgs["budget"] = map[string]any{"deadline_seconds": 8}
	slow := h.mustCall("delegate", slowArgs)
	waitState(t, d, slow.TaskID, "working") // its WORKING event was acknowledged and applied

	agent.kill()
	agent.start()

	// The events published before the crash, applied once each.
	const askedHistory = "submitted>working working>input-required"
	rec := getRecord(t, d, asks.TaskID)
	if got := agentHistory(rec); got != askedHistory {
		t.Errorf("C-401 agent transitions %q, want %q", got, askedHistory)
	}
	tap.check(t, asks.TaskID, 2)

	// A new task to the restarted agent completes.
	fresh, err := h.delegateWhenAgentKnown(delegateArgs("C-403", 1999, "", 20))
	if err != nil || fresh.ErrText != "" {
		t.Fatalf("delegate C-403: %v %s", err, fresh.ErrText)
	}
	checkCompleted(t, h.waitFinal(fresh.TaskID, 30*time.Second), settledRecord(t, d, fresh.TaskID), "C-403", smallCaseHistory)

	// B ends at its deadline: the agent that worked on it is gone.
	got := h.waitFinal(slow.TaskID, 30*time.Second)
	if got.State != "canceled" || got.Reason != "deadline_exceeded" {
		t.Errorf("C-402: state %s reason %q, want canceled deadline_exceeded", got.State, got.Reason)
	}
	rec = settledRecord(t, d, slow.TaskID)
	if ev, want := strings.Join(rec.events(), " "), ">submitted submitted>working working>canceled"; ev != want {
		t.Errorf("C-402 history %q, want %q", ev, want)
	}
	if last := rec.History[len(rec.History)-1]; last.Source != "daemon" {
		t.Errorf("C-402 last transition %+v, want the daemon's", last)
	}
	if got := agentHistory(rec); got != "submitted>working" {
		t.Errorf("C-402 agent transitions %q, want %q", got, "submitted>working")
	}
	if rec.Outbox != nil {
		t.Errorf("C-402 outbox still holds %v", rec.Outbox)
	}
	tap.check(t, slow.TaskID, 1)

	// A is canceled by the host.
	if c := h.mustCall("task_cancel", map[string]any{"task_id": asks.TaskID}); c.State != "canceled" || c.Reason != "canceled_by_host" {
		t.Errorf("task_cancel C-401: state %s reason %q, want canceled canceled_by_host", c.State, c.Reason)
	}
	rec = settledRecord(t, d, asks.TaskID)
	if ev, want := strings.Join(rec.events(), " "), ">submitted "+askedHistory+" input-required>canceled"; ev != want {
		t.Errorf("C-401 history %q, want %q", ev, want)
	}
	if rec.Outbox != nil {
		t.Errorf("C-401 outbox still holds %v", rec.Outbox)
	}
	tap.check(t, asks.TaskID, 2)
	tap.check(t, fresh.TaskID, 3) // working, the artifact, completed
}

// SIGTERM drains the reference agent (natsagent.Server.Shutdown): a task
// that finishes within --shutdown-timeout completes; one still running when
// it ends is published TASK_STATE_FAILED, so a2ad ends it at once instead
// of at its deadline, with the agent's words as its status message.
func TestAgentStoppedMidTaskDrains(t *testing.T) {
	srv, nc, _ := natstest.Start(t)
	tap := tapEvents(t, nc, "fraud-review")
	d := startDaemon(t, nil, external(t, srv.ClientURL())...)
	credFile := filepath.Join(t.TempDir(), "cred")
	if err := os.WriteFile(credFile, []byte(credentialFor(t, srv.ClientURL(), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, slowFor, want string
	}{
		{"finishes within the timeout", "1s", "completed"},
		{"outlives the timeout", "60s", "failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			agent := runAgent(t, "--nats-url", srv.ClientURL(), "--credential-file", credFile,
				"--misbehave", "slow:C-410", "--slow-for", c.slowFor, "--shutdown-timeout", "3s")
			h := connectHost(t, d)
			args := delegateArgs("C-410", 1999, "", 0)
			args["budget"] = map[string]any{"deadline_seconds": 120}
			var got toolResult
			until := time.Now().Add(15 * time.Second)
			for { // until a2ad has seen this process (the previous one is gone)
				var err error
				if got, err = h.delegateWhenAgentKnown(args); err != nil {
					t.Fatal(err)
				}
				if got.ErrText == "" || !strings.Contains(got.ErrText, "offline") || time.Now().After(until) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if got.ErrText != "" {
				t.Fatalf("delegate: %s", got.ErrText)
			}
			waitState(t, d, got.TaskID, "working")
			start := time.Now()
			if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-agent.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the agent did not exit after SIGTERM")
			}
			final := h.waitFinal(got.TaskID, 30*time.Second)
			t.Logf("%s: exited and the task ended %s after SIGTERM", c.name, time.Since(start).Round(time.Millisecond))
			if final.State != c.want {
				t.Fatalf("state %s reason %q, want %s", final.State, final.Reason, c.want)
			}
			rec := settledRecord(t, d, got.TaskID)
			if c.want == "failed" {
				if ev, want := strings.Join(rec.events(), " "), ">submitted submitted>working working>failed"; ev != want {
					t.Errorf("history %q, want %q", ev, want)
				}
				if !strings.Contains(rec.StatusMessage, "shut down before the task finished") {
					t.Errorf("status message %q", rec.StatusMessage)
				}
				tap.check(t, got.TaskID, 2) // working, failed
			} else {
				tap.check(t, got.TaskID, 3) // working, the artifact, completed
			}
		})
	}
}
