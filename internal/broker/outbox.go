package broker

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/failpoint"
	"github.com/a2ad/a2ad/internal/liveness"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
)

// Delivery timing. A delivery holds a lease of Lease on the task's outbox:
// no other instance starts one before it ends. After a failed attempt the
// next waits Backoff(attempts): 1 s doubling up to 30 s.
const (
	sendTimeout   = 5 * time.Second
	cancelTimeout = 2 * time.Second
	Lease         = sendTimeout + time.Second
	// httpSendTimeout bounds a SendMessage to a standard agent over HTTP:
	// an a2a-go agent answers even a returnImmediately SendMessage only at
	// its executor's first event, which an agent that does work first (a
	// model call) yields seconds later. httpLease is its claim.
	httpSendTimeout = 30 * time.Second
	httpLease       = httpSendTimeout + time.Second
	// ReconcileGrace is how long after a message last went out a
	// reconciliation that finds nothing is taken for proof that the agent
	// has nothing: before, the agent may still be working on the request
	// (storing its task only at its first event), and the message is not
	// sent again (docs/http-binding.md §5).
	ReconcileGrace = httpLease + 5*time.Second
	// UnansweredPatience is how long after a message's last send a2ad
	// keeps asking an agent that took a send of it without answering, or
	// that cannot be asked, before the task fails delivery_unknown: an
	// agent that stores its task only at a late first event is found in
	// that time; it is never sent the message again.
	UnansweredPatience = 5 * time.Minute
	// MaxCancelAttempts bounds CancelTask deliveries: canceling is best
	// effort toward the agent, the task is canceled already.
	MaxCancelAttempts = 8
	// workers bounds concurrent background deliveries and deadline
	// cancellations per instance; perAgent bounds those of one agent, so
	// that an agent slow to answer (each request waiting out its timeout)
	// holds at most perAgent of them and never delays another agent's
	// redeliveries and deadlines.
	workers  = 64
	perAgent = 4
	// agentBusyPause is how long a task whose agent has perAgent actions
	// running waits before it is looked at again.
	agentBusyPause = 25 * time.Millisecond
)

// Backoff is the pause after the n-th failed delivery attempt.
func Backoff(n int) time.Duration { return min(time.Second<<min(max(n-1, 0), 5), 30*time.Second) }

// outcome of one delivery attempt.
type outcome int

const (
	delivered outcome = iota // the agent answered with a result
	refused                  // the agent answered with a JSON-RPC error: it took nothing
	garbled                  // the agent answered, but not with a valid result: it may have taken it
	offline                  // nobody listens on the agent's subject
	unknown                  // no answer: it may or may not have arrived
)

func classify(err error) outcome {
	var rpcErr *a2a.RPCError
	switch {
	case err == nil:
		return delivered
	case errors.Is(err, a2a.ErrAgentUnreachable):
		return offline
	case errors.As(err, &rpcErr):
		return refused
	case errors.Is(err, a2a.ErrDecode):
		return garbled
	}
	return unknown
}

// deliver sends r's outbox (claimed: its NotBefore is this instance's lease)
// and settles the record with the outcome. first is the synchronous attempt
// of the host's own call: a brief that is refused or finds the agent offline
// then removes the task and returns the error, and an answer that is
// refused returns the error with the task back in input-required. Later
// attempts (redeliveries) never remove a task.
func (s *Service) deliver(ctx context.Context, r *task.Record, first bool) (*task.Record, error) {
	return s.deliverAttempt(ctx, r, first, nil)
}

// firstReplyWait is how long a host's call waits for an HTTP agent's
// reply to the message it sent before it gets the task as it stands
// (submitted, or working after an answer): the send goes on, for up to
// its 30 s, and is settled when it ends.
const firstReplyWait = 5 * time.Second

// deliverFirst is the synchronous attempt of a host's call: deliver with
// first, except that over HTTP the host waits at most firstReplyWait for
// the agent's reply; after that the attempt goes on detached, as a
// redelivery would (a refusal then fails the task rather than remove
// one the host was already given).
func (s *Service) deliverFirst(ctx context.Context, r *task.Record) (*task.Record, error) {
	if !r.HTTP() {
		return s.deliver(ctx, r, true)
	}
	type result struct {
		r   *task.Record
		err error
	}
	done := make(chan result, 1)
	var detached atomic.Bool
	s.background(func() {
		got, err := s.deliverAttempt(context.WithoutCancel(ctx), r, true, &detached)
		done <- result{got, err}
	})
	t := time.NewTimer(firstReplyWait)
	defer t.Stop()
	select {
	case res := <-done:
		return res.r, res.err
	case <-t.C:
	case <-ctx.Done():
	}
	if detached.CompareAndSwap(false, true) {
		return r, nil
	}
	res := <-done // it decided meanwhile: its outcome stands
	return res.r, res.err
}

