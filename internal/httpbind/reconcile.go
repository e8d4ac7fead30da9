package httpbind

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/task"
)

// maxListPages bounds how many ListTasks pages a reconciliation reads.
const maxListPages = 10

// Reasons of an Undecidable reconciliation, in a2ad's words (they follow
// "delivery_unknown: " in the task's reason).
const (
	ReasonNoListTasks   = "the agent offers no ListTasks, so a2ad cannot tell whether the brief arrived; it is not sent twice"
	ReasonNoContextID   = "the task has no contextId a2ad chose, so a2ad cannot look the brief up at the agent; it is not sent twice"
	ReasonNoAgentTaskID = "the agent's task id was never recorded, so a2ad cannot tell whether the answer arrived; it is not sent twice"
	ReasonListRefused   = "the agent does not let a2ad list its tasks (it answered unauthenticated or permission denied), so a2ad cannot tell whether the brief arrived; it is not sent twice"
	ReasonTaskGone      = "the agent no longer knows its task, so a2ad cannot tell whether the message arrived; it is not sent twice"
)

// Reconcile reports whether agent r.AgentID holds message o of task r
// (broker.Reconciler; docs/http-binding.md §5). Standard agents do not
// deduplicate messageId, so a SendMessage whose outcome is unknown is
// sent again only when this says Absent.
//
// The brief (o.MessageID = task.BriefMessageID(r.ID)): with the agent's
// task id recorded, GetTask → Received. Without it, ListTasks{contextId:
// r.ContextID} (a2ad chose that contextId, broker.HTTPContextID, and the
// brief carries it): a task of that context → Received with it; none →
// Absent; no ListTasks at the agent (UnsupportedOperation, method not
// found, HTTP 404/405/501) → Undecidable ([ReasonNoListTasks]); ListTasks
// refused as unauthenticated or not permitted (a2a-go's agents list tasks
// only to an authenticated caller: configure [Auth]) → Undecidable
// ([ReasonListRefused]).
//
// An answer to the agent's question: GetTask(r.AgentTaskID) with its
// history → o.MessageID in the history → Received; the task still
// input-required (or auth-required) without it → Absent; the task moved
// on to any other state → Received (it waits for no answer, so sending it
// again cannot help).
//
// An agent that cannot be asked now (unreachable, timeout, auth failure,
// an undecodable answer) is an error: the broker tries again later.
//
// The race with an earlier attempt still in flight at the agent: the
// broker reconciles only after that attempt's claim lease (6 s) has run
// out, and that attempt's own call was bounded by its 5 s timeout, after
// which a2ad closed the request's connection. An agent has therefore had
// more than 6 s from receiving the request to recording its task, and a
// Go, Python or JS A2A server (a2a-go's a2asrv among them) records the
// task before it answers a returnImmediately SendMessage, in
// milliseconds. What remains is an agent that received the brief, then
// stalled for longer than that before storing its task, and ignored the
// closed connection: ListTasks finds nothing, and the brief is sent a
// second time. a2ad cannot close that window from outside the agent.
//
// ListTasks answers for the caller: a2a-go's task store lists only the
// tasks of the authenticated user who created them. A credential that
// names another principal than the one the brief was sent with (a
// rotated token of a different user, another OAuth 2.0 client id) makes
// the agent's task invisible, and the verdict Absent; rotate credentials
// of the same principal.
func (b *Binding) Reconcile(ctx context.Context, r *task.Record, o task.Outbound) (broker.Reconciled, error) {
	c, t, err := b.Client(ctx, r.AgentID)
	if err != nil {
		return broker.Reconciled{}, notSent(r.AgentID, err)
	}
	brief := o.MessageID == task.BriefMessageID(r.ID)
	if brief && r.AgentTaskID == "" {
		if r.ContextID == "" {
			return broker.Reconciled{Verdict: broker.Undecidable, Reason: ReasonNoContextID}, nil
		}
		return b.reconcileByContext(ctx, r, t)
	}
	if r.AgentTaskID == "" {
		return broker.Reconciled{Verdict: broker.Undecidable, Reason: ReasonNoAgentTaskID}, nil
	}
	cctx, ci := withCall(ctx, r.TraceParent)
	at, err := c.GetTask(cctx, &sdk.GetTaskRequest{ID: sdk.TaskID(r.AgentTaskID), Tenant: t.Tenant})
	if err != nil {
		err = classify(r.AgentID, a2a.MethodGetTask, ci, err)
		if a2a.IsCode(err, a2a.CodeTaskNotFound) {
			return broker.Reconciled{Verdict: broker.Undecidable, Reason: ReasonTaskGone}, nil
		}
		return broker.Reconciled{}, err
	}
	if !brief {
		held := false
		for _, m := range at.History {
			if m != nil && m.ID == o.MessageID {
				held = true
				break
			}
		}
		if st := at.Status.State; !held && (st == sdk.TaskStateInputRequired || st == sdk.TaskStateAuthRequired) {
			return broker.Reconciled{Verdict: broker.Absent}, nil
		}
	}
	return received(r.AgentID, at)
}

