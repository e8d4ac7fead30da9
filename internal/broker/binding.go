package broker

import (
	"context"
	"encoding/json"

	"github.com/a2ad/a2ad/task"
)

// Binding is how the broker reaches an agent (DESIGN.md, "Bindings to
// agents"): a2ad's NATS binding (natsbind, docs/nats-binding.md) or a
// standard A2A 1.0 HTTP binding (httpbind, docs/http-binding.md). Only
// delivery differs: everything the agent reports comes back as events on
// its JetStream events stream, whatever the binding, and the tracker,
// FSM, artifact validation, deadlines and audit do not know which one
// served a task.
type Binding interface {
	// Send sends one A2A 1.0 request to the agent — method SendMessage,
	// GetTask or CancelTask; params the method's JSON-RPC params (A2A 1.0
	// §9) — and returns its result as JSON (for SendMessage a
	// SendMessageResponse: {"task":…} or {"message":…}). traceparent (W3C
	// Trace Context, or "") goes with the request.
	//
	// Errors classify the outcome: wrapping a2a.ErrAgentUnreachable when
	// the request provably never reached the agent; *a2a.RPCError when the
	// agent answered with an A2A error (it took nothing); wrapping
	// a2a.ErrDecode when its answer is not valid A2A 1.0 (it may have
	// taken the request); anything else leaves the outcome unknown.
	Send(ctx context.Context, agentID, method string, params json.RawMessage, traceparent string) (json.RawMessage, error)
}

// Router is implemented by a Binding that can address one replica of an
// agent (natsbind.Client; docs/nats-binding.md §5.8): a task's later
// requests go to the replica that holds it. A Binding without it gets
// every request through Send.
type Router interface {
	// SendTo is Send to replica (one NATS token, or "" for any replica):
	// when replica is gone, the request goes to any replica at once. It
	// also returns the replica the reply names (its A2ad-Replica header,
	// "" when absent); badReplica reports a header whose value is not a
	// valid token, which is dropped. Errors are Send's.
	SendTo(ctx context.Context, agentID, replica, method string, params json.RawMessage, traceparent string) (res json.RawMessage, replyReplica string, badReplica bool, err error)
}

// Reconciler is implemented by a Binding whose agents do not deduplicate
// messageId (standard A2A agents over HTTP): before a SendMessage whose
// earlier attempt has an unknown outcome is sent again, the broker asks the
// binding what the agent holds, and sends only when it provably has
// nothing (docs/http-binding.md §5).
type Reconciler interface {
	// Reconcile reports whether the agent holds message o of task r (a
	// brief, o.MessageID = task.BriefMessageID(r.ID), or an answer to an
	// input-required question). An error means the agent could not be
	// asked now (it is retried later like a delivery).
	Reconcile(ctx context.Context, r *task.Record, o task.Outbound) (Reconciled, error)
}

// Verdict is what a reconciliation found.
type Verdict int

const (
	// Absent: the agent provably has no such message; it may be sent.
	Absent Verdict = iota
	// Received: the agent has it; Reconciled.Result is the agent's task
	// as a SendMessage result ({"task":…}), as if the reply had come.
	Received
	// Undecidable: a2ad cannot tell (the agent has no ListTasks, say);
	// the task ends failed with task.ReasonDeliveryUnknown.
	Undecidable
)

// Reconciled is a reconciliation's outcome.
type Reconciled struct {
	Verdict Verdict
	Result  json.RawMessage
	// Reason says, in a2ad's words (never the agent's), why the outcome
	// is Undecidable; it follows "delivery_unknown: " in the task's reason.
	Reason string
}

// binding returns the binding of task r: Bindings[r.Binding] ("" is
// a2ad's NATS binding).
func (s *Service) binding(r *task.Record) (Binding, bool) {
	b, ok := s.Bindings[r.Binding]
	return b, ok && b != nil
}