// deliverAttempt is deliver; detached, if set, turns first off for the
// decisions taken after the send (the host no longer waits).
func (s *Service) deliverAttempt(ctx context.Context, r *task.Record, first bool, detached *atomic.Bool) (*task.Record, error) {
	o := *r.Outbox
	brief := first && o.Method == a2a.MethodSendMessage && o.MessageID == messageID(r, 1)
	var follow *task.Follower
	if brief {
		// Followed from before the send: the agent's first event may be
		// applied before its reply is here.
		follow = s.Tasks.Follow(r.ID)
		defer func() {
			if follow != nil {
				follow.Stop()
			}
		}()
	}
	timeout := sendTimeoutFor(r)
	if o.Method == a2a.MethodCancelTask {
		timeout = cancelTimeout
	}
	b, ok := s.binding(r)
	if !ok {
		return s.failDelivery(ctx, r, o, "the task's binding "+strconv.Quote(r.Binding)+" is not served by this a2ad")
	}
	var res json.RawMessage
	var replica string // the replica the agent's reply names
	var err error
	sent := true
	if rc, ok := b.(Reconciler); ok && o.Method == a2a.MethodSendMessage && (o.Reconcile || o.CancelOnReply) {
		// An earlier attempt's outcome is unknown and this agent does not
		// deduplicate messageId: ask it first, send only if it has nothing.
		// The brief of a task canceled meanwhile is never sent again: it
		// went out only to learn the agent's task id.
		var rec Reconciled
		var rerr error
		if o.Reconcile {
			// Reading the agent's tasks is quick for an agent that works: the
			// NATS send timeout, and never past the deadline.
			cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), callDeadline(r, o, sendTimeout))
			rec, rerr = rc.Reconcile(cctx, r, o)
			cancel()
		}
		switch {
		case rerr != nil && !o.CancelOnReply && time.Since(o.SentAt) >= UnansweredPatience:
			why := "the agent could not be asked whether it has it (" + deliveryFault(rerr) + ") for " + UnansweredPatience.String() + " after it was sent; a2ad does not send it again"
			s.Log.Error("delivery outcome unknown and the agent cannot tell: the task fails rather than run twice",
				"task", r.ID, "agent", r.AgentID, "method", o.Method, "why", why)
			return s.failDelivery(ctx, r, o, why)
		case rerr != nil:
			res, err, sent = nil, rerr, false
		case rec.Verdict == Absent && o.CancelOnReply:
			return s.clearOutbox(ctx, r.ID, o)
		case rec.Verdict == Absent && time.Since(o.SentAt) < ReconcileGrace:
			// Not yet proof: the agent may still be taking the request.
			res, err, sent = nil, errTooSoon, false
		case rec.Verdict == Absent && o.Unanswered && time.Since(o.SentAt) < UnansweredPatience:
			// The agent took a send of it and did not answer: it may still
			// be at work on it (storing its task at a late first event).
			// Asked again, never sent again.
			res, err, sent = nil, errTooSoon, false
		case rec.Verdict == Absent && o.Unanswered && !o.CancelOnReply:
			why := "a send of it reached the agent without a valid answer (a timeout, a reset, an error), and in " + UnansweredPatience.String() + " the agent showed no task for it; a2ad cannot tell whether it is at work on it, so it does not send it again"
			s.Log.Error("delivery outcome unknown and the agent cannot tell: the task fails rather than run twice",
				"task", r.ID, "agent", r.AgentID, "method", o.Method, "why", why)
			return s.failDelivery(ctx, r, o, why)
		case rec.Verdict == Absent:
			// Recorded before the send, so that a crash right after it
			// leaves the next attempt its grace.
			if _, uerr := s.Tasks.Update(context.WithoutCancel(ctx), r.ID, func(cur *task.Record) error {
				if !sameOutbox(cur.Outbox, o) || cur.Outbox.Attempts != o.Attempts {
					return errLeaseLost
				}
				cur.Outbox.SentAt = time.Now().UTC()
				return nil
			}); uerr != nil {
				res, err, sent = nil, uerr, false
			}
		case rec.Verdict == Received:
			res, sent = rec.Result, false
		case rec.Verdict == Undecidable && o.CancelOnReply:
			s.Log.Warn("a canceled task's brief may have reached the agent, which cannot be asked: no CancelTask is sent", "task", r.ID, "agent", r.AgentID, "why", rec.Reason)
			return s.clearOutbox(ctx, r.ID, o)
		case rec.Verdict == Undecidable:
			s.Log.Error("delivery outcome unknown and the agent cannot be asked: the task fails rather than run twice",
				"task", r.ID, "agent", r.AgentID, "method", o.Method, "why", rec.Reason)
			return s.failDelivery(ctx, r, o, rec.Reason)
		}
	}
	if sent {
		res, replica, err = s.send(ctx, b, r, o, timeout, brief)
	}
	if err == nil && o.Method == a2a.MethodSendMessage {
		_, err = decodeTaskReply(res)
	}
	out := classify(err)
	if detached != nil && !detached.CompareAndSwap(false, true) {
		first = false // the host was given the task: nothing may remove it now
	}
	_, reconciles := b.(Reconciler)
	switch {
	case !sent && out != delivered:
		out = unknown // the agent could not be asked, or it is too soon: nothing is known yet
	case reconciles && out == garbled:
		out = unknown // it may have taken it: the next attempt asks before it sends
	}
	if brief {
		failpoint.Hit("delegate-after-send")
	}
	bg := context.WithoutCancel(ctx)
	// Only a reply to a send: a reconciliation's Task (ListTasks leaves the
	// artifacts out) carries no outcome to apply.
	if sent && out == delivered && o.Method == a2a.MethodSendMessage && r.HTTP() && s.OnHTTPReply != nil {
		agentTask := r.AgentTaskID
		s.background(func() {
			pctx, cancel := context.WithTimeout(bg, sendTimeout)
			defer cancel()
			s.OnHTTPReply(pctx, r.ID, r.AgentID, agentTask, res)
		})
	}
	switch {
	case out == delivered && brief:
		// The host need not wait for the outbox to be cleared: until it is,
		// a crash only means a redelivery the agent recognises. The host
		// gets the record as the reply makes it; the store catches up.
		view := r.Clone()
		at, _ := decodeTaskReply(res)
		if at != nil {
			_, _, _ = applyReply(view, o, at, replica, time.Now().UTC())
		}
		if replica != "" && !r.HTTP() {
			// The replica that holds the agent's task is recorded before
			// the host has the task: an answer or cancel the host sends
			// once it has it goes to that replica (docs/nats-binding.md
			// §5.8), not to any replica of the queue group.
			got, err := s.settle(bg, r.ID, o, res, replica)
			if err != nil || got == nil {
				s.Log.Warn("delivered brief not recorded; it will be redelivered", "task", r.ID, "err", err)
				return view, nil
			}
			return got, nil
		}
		f := follow
		follow = nil // the settle stops it
		s.background(func() {
			defer f.Stop()
			// An HTTP agent's events come from a2ad's follower, which
			// starts once the agent's task id is recorded: settle now.
			if !r.HTTP() && s.settledByEvent(f, o, at, replica) {
				return
			}
			if _, err := s.settle(bg, r.ID, o, res, replica); err != nil {
				s.Log.Warn("delivered brief not recorded; it will be redelivered", "task", r.ID, "err", err)
			}
		})
		return view, nil
	case out == delivered:
		return s.settle(bg, r.ID, o, res, replica)
	case first && o.MessageID == messageID(r, 1) && (out == refused || out == offline):
		// Nothing reached the agent, or it refused the brief: no task remains
		// (unless it changed meanwhile, say a host canceled it: then it stays).
		derr := s.Tasks.DeleteIf(bg, r.ID, func(cur *task.Record) bool {
			return cur.State == task.Submitted && sameOutbox(cur.Outbox, o)
		})
		if errors.Is(derr, task.ErrConflict) {
			got, _, gerr := s.Tasks.Get(bg, r.ID)
			return got, gerr
		}
		if derr != nil && !errors.Is(derr, task.ErrNotFound) {
			// The record, and its brief, remain: the host gets the task,
			// which is redelivered like any other, rather than an error
			// that would make it delegate a second time.
			s.Log.Warn("undelivered delegation could not be removed; it stays and is redelivered", "task", r.ID, "err", derr)
			return r, nil
		}
		return nil, err
	case o.Method == a2a.MethodSendMessage && o.MessageID != messageID(r, 1) && out == refused && notWaiting(err):
		// The agent is not waiting for an answer (it went on, or the
		// question was stale): the task stays with the agent's state.
		got, uerr := s.Tasks.Update(bg, r.ID, func(r *task.Record) error {
			if !sameOutbox(r.Outbox, o) {
				return errSkip
			}
			r.Outbox = nil
			return nil
		})
		if _, cerr := orCurrent(got, uerr); cerr != nil {
			s.Log.Warn("refused answer not recorded", "task", r.ID, "err", cerr)
		}
		return nil, fmt.Errorf("%w: the agent is not waiting for an answer: %w", ErrNotInterrupted, err)
	case o.Method == a2a.MethodSendMessage && o.MessageID != messageID(r, 1) && (out == refused || (first && out == offline)):
		// The agent did not take the answer: ask the host again.
		_, _ = s.Tasks.Update(bg, r.ID, func(r *task.Record) error {
			if !sameOutbox(r.Outbox, o) || r.State != task.Working {
				return errSkip
			}
			r.Outbox = nil
			err := r.Move(time.Now().UTC(), task.EventAsk, task.SourceDaemon, "answer not delivered", "")
			r.Question, r.QuestionSchema = o.Question, o.QuestionSchema
			return err
		})
		return nil, err
	case o.Method == a2a.MethodSendMessage && (out == refused || (!first && out == garbled)):
		// A redelivered brief the agent refuses can never run.
		got, uerr := s.Tasks.Update(bg, r.ID, func(r *task.Record) error {
			if !sameOutbox(r.Outbox, o) {
				return errSkip
			}
			r.Outbox = nil
			if r.State.Terminal() {
				return nil // it was sent only to learn the id of a task to cancel
			}
			return r.Move(time.Now().UTC(), task.EventFail, task.SourceDaemon, "delivery_refused: "+deliveryFault(err), "")
		})
		return orCurrent(got, uerr)
	case o.Method == a2a.MethodCancelTask && (out == delivered || out == refused || out == garbled || o.Attempts >= MaxCancelAttempts):
		// An offline agent is retried like a silent one: after a restart of
		// a2ad with its embedded NATS, agents take a moment to reconnect.
		if out != refused && out != delivered {
			s.Log.Info("CancelTask not confirmed by the agent; the task is canceled regardless", "task", r.ID, "agent", r.AgentID, "attempts", o.Attempts, "err", deliveryFault(err))
		}
		got, uerr := s.Tasks.Update(bg, r.ID, func(r *task.Record) error {
			if !sameOutbox(r.Outbox, o) {
				return errSkip
			}
			r.Outbox = nil
			return nil
		})
		return orCurrent(got, uerr)
	}
	// Not known to have arrived, or the agent is away: try again later.
	if ok, held := s.logs.Allow(r.AgentID+"/retry", time.Now()); ok {
		s.Log.Info("delivery to the agent not confirmed; it will be retried", "task", r.ID, "agent", r.AgentID,
			"method", o.Method, "attempt", o.Attempts, "err", deliveryFault(err), "similar_not_logged", held)
	}
	got, uerr := s.Tasks.Update(bg, r.ID, func(r *task.Record) error {
		if !sameOutbox(r.Outbox, o) {
			return errSkip
		}
		r.Outbox.NotBefore = time.Now().UTC().Add(Backoff(o.Attempts))
		r.Outbox.LastError = deliveryFault(err)
		// A reconciliation that could not be made is owed by the next
		// attempt too; an attempt that reached nobody owes none.
		r.Outbox.Unreached = out == offline && !o.Reconcile
		// A send written and not answered may still be at work at the agent.
		r.Outbox.Unanswered = r.Outbox.Unanswered || (sent && out == unknown)
		return nil
	})
	return orCurrent(got, uerr)
}