// reconcileByContext looks the brief of r up by its contextId.
func (b *Binding) reconcileByContext(ctx context.Context, r *task.Record, t Target) (broker.Reconciled, error) {
	c, _, err := b.Client(ctx, r.AgentID)
	if err != nil {
		return broker.Reconciled{}, notSent(r.AgentID, err)
	}
	token := ""
	for range maxListPages {
		cctx, ci := withCall(ctx, r.TraceParent)
		list, err := c.ListTasks(cctx, &sdk.ListTasksRequest{Tenant: t.Tenant, ContextID: r.ContextID, PageToken: token})
		if err != nil {
			_, status, _ := ci.snapshot()
			cerr := classify(r.AgentID, "ListTasks", ci, err)
			switch {
			case status == http.StatusNotFound, status == http.StatusMethodNotAllowed, status == http.StatusNotImplemented,
				a2a.IsCode(cerr, a2a.CodeUnsupportedOperation), a2a.IsCode(cerr, a2a.CodeMethodNotFound):
				return broker.Reconciled{Verdict: broker.Undecidable, Reason: ReasonNoListTasks}, nil
			case a2a.IsCode(cerr, CodeUnauthenticated), a2a.IsCode(cerr, CodeUnauthorized):
				// a2a-go's task store lists tasks only to an
				// authenticated caller, and only its own.
				return broker.Reconciled{Verdict: broker.Undecidable, Reason: ReasonListRefused}, nil
			}
			return broker.Reconciled{}, cerr
		}
		for _, at := range list.Tasks {
			// The agent's filter is not trusted: the context must be a2ad's.
			if at != nil && at.ContextID == r.ContextID {
				return received(r.AgentID, at)
			}
		}
		if list.NextPageToken == "" || list.NextPageToken == token {
			return broker.Reconciled{Verdict: broker.Absent}, nil
		}
		token = list.NextPageToken
	}
	return broker.Reconciled{}, fmt.Errorf("agent %s: ListTasks has more than %d pages for one context: %w", r.AgentID, maxListPages, a2a.ErrDecode)
}

// received is the Received verdict with the agent's task as a SendMessage
// result ({"task":…}) that a2a.DecodeSendMessageResponse accepts.
func received(agentID string, at *sdk.Task) (broker.Reconciled, error) {
	res, err := encodeResult(agentID, a2a.MethodSendMessage, sdk.StreamResponse{Event: at})
	if err != nil {
		return broker.Reconciled{}, err
	}
	return broker.Reconciled{Verdict: broker.Received, Result: json.RawMessage(res)}, nil
}

var (
	_ broker.Binding    = (*Binding)(nil)
	_ broker.Reconciler = (*Binding)(nil)
)
