package httpbind

import (
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/task"
)

func briefRecord(id string) (*task.Record, task.Outbound) {
	r := &task.Record{ID: id, AgentID: "fraud", ContextID: broker.HTTPContextID(id), Binding: "JSONRPC"}
	return r, task.Outbound{Method: a2a.MethodSendMessage, MessageID: task.BriefMessageID(id), Reconcile: true}
}

// A brief whose reply was lost: the agent has its task (found by a2ad's
// contextId) → Received with that task; a brief never sent → Absent; the
// recorded agent task id → Received by GetTask.
func TestReconcileBrief(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			a := startAgent(t, bnd, agentOpts{})
			b := bindingFor(t, a, Config{Agents: bearerAuth(t, "a2ad-1")})
			res, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
			if err != nil {
				t.Fatal(err)
			}
			sent := mustTaskReply(t, res) // the reply a2ad "lost"

			r, o := briefRecord("T1")
			r.TraceParent = traceparent
			got, err := b.Reconcile(t.Context(), r, o)
			if err != nil {
				t.Fatal(err)
			}
			if reqs := a.requests(); reqs[len(reqs)-1].RPC != "ListTasks" || reqs[len(reqs)-1].Header.Get("traceparent") != traceparent {
				t.Errorf("reconciliation's request %+v, want ListTasks with the task's traceparent", reqs[len(reqs)-1])
			}
			if got.Verdict != broker.Received {
				t.Fatalf("verdict = %v (%s), want Received", got.Verdict, got.Reason)
			}
			if at := mustTaskReply(t, got.Result); at.ID != sent.ID || at.ContextID != "a2ad-T1" {
				t.Errorf("Received task %s in %s, want %s in a2ad-T1", at.ID, at.ContextID, sent.ID)
			}

			r.AgentTaskID = sent.ID
			got, err = b.Reconcile(t.Context(), r, o)
			if err != nil || got.Verdict != broker.Received || mustTaskReply(t, got.Result).ID != sent.ID {
				t.Fatalf("with the agent task id: %+v %v, want Received %s", got, err, sent.ID)
			}

			r2, o2 := briefRecord("T2")
			got, err = b.Reconcile(t.Context(), r2, o2)
			if err != nil || got.Verdict != broker.Absent {
				t.Fatalf("never sent: %+v %v, want Absent", got, err)
			}
			if n := a.count("SendMessage"); n != 1 {
				t.Errorf("agent got %d SendMessage, want 1 (reconciling sends nothing)", n)
			}
		})
	}
}

// An agent without ListTasks: a2ad cannot tell, and says so in its words.
func TestReconcileWithoutListTasksIsUndecidable(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			a := startAgent(t, bnd, agentOpts{noListTasks: true})
			b := bindingFor(t, a, Config{Agents: bearerAuth(t, "a2ad-1")})
			r, o := briefRecord("T1")
			got, err := b.Reconcile(t.Context(), r, o)
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != broker.Undecidable || got.Reason != ReasonNoListTasks {
				t.Fatalf("got %+v, want Undecidable %q", got, ReasonNoListTasks)
			}
		})
	}
}

// a2a-go's agents list tasks only to an authenticated caller: without
// auth configured, a2ad cannot tell either.
func TestReconcileListRefusedIsUndecidable(t *testing.T) {
	a := startAgent(t, "JSONRPC", agentOpts{})
	b := bindingFor(t, a, Config{})
	r, o := briefRecord("T1")
	got, err := b.Reconcile(t.Context(), r, o)
	if err != nil {
		t.Fatal(err)
	}
	if got.Verdict != broker.Undecidable || got.Reason != ReasonListRefused {
		t.Fatalf("got %+v, want Undecidable %q", got, ReasonListRefused)
	}
}

// An answer to the agent's question: not there while the task waits →
// Absent; there after it was sent → Received; the task gone elsewhere
// (canceled) → Received (resending cannot help).
func TestReconcileAnswer(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			a := startAgent(t, bnd, agentOpts{})
			b := bindingFor(t, a, Config{})
			id := briefAndWait(t, b, "T1", sdk.TaskStateInputRequired)
			r := &task.Record{ID: "T1", AgentID: "fraud", ContextID: "a2ad-T1", AgentTaskID: id}
			o := task.Outbound{Method: a2a.MethodSendMessage, MessageID: "T1-m2", Reconcile: true}
			got, err := b.Reconcile(t.Context(), r, o)
			if err != nil || got.Verdict != broker.Absent {
				t.Fatalf("before the answer: %+v %v, want Absent", got, err)
			}
			sendAnswer(t, b, "T1", id)
			got, err = b.Reconcile(t.Context(), r, o)
			if err != nil || got.Verdict != broker.Received {
				t.Fatalf("after the answer: %+v %v, want Received", got, err)
			}
			if at := mustTaskReply(t, got.Result); at.ID != id {
				t.Errorf("Received task %s, want %s", at.ID, id)
			}

			hold := make(chan struct{})
			defer close(hold)
			b3 := bindingFor(t, startAgent(t, bnd, agentOpts{hold: hold}), Config{})
			id3 := briefAndWait(t, b3, "T3", sdk.TaskStateSubmitted)
			if _, err := b3.Send(t.Context(), "fraud", a2a.MethodCancelTask, mustJSON(t, a2a.CancelTaskRequest{ID: id3}), ""); err != nil {
				t.Fatal(err)
			}
			r3 := &task.Record{ID: "T3", AgentID: "fraud", ContextID: "a2ad-T3", AgentTaskID: id3}
			got, err = b3.Reconcile(t.Context(), r3, task.Outbound{Method: a2a.MethodSendMessage, MessageID: "T3-m2"})
			if err != nil || got.Verdict != broker.Received {
				t.Fatalf("task moved on: %+v %v, want Received", got, err)
			}
			if st := mustTaskReply(t, got.Result).Status.State; st != a2a.TaskStateCanceled {
				t.Errorf("state = %s, want %s", st, a2a.TaskStateCanceled)
			}
		})
	}
}