// offlinePause is the pause between two sends of a brief that found its
// agent offline within [agentcard.UnreachedGrace].
const offlinePause = 100 * time.Millisecond

// send sends outbox o of r through b, and tells the registry what the
// outcome says of the agent's liveness: an answer of any kind makes it
// reachable, an offline outcome (nothing reached it) offline.
//
// waitOffline is the host's own call delivering a brief: when it finds
// the agent offline while this instance does not know it to be (not
// reached since start, or reachable until now), the brief is sent again
// every offlinePause for up to agentcard.UnreachedGrace, within the
// task's deadline and the outbox's lease: an agent connected to an earlier
// run of a2ad (with its embedded NATS) reconnects about a second after a
// restart, and a brief that reached nobody may be sent again. An agent
// known to be offline gets one attempt.
//
// A Router binding sends to the replica that holds r's task
// (r.AgentReplica), and the replica a SendMessage reply names is returned
// (a header that is not a valid token is dropped, counted and logged at
// debug).
func (s *Service) send(ctx context.Context, b Binding, r *task.Record, o task.Outbound, timeout time.Duration, waitOffline bool) (json.RawMessage, string, error) {
	start := time.Now()
	waitOffline = waitOffline && s.Agents != nil && s.Agents.Liveness(r.AgentID).Reachability != agentcard.ReachabilityOffline
	for {
		dl := callDeadline(r, o, timeout)
		if waitOffline && !o.NotBefore.IsZero() {
			// Never past the lease: another instance may redeliver then.
			dl = minTime(dl, o.NotBefore.Add(-offlinePause))
		}
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
		var res json.RawMessage
		var replica string
		var err error
		if rt, ok := b.(Router); ok {
			var bad bool
			res, replica, bad, err = rt.SendTo(cctx, r.AgentID, r.AgentReplica, o.Method, json.RawMessage(o.Params), r.TraceParent)
			if bad {
				s.badReplicas.Add(1)
				s.Log.Debug("the agent's reply names its replica with an invalid token; ignored, its task's requests go to any replica", "task", r.ID, "agent", r.AgentID, "header", natsbind.HeaderReplica)
			}
		} else {
			res, err = b.Send(cctx, r.AgentID, o.Method, json.RawMessage(o.Params), r.TraceParent)
		}
		cancel()
		out := classify(err)
		again := waitOffline && out == offline && ctx.Err() == nil &&
			time.Since(start)+offlinePause < agentcard.UnreachedGrace && time.Until(dl) > sendTimeout/2
		if !again {
			s.observe(r.AgentID, out, err, start)
			if o.Method != a2a.MethodSendMessage {
				replica = "" // only a SendMessage reply names the task's holder
			}
			return res, replica, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(offlinePause):
		}
	}
}

// observe tells the registry what one delivery's outcome says of the
// agent's liveness (first: when the attempts that led to it began).
func (s *Service) observe(agentID string, out outcome, err error, first time.Time) {
	if s.Agents == nil {
		return
	}
	switch out {
	case delivered, refused, garbled:
		s.Agents.Observe(agentID, true, "", time.Now().UTC())
	case offline:
		reason := liveness.Reason(err)
		// The failure began with the first attempt: an agent not reached
		// since start counts as offline once it failed for the grace.
		s.Agents.Observe(agentID, false, reason, first.UTC())
		s.Agents.Observe(agentID, false, reason, time.Now().UTC())
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// clearOutbox removes outbox o from task id (nothing more to deliver).
func (s *Service) clearOutbox(ctx context.Context, id string, o task.Outbound) (*task.Record, error) {
	got, err := s.Tasks.Update(context.WithoutCancel(ctx), id, func(r *task.Record) error {
		if !sameOutbox(r.Outbox, o) {
			return errSkip
		}
		r.Outbox = nil
		return nil
	})
	return orCurrent(got, err)
}

// errTooSoon: a reconciliation found nothing within ReconcileGrace of the
// last send; errLeaseLost: another instance claimed the outbox meanwhile.
var (
	errTooSoon   = errors.New("the agent shows no such task yet; asked again later, not sent again")
	errLeaseLost = errors.New("the outbox was claimed by another attempt")
)

// callDeadline is when a call for outbox o of r given timeout ends: cut at
// the task's deadline for a SendMessage of an open task, so that the
// deadline's cancel never waits behind it.
func callDeadline(r *task.Record, o task.Outbound, timeout time.Duration) time.Time {
	now := time.Now()
	dl := now.Add(timeout)
	if o.Method == a2a.MethodSendMessage && !r.State.Terminal() && r.Deadline.After(now) && r.Deadline.Before(dl) {
		dl = r.Deadline
	}
	return dl
}

// sendTimeoutFor is how long a SendMessage to r's agent may take.
func sendTimeoutFor(r *task.Record) time.Duration {
	if r.HTTP() {
		return httpSendTimeout
	}
	return sendTimeout
}

// leaseFor is the claim of a delivery to r's agent: its timeout and a margin.
func leaseFor(r *task.Record) time.Duration {
	if r.HTTP() {
		return httpLease
	}
	return Lease
}

// failDelivery ends r, whose outbox o cannot be delivered without risking a
// second run, failed with task.ReasonDeliveryUnknown and why, and clears
// the outbox. A task ended meanwhile keeps its end.
func (s *Service) failDelivery(ctx context.Context, r *task.Record, o task.Outbound, why string) (*task.Record, error) {
	got, err := s.Tasks.Update(context.WithoutCancel(ctx), r.ID, func(r *task.Record) error {
		if !sameOutbox(r.Outbox, o) {
			return errSkip
		}
		r.Outbox = nil
		if r.State.Terminal() {
			return nil
		}
		return r.Move(time.Now().UTC(), task.EventFail, task.SourceDaemon, task.ReasonDeliveryUnknown+": "+why, "")
	})
	return orCurrent(got, err)
}

// notWaiting reports the agent's answer to a follow-up message when the
// task is not interrupted (-32004 UnsupportedOperationError, A2A 1.0).
func notWaiting(err error) bool {
	var rpcErr *a2a.RPCError
	return errors.As(err, &rpcErr) && rpcErr.Code == a2a.CodeUnsupportedOperation
}

// orCurrent turns errSkip (nothing to write) into success.
func orCurrent(r *task.Record, err error) (*task.Record, error) {
	if errors.Is(err, errSkip) {
		return r, nil
	}
	return r, err
}

func sameOutbox(cur *task.Outbound, o task.Outbound) bool {
	return cur != nil && cur.Method == o.Method && cur.MessageID == o.MessageID
}

func decodeTaskReply(res []byte) (*a2a.Task, error) {
	resp, err := a2a.DecodeSendMessageResponse(res)
	if err != nil {
		return nil, fmt.Errorf("agent answered SendMessage with an invalid result: %w", err)
	}
	if resp.Task == nil {
		return nil, fmt.Errorf("%w: agent answered SendMessage with a message, not a task", a2a.ErrDecode)
	}
	return resp.Task, nil
}

// briefSettleGrace is how long the settle of a delivered brief waits for
// the agent's first event to do its work: applying the event clears the
// brief from the outbox, learns the agent's ids and moves the task to
// working, which is all the settle would write. Most agents report at once;
// the settle's write is saved, and so is its compare-and-swap race with the
// event's (which costs the loser a read and a backoff). Well inside the
// lease, so a silent agent's task is settled before any redelivery.
const briefSettleGrace = 250 * time.Millisecond

// settledByEvent waits, at most briefSettleGrace, until the task as the
// store's watcher reports it (f) needs nothing of the delivered brief o and
// the agent's reply at: true then, or when the task was removed. False when
// the grace ends, the scheduler stops or the task ended meanwhile (a
// cancel may owe the agent a CancelTask): settle then.
func (s *Service) settledByEvent(f *task.Follower, o task.Outbound, at *a2a.Task, replica string) bool {
	t := time.NewTimer(briefSettleGrace)
	defer t.Stop()
	stopping := s.scheduler().stopping
	for {
		select {
		case <-t.C:
			return false
		case <-stopping:
			return false
		case <-f.C():
		}
		val, rev, deleted := f.LatestBytes()
		switch {
		case deleted:
			return true
		case rev == 0:
			continue
		}
		// Only what applyReply looks at is decoded.
		var cur struct {
			State        task.State     `json:"state"`
			AgentTaskID  string         `json:"agent_task_id"`
			AgentReplica string         `json:"agent_replica"`
			ContextID    string         `json:"context_id"`
			Outbox       *task.Outbound `json:"outbox"`
		}
		if json.Unmarshal(val, &cur) != nil {
			return false
		}
		if !replyChanges(cur.State, cur.AgentTaskID, cur.AgentReplica, cur.ContextID, cur.Outbox, o, at, replica) {
			return true
		}
		if cur.State.Terminal() {
			return false
		}
	}
}

// replyChanges reports whether applyReply would change a record in state,
// with the agent's ids, replica and the outbox given, for the delivered
// outbox o and the agent's reply at naming replica.
func replyChanges(state task.State, agentTaskID, agentReplica, contextID string, outbox *task.Outbound, o task.Outbound, at *a2a.Task, replica string) bool {
	if sameOutbox(outbox, o) || (agentReplica == "" && replica != "" && at != nil) {
		return true
	}
	if at == nil {
		return false
	}
	to, ok := task.FromWire(at.Status.State)
	return (agentTaskID == "" && at.ID != "") || (contextID == "" && at.ContextID != "") ||
		(ok && state == task.Submitted && to == task.Working)
}

// settle records a delivered outbox: it is cleared, and a SendMessage reply
// teaches the agent's ids. The reply is a snapshot that may arrive after
// later events, so it only moves a task that is still submitted. A brief
// that arrived after the task was canceled, before the agent's task id was
// known, gets its CancelTask now.
func (s *Service) settle(ctx context.Context, id string, o task.Outbound, res []byte, replica string) (*task.Record, error) {
	var at *a2a.Task
	if o.Method == a2a.MethodSendMessage {
		at, _ = decodeTaskReply(res)
	}
	var cancelNow bool
	// The record was written by this process moments ago (its create, or
	// the agent's first event if the tracker here applied it): read from
	// memory, the swap guards the write.
	got, err := s.Tasks.Update(task.WithCachedReads(ctx), id, func(r *task.Record) error {
		var changed bool
		var err error
		changed, cancelNow, err = applyReply(r, o, at, replica, time.Now().UTC())
		if err == nil && !changed {
			return errSkip
		}
		return err
	})
	got, err = orCurrent(got, err)
	if err == nil && cancelNow {
		return s.deliver(ctx, got, false)
	}
	return got, err
}

// applyReply applies a delivered outbox o, and the agent's Task from a
// SendMessage reply (at, may be nil) and the replica it names (replica, ""
// for none), to r. It reports whether r changed, and whether r now owes the
// agent a CancelTask (a task canceled before the agent's task id was
// known). The replica is recorded once: the first reply that names one
// names the replica that holds the agent's task (docs/nats-binding.md §5.8).
func applyReply(r *task.Record, o task.Outbound, at *a2a.Task, replica string, now time.Time) (changed, owesCancel bool, err error) {
	if sameOutbox(r.Outbox, o) {
		r.Outbox, changed = nil, true
	}
	if at != nil && r.AgentReplica == "" && replica != "" {
		r.AgentReplica, changed = replica, true
	}
	if at != nil {
		if r.AgentTaskID == "" && at.ID != "" {
			r.AgentTaskID, changed = at.ID, true
			if r.State == task.Canceled && r.Outbox == nil {
				r.Outbox, owesCancel = cancelOutbox(r, now), true
			}
		}
		if r.ContextID == "" && at.ContextID != "" {
			r.ContextID, changed = at.ContextID, true
		}
		if to, ok := task.FromWire(at.Status.State); ok && r.State == task.Submitted && to == task.Working {
			return true, owesCancel, r.Move(now, task.EventStart, task.SourceAgent, "", "")
		}
	}
	if changed {
		r.UpdatedAt = now
	}
	return changed, owesCancel, nil
}

// background runs f on a goroutine that Run waits for before it returns.
func (s *Service) background(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// cancelOutbox is the CancelTask request for r (whose agent task id is known).
func cancelOutbox(r *task.Record, now time.Time) *task.Outbound {
	params, _ := json.Marshal(a2a.CancelTaskRequest{ID: r.AgentTaskID})
	return &task.Outbound{Method: a2a.MethodCancelTask, Params: params, Attempts: 1, NotBefore: now.Add(leaseFor(r)), SentAt: now}
}

// redeliver claims id's outbox if it is due (compare-and-swap: one instance
// wins) and delivers it.
func (s *Service) redeliver(ctx context.Context, id string) {
	now := time.Now().UTC()
	r, err := s.Tasks.Update(ctx, id, func(r *task.Record) error {
		if r.Outbox == nil || now.Before(r.Outbox.NotBefore) {
			return errSkip
		}
		if r.Outbox.Method == a2a.MethodSendMessage && r.State.Terminal() && (!r.Outbox.CancelOnReply || r.Outbox.Attempts > MaxCancelAttempts) {
			r.Outbox = nil // the task ended: nothing to deliver any more
			return nil
		}
		r.Outbox.Attempts++
		r.Outbox.NotBefore = now.Add(leaseFor(r))
		// Unless the last attempt provably reached nobody, its outcome is
		// unknown (a timeout, or its instance died before recording one).
		r.Outbox.Reconcile = r.Outbox.Reconcile || !r.Outbox.Unreached
		r.Outbox.Unreached = false
		if !r.Outbox.Reconcile {
			r.Outbox.SentAt = now // this attempt sends
		}
		return nil
	})
	if err != nil || r.Outbox == nil {
		return
	}
	if ok, held := s.logs.Allow(r.AgentID+"/redeliver", time.Now()); ok {
		s.Log.Info("redelivering to the agent", "task", id, "agent", r.AgentID, "method", r.Outbox.Method, "attempt", r.Outbox.Attempts,
			"reconcile_first", r.Outbox.Reconcile && r.HTTP(), "similar_not_logged", held)
	}
	if _, err := s.deliver(ctx, r, false); err != nil {
		if ok, held := s.logs.Allow(r.AgentID+"/settled", time.Now()); ok {
			s.Log.Warn("redelivery settled with an error", "task", id, "err", deliveryFault(err), "similar_not_logged", held)
		}
	}
}

// act does what is due for task id: cancel it at its deadline, or redeliver
// its outbox. It reports when the task next needs attention (zero: never).
func (s *Service) act(ctx context.Context, id string) time.Time {
	r, _, err := s.Tasks.Get(ctx, id)
	if errors.Is(err, task.ErrNotFound) {
		return time.Time{}
	}
	if err != nil {
		s.Log.Warn("task not readable; retrying", "task", id, "err", err)
		return time.Now().Add(time.Second)
	}
	now := time.Now()
	if !r.State.Terminal() && !now.Before(r.Deadline) {
		s.Log.Info("deadline exceeded; canceling", "task", id, "agent", r.AgentID)
		if _, err := s.cancel(ctx, id, task.SourceDaemon, task.ReasonDeadlineExceeded, "", ""); err != nil {
			s.Log.Warn("deadline cancel failed; retrying", "task", id, "err", err)
			return now.Add(time.Second)
		}
	} else if r.Outbox != nil && !now.Before(r.Outbox.NotBefore) {
		s.redeliver(ctx, id)
	}
	if r, _, err = s.Tasks.Get(ctx, id); err != nil {
		if errors.Is(err, task.ErrNotFound) {
			return time.Time{}
		}
		return time.Now().Add(time.Second)
	}
	return dueOf(task.Snapshot{ID: id, State: r.State, Deadline: r.Deadline, OutboxAt: outboxAt(r)})
}

func outboxAt(r *task.Record) time.Time {
	if r.Outbox == nil {
		return time.Time{}
	}
	if r.Outbox.NotBefore.IsZero() {
		return time.Unix(1, 0)
	}
	return r.Outbox.NotBefore
}

// dueOf is when a task next needs attention: its outbox's NotBefore or,
// while open, its deadline; zero when never.
func dueOf(sn task.Snapshot) time.Time {
	var due time.Time
	if !sn.Deleted && !sn.State.Terminal() {
		due = sn.Deadline
	}
	if !sn.Deleted && !sn.OutboxAt.IsZero() && (due.IsZero() || sn.OutboxAt.Before(due)) {
		due = sn.OutboxAt
	}
	return due
}

// scheduler keeps every task that will need attention in a heap ordered by
// due time and runs [Service.act] for each as it falls due, on a bounded
// pool of workers. The task store's watcher feeds it; every instance runs
// one, and compare-and-swap decides which instance's action takes effect.
type scheduler struct {
	mu         sync.Mutex
	h          dueHeap
	byID       map[string]*dueItem
	agentOf    map[string]string    // task id → agent id, from the watcher
	deadlineOf map[string]time.Time // task id → deadline, of open tasks
	busy       map[string]int       // agent id → actions running
	inflight   map[string]bool      // being acted on; true: fell due again meanwhile
	wake       chan struct{}
	stopping   chan struct{} // closed when run returns
	stopOnce   sync.Once
}

type dueItem struct {
	id  string
	due time.Time
	i   int
}

type dueHeap []*dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = i; h[j].i = j }
func (h *dueHeap) Push(x any)        { it := x.(*dueItem); it.i = len(*h); *h = append(*h, it) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	it.i = -1
	return it
}

func newScheduler() *scheduler {
	return &scheduler{byID: map[string]*dueItem{}, agentOf: map[string]string{}, deadlineOf: map[string]time.Time{}, busy: map[string]int{}, inflight: map[string]bool{},
		wake: make(chan struct{}, 1), stopping: make(chan struct{})}
}

// track schedules task id of agentID at due, or forgets it when due is
// zero (the watcher's view of the task); deadline is the open task's (zero
// for an ended one).
func (sc *scheduler) track(id, agentID string, due, deadline time.Time) {
	sc.mu.Lock()
	if due.IsZero() {
		delete(sc.agentOf, id)
		delete(sc.deadlineOf, id)
	} else {
		sc.agentOf[id] = agentID
		if deadline.IsZero() {
			delete(sc.deadlineOf, id)
		} else {
			sc.deadlineOf[id] = deadline
		}
	}
	sc.mu.Unlock()
	sc.set(id, due)
}

// set schedules id at due, or forgets it when due is zero.
func (sc *scheduler) set(id string, due time.Time) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	it, ok := sc.byID[id]
	switch {
	case due.IsZero() && ok:
		heap.Remove(&sc.h, it.i)
		delete(sc.byID, id)
	case due.IsZero():
		return
	case ok:
		it.due = due
		heap.Fix(&sc.h, it.i)
	default:
		it = &dueItem{id: id, due: due}
		heap.Push(&sc.h, it)
		sc.byID[id] = it
	}
	if due.IsZero() || sc.h[0] == it {
		select {
		case sc.wake <- struct{}{}:
		default:
		}
	}
}

// setEarlier schedules id at due unless the watcher scheduled it earlier
// meanwhile (a change another instance made while this one acted): the
// earlier time wins, and acting early only re-reads the record.
func (sc *scheduler) setEarlier(id string, due time.Time) {
	sc.mu.Lock()
	it, ok := sc.byID[id]
	if ok && (due.IsZero() || it.due.Before(due)) {
		sc.mu.Unlock()
		return
	}
	sc.mu.Unlock()
	sc.set(id, due)
}

// Len is the number of tasks scheduled.
func (sc *scheduler) Len() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.byID)
}

// run dispatches due tasks until ctx ends.
func (sc *scheduler) run(ctx context.Context, act func(context.Context, string) time.Time) {
	defer sc.stopOnce.Do(func() { close(sc.stopping) })
	sem := make(chan struct{}, workers)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		sc.mu.Lock()
		var due, held []string
		now := time.Now()
		for len(sc.h) > 0 && !sc.h[0].due.After(now) {
			it := heap.Pop(&sc.h).(*dueItem)
			delete(sc.byID, it.id)
			if _, busy := sc.inflight[it.id]; busy {
				sc.inflight[it.id] = true // act again once the running action ends
				continue
			}
			// An agent slow to answer holds at most perAgent actions, but
			// never its own tasks' deadlines: a task past its deadline is
			// canceled without waiting for the agent's slots.
			if dl, ok := sc.deadlineOf[it.id]; sc.busy[sc.agentOf[it.id]] >= perAgent && (!ok || now.Before(dl)) {
				held = append(held, it.id) // its agent has enough running: soon
				continue
			}
			sc.busy[sc.agentOf[it.id]]++
			sc.inflight[it.id] = false
			due = append(due, it.id)
		}
		for _, id := range held {
			it := &dueItem{id: id, due: now.Add(agentBusyPause)}
			heap.Push(&sc.h, it)
			sc.byID[id] = it
		}
		next := time.Hour
		if len(sc.h) > 0 {
			next = time.Until(sc.h[0].due)
		}
		sc.mu.Unlock()
		for _, id := range due {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				sc.mu.Lock()
				agent := sc.agentOf[id]
				sc.mu.Unlock()
				again := act(ctx, id)
				sc.mu.Lock()
				dueMeanwhile := sc.inflight[id]
				delete(sc.inflight, id)
				if sc.busy[agent]--; sc.busy[agent] <= 0 {
					delete(sc.busy, agent)
				}
				sc.mu.Unlock()
				if dueMeanwhile {
					// A change fell due while the action ran on an older
					// view: look again now.
					again = time.Now()
				}
				if ctx.Err() == nil {
					sc.setEarlier(id, again)
				}
			}()
		}
		if len(due) > 0 {
			continue // time passed while dispatching: look again
		}
		timer.Reset(next) // Go ≥ 1.23: no stale tick survives a Reset
		select {
		case <-ctx.Done():
			return
		case <-sc.wake:
		case <-timer.C:
		}
	}
}

// deliveryFault says in a2ad's words why a request to an agent did not
// complete: for task reasons, outboxes and logs, which must not carry the
// agent's text (an error can quote what the agent sent).
func deliveryFault(err error) string {
	var rpcErr *a2a.RPCError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &rpcErr):
		return rpcErr.Error() // its code only
	case errors.Is(err, natsbind.ErrAgentOffline):
		return "agent offline: no responder on its NATS subject"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "no answer within the request's timeout"
	case errors.Is(err, a2a.ErrDecode):
		return "the agent's answer is not valid A2A 1.0"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrDisconnected):
		return "a2ad's NATS connection is not up"
	}
	return "the request failed"
}
