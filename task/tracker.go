package task

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/failpoint"
	"github.com/a2ad/a2ad/internal/lograte"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/untrusted"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"
)

// MaxPendingBytes caps the JSON encoding of the artifact content one task
// may accumulate before validation, whatever the agent's artifact.Policy
// MaxTaskBytes says: pending content lives in the task's KV record, which
// one NATS message (1 MiB) must hold, and JSON escaping can make text six
// times longer. Beyond it, or beyond the policy's MaxTaskBytes (as
// artifact.Size measures), the task fails with ReasonArtifactTooLarge.
const MaxPendingBytes = 512 << 10

// MaxAgentTextBytes bounds an agent's status message or question as kept
// in the task record and shown to hosts; longer text is cut (at a rune
// boundary) and ends with "…": it must not outgrow the record.
const MaxAgentTextBytes = 4096

// MaxPendingParts caps the parts one task may accumulate, over all its
// artifacts and chunks; beyond it the task fails with ReasonArtifactTooLarge
// (naming the artifact that crossed it).
const MaxPendingParts = 256

// errNoChange tells Store.Update to skip the write.
var errNoChange = errors.New("no change")

// Tracker applies agent events to task records: FSM check, artifact
// validation on completion, compare-and-swap write. Each agent's events
// come from a stream of its own ([EventsStream]) and are applied at its own
// rate on workers of its own, so no agent's events wait behind another's.
type Tracker struct {
	Store *Store
	// Schemas gives each task the host schema version it was delegated
	// with (Record.SchemaDigest), whatever has been reloaded since.
	Schemas *artifact.Catalog
	// Policies are, by agent id, what that agent's artifacts may carry and
	// their limits (artifact.Policy; an agent without one gets the strict
	// defaults).
	Policies map[string]artifact.Policy
	// Agents are the agents whose events [Tracker.Run] applies, each with
	// its limits: one stream and consumer per agent. Events of any other
	// agent are captured by no stream (their publishes fail, and the
	// agent retries).
	Agents map[string]EventLimits
	// Replicas of the events streams (0 means 1).
	Replicas int
	Log      *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Workers is how many events of one agent Run applies at once, each
	// of another task; 0 means DefaultWorkers, 1 applies them one after
	// the other.
	Workers int
	// OnDrop, if set, is told of each event terminated for good: the
	// agent id of its subject and the reason (a Drop… code). It must not
	// block.
	OnDrop func(agentID, reason string)

	gate    lograte.Gate             // bounds the log lines about dropped and retried events
	writes  map[string]*rate.Limiter // per agent: RecordBytesPerSecond (set by Run)
	records recordBytes              // per agent: its open records past bigRecord
	// pauseGap replaces gapPause (tests).
	pauseGap func(n uint64) time.Duration
	handled  atomic.Int64 // deliveries handled, parked ones each time they come back (tests)
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now().UTC()
	}
	return time.Now().UTC()
}

// DefaultWorkers is how many events of one agent a tracker applies at once
// (of as many different tasks) when Tracker.Workers is zero. Applying an
// event is mostly waiting for NATS (a read and a compare-and-swap of the
// record), so a serial tracker caps the agent at one event per round trip
// pair.
const DefaultWorkers = 32

// workerQueue is how many delivered events wait for each worker; when its
// queue is full the consumer's delivery waits.
const workerQueue = 64

// partition is the worker of an events subject (a2a.events.<agentId>.<taskId>):
// by task id, so that one task's events apply one after the other in the
// order delivered.
func partition(subject string, n int) int {
	taskID := subject[strings.LastIndexByte(subject, '.')+1:]
	h := fnv.New32a()
	_, _ = h.Write([]byte(taskID))
	return int(h.Sum32() % uint32(n))
}

// An event for a task the store does not show is delivered
// unknownTaskDeliveries times, unknownTaskWait apart, before it is
// terminated: "not found" is read through the stream leader, which has
// every committed record, and the wait covers a leader election.
const (
	unknownTaskDeliveries = 2
	unknownTaskWait       = time.Second
)

// gapPatience is how many times an event is put back while it waits for an
// earlier one of its task (a gap in the per-task sequence) before it is
// applied anyway. The pauses grow from 50 ms to 2 s, so the wait is about
// 30 s of this event's own deliveries — longer than the consumer's ack
// wait, so an earlier event held by an instance that died is redelivered
// first — and an agent that skipped a number cannot wedge its task.
const gapPatience = 20

// gapPause is the pause before the n-th redelivery of a waiting event.
func gapPause(n uint64) time.Duration {
	return min(50*time.Millisecond<<min(n-1, 6), 2*time.Second)
}

// gapPause is the tracker's pause before the n-th redelivery of an event
// waiting for an earlier one (pauseGap in tests).
func (t *Tracker) gapPause(n uint64) time.Duration {
	if t.pauseGap != nil {
		return t.pauseGap(n)
	}
	return gapPause(n)
}

// retryPause is the pause before the n-th redelivery of an event that
// could not be written (the store failing): 1 s doubling to 30 s, so its
// maxDeliver deliveries span about 45 minutes.
func retryPause(n uint64) time.Duration {
	return min(time.Second<<min(n-1, 5), 30*time.Second)
}

// handle applies one delivered event and settles it with the stream.
//
// Events of one task apply in order, also when several instances share the
// consumer. An event whose Nats-Msg-Id follows the binding ("<taskId>.<seq>",
// taskId being a2ad's, as in the subject; docs/nats-binding.md §6.3) is
// ordered by seq against the record: a seq already applied is a duplicate, a
// gap waits for the missing event.
// Any other event is ordered by the stream: while an earlier event of the
// same task is still in the (work-queue) stream, it is being applied
// elsewhere or awaits redelivery, so this one waits.
//
// An event that can never be applied is terminated (removed from the
// stream) and counted, never redelivered for ever: one over a2ad's bounds,
// malformed, for a task another agent owns, for a task that does not exist
// after a second delivery, or still not applied at its last delivery.
//
// An event after a gap is parked (see parking): it is applied again as soon
// as the store's watcher shows its task's record changed, rather than
// after a fixed pause, so that instances sharing the consumer, each given
// some of a task's events, do not make every event wait out a pause for
// its predecessor.
func (t *Tracker) handle(ctx context.Context, sm streamMsg, park *parking) {
	t.handled.Add(1)
	st, m := sm.st, sm.Msg
	md, mdErr := m.Metadata()
	delivered := uint64(1)
	if mdErr == nil {
		delivered = md.NumDelivered
	}
	last := delivered >= maxDeliver // the stream delivers it no more
	msgID := m.Headers().Get(natsbind.HeaderMsgID)
	completed := failpoint.Armed() && isCompletion(m.Data())
	if completed {
		failpoint.Hit("event-completed-before-apply")
	}
	replica := natsbind.HeaderValue(m.Headers(), natsbind.HeaderReplica)
	opts := applyOpts{sequenced: true, waitGap: delivered < gapPatience && !last, replica: replica}
	err := t.apply(context.WithoutCancel(ctx), m.Subject(), msgID, m.Data(), opts)
	if errors.Is(err, errGap) && sm.follow == nil && park != nil && t.Store != nil {
		// Followed before the record is read again, so that no change
		// after that read is missed while the event waits.
		_, taskID, _ := natsbind.ParseEventsSubject(m.Subject())
		sm.follow = t.Store.Follow(taskID)
		_, sm.seq, _ = eventSeq(msgID)
		err = t.apply(context.WithoutCancel(ctx), m.Subject(), msgID, m.Data(), opts)
	}
	if !errors.Is(err, errGap) {
		sm.stopFollowing()
	}
	streamOrdered := errors.Is(err, errUnsequenced)
	if streamOrdered {
		if mdErr == nil && !last {
			first, gerr := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(m.Subject()))
			switch {
			case gerr != nil && !errors.Is(gerr, jetstream.ErrMsgNotFound):
				// The order cannot be checked (a leader election, say): later.
				_ = m.NakWithDelay(gapPause(delivered))
				return
			case gerr == nil && first.Sequence < md.Sequence.Stream:
				_ = m.NakWithDelay(gapPause(delivered))
				return
			}
		}
		err = t.apply(context.WithoutCancel(ctx), m.Subject(), msgID, m.Data(), applyOpts{replica: replica})
	}
	switch {
	case errors.Is(err, errGap):
		park.park(ctx, sm, t.gapPause(delivered))
		return
	case errors.Is(err, ErrNotFound) && delivered < unknownTaskDeliveries:
		_ = m.NakWithDelay(unknownTaskWait)
		return
	case errors.Is(err, ErrNotFound):
		err = &dropped{reason: DropUnknownTask}
	case err != nil && !errors.Is(err, ErrIllegalTransition) && !errors.Is(err, errRefused):
		if !last {
			if ok, held := t.gate.Allow("retry", time.Now()); ok {
				t.Log.Warn("event not applied; will be redelivered", "subject", m.Subject(), "delivery", delivered, "err", err, "similar_not_logged", held)
			}
			_ = m.NakWithDelay(retryPause(delivered))
			return
		}
		t.Log.Error("event not applied at its last delivery: terminated", "subject", m.Subject(), "msg_id", clipID(msgID), "deliveries", delivered, "err", err)
		err = &dropped{reason: DropUndeliverable}
	}
	if reason := DropReason(err); reason != "" {
		t.terminate(m, reason, err)
		return
	}
	if completed {
		failpoint.Hit("event-completed-after-apply")
	}
	if !streamOrdered {
		// A lost ack only means a redelivery, which the sequence shows to
		// be a duplicate, so the ack is not awaited.
		_ = m.Ack()
		return
	}
	// Stream order: the next event of this task waits until this one has
	// left the stream, so the ack is confirmed.
	if err := m.DoubleAck(ctx); err != nil {
		t.Log.Debug("event ack not confirmed", "subject", m.Subject(), "err", err)
	}
}

// terminate removes an event that can never be applied from its stream,
// counts it (OnDrop) and logs it, at most once per agent and reason every
// logEvery with the number of similar events not logged.
func (t *Tracker) terminate(m jetstream.Msg, reason string, err error) {
	_ = m.TermWithReason(reason)
	agentID, _, _ := natsbind.ParseEventsSubject(m.Subject())
	if !natsbind.ValidToken(agentID) {
		agentID = ""
	}
	if t.OnDrop != nil {
		t.OnDrop(agentID, reason)
	}
	if ok, held := t.gate.Allow(agentID+"/"+reason, time.Now()); ok {
		t.Log.Warn("event refused for good", "agent", agentID, "reason", reason, "err", err, "similar_not_logged", held)
	}
}

// clipID is an agent-chosen id fit for a log line.
func clipID(id string) string {
	if !validEventID(id) {
		return "(over bounds)"
	}
	return id
}

// errGap: an earlier event of the task has not been applied yet.
// errUnsequenced: the event's id does not carry the task's sequence.
var (
	errGap         = errors.New("an earlier event of the task is not applied yet")
	errUnsequenced = errors.New("event id carries no sequence of this task")
)

// applyOpts say how an event is ordered.
type applyOpts struct {
	sequenced bool // order by the "<agentTaskId>.<seq>" id (else errUnsequenced if it has none)
	waitGap   bool // a gap returns errGap instead of applying
	// replica is the event's A2ad-Replica header ("" for none): recorded
	// as the task's AgentReplica when it has none and it is one NATS
	// token (docs/nats-binding.md §6.3).
	replica string
}

// eventSeq parses a binding event id "<taskId>.<seq>", seq ≥ 1 in decimal
// as the binding writes it: digits only, no sign, no leading zero. Any
// other spelling ("t.02", "t.+2") is not a sequence, so that one number
// has one id: an agent cannot make its own next event a duplicate of a
// differently spelt one, nor park many copies of one number.
func eventSeq(msgID string) (prefix string, n int, ok bool) {
	i := strings.LastIndexByte(msgID, '.')
	if i <= 0 {
		return "", 0, false
	}
	digits := msgID[i+1:]
	if digits == "" || digits[0] < '1' || digits[0] > '9' || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, false
	}
	return msgID[:i], n, true
}

// isCompletion reports whether an event reports TASK_STATE_COMPLETED (the
// failpoints around applying a completion need to know).
func isCompletion(data []byte) bool {
	item, err := a2a.DecodeStreamResponse(data)
	return err == nil && item.StatusUpdate != nil && item.StatusUpdate.Status.State == a2a.TaskStateCompleted
}

// errRefused is wrapped by every refusal of an event that is not a
// lifecycle refusal (see [DropReason]).
var errRefused = errors.New("event refused")

// Apply applies one event published on subject (a2a.events.<agentId>.<taskId>).
// Redelivered events (same msgID) change nothing. Returns ErrNotFound for an
// unknown task, an error wrapping ErrIllegalTransition for a refused
// transition (recorded in the task's history, state unchanged), an error
// whose [DropReason] says why for an event that can never be applied (a
// malformed one or one over a2ad's bounds is also recorded as refused; one
// on another agent's subject or one that would outgrow the record's byte
// budget is only counted in the record), or a store error.
//
// An id of the binding's form "<agentTaskId>.<seq>" also orders: a seq at
// or below the last one applied is a duplicate and changes nothing.
func (t *Tracker) Apply(ctx context.Context, subject, msgID string, data []byte) error {
	err := t.apply(ctx, subject, msgID, data, applyOpts{sequenced: true})
	if errors.Is(err, errUnsequenced) {
		err = t.apply(ctx, subject, msgID, data, applyOpts{})
	}
	return err
}

// event is one agent event as delivered, checked against a2ad's bounds
// before anything of it is stored.
type event struct {
	agentID, taskID, msgID string
	item                   *a2a.StreamResponse
	decErr                 error     // the body is not one A2A 1.0 stream item
	badID                  bool      // msgID is over MaxEventIDBytes or not printable ASCII
	bound                  overBound // what of item is over a2ad's bounds, if anything
}

// teaches reports whether ev would tell the canceled task r the agent's
// task id it does not know yet (its CancelTask needs it): a well-formed
// item that names one.
func (ev event) teaches(r *Record) bool {
	if r.State != Canceled || r.AgentTaskID != "" || ev.badID || ev.decErr != nil || ev.bound.what != "" || ev.item == nil {
		return false
	}
	switch it := ev.item; {
	case it.StatusUpdate != nil:
		return it.StatusUpdate.TaskID != ""
	case it.ArtifactUpdate != nil:
		return it.ArtifactUpdate.TaskID != ""
	case it.Task != nil:
		return it.Task.ID != ""
	}
	return false
}

// parseEvent reads an event published on subject; an error (a *dropped)
// when the subject is not a2a.events.<agentId>.<taskId>.
func parseEvent(subject, msgID string, data []byte) (event, error) {
	agentID, taskID, err := natsbind.ParseEventsSubject(subject)
	if err != nil || !natsbind.ValidToken(agentID) || !natsbind.ValidToken(taskID) {
		return event{}, &dropped{reason: DropBadSubject}
	}
	ev := event{agentID: agentID, taskID: taskID, msgID: msgID, badID: !validEventID(msgID)}
	ev.item, ev.decErr = a2a.DecodeStreamResponse(data)
	if ev.decErr == nil {
		ev.bound = checkItem(ev.item)
	}
	return ev, nil
}

// order applies ev's place in the task's sequence of events to r:
// errNoChange for a duplicate, errGap for an event after a gap (when o
// says to wait), errUnsequenced for an id without the task's sequence
// (when o orders by sequence).
func (ev event) order(r *Record, o applyOpts) error {
	if r.seen(ev.msgID) {
		return errNoChange
	}
	if !o.sequenced {
		return nil
	}
	prefix, n, ok := eventSeq(ev.msgID)
	if !ok || prefix != r.ID {
		return errUnsequenced
	}
	switch {
	case n <= r.EventSeq && !r.skipped(n):
		return errNoChange // applied already
	case n <= r.EventSeq:
		r.Skipped = slices.DeleteFunc(r.Skipped, func(s int) bool { return s == n }) // late, but never lost
	case n > r.EventSeq+1 && o.waitGap:
		return errGap
	default:
		r.skip(r.EventSeq+1, n)
		r.EventSeq = n
	}
	return nil
}

// applyTo applies ev to r as read from the store. It returns a *dropped
// for an event that can never apply (the record then holds only a2ad's
// refusal, or, for a foreign event, nothing: errNoChange), the ordering
// errors of [event.order], errNoChange when nothing is to be written, or
// a lifecycle refusal (wrapping ErrIllegalTransition, recorded in r).
func (t *Tracker) applyTo(r *Record, ev event, o applyOpts, now time.Time) (*dropped, error) {
	if r.AgentID != ev.agentID {
		// Nothing is written: another agent's events must not change, or
		// contend for, the owner's record.
		return &dropped{reason: DropForeignTask}, errNoChange
	}
	if end := cmp.Or(r.EndedAt, r.UpdatedAt); r.State.Terminal() && now.Sub(end) > FinalAfter && !ev.teaches(r) {
		// Nothing is written: an agent's events must not keep rewriting
		// its ended tasks, each write a new value for retention to wait
		// on (records of earlier versions, without ended_at, count from
		// their last write, which each refusal would move).
		return &dropped{reason: DropTaskEnded}, errNoChange
	}
	if ev.badID {
		// Neither kept nor ordered: the id itself is over the bounds.
		r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "event", Source: SourceAgent,
			Reason: fmt.Sprintf("refused: Nats-Msg-Id longer than %d bytes or not printable ASCII", MaxEventIDBytes), Refused: true})
		return &dropped{reason: DropOutOfBounds, detail: "Nats-Msg-Id"}, nil
	}
	if err := ev.order(r, o); err != nil {
		return nil, err
	}
	r.remember(ev.msgID)
	switch {
	case ev.decErr != nil:
		reason, ptr := "refused: malformed A2A 1.0 event", ""
		var de *a2a.DecodeError
		switch {
		case errors.As(ev.decErr, &de) && de.Pointer != "":
			reason, ptr = "refused at "+de.Pointer+": malformed A2A 1.0 event: "+de.Reason, de.Pointer
		case de != nil:
			reason += ": " + de.Reason
		}
		r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "event", Source: SourceAgent,
			Reason: reason, Pointer: ptr, Refused: true, MsgID: ev.msgID})
		return &dropped{reason: DropMalformed}, nil
	case ev.bound.what != "":
		r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "event", Source: SourceAgent,
			Reason: "refused at " + ev.bound.ptr + ": " + ev.bound.what, Pointer: ev.bound.ptr, Refused: true, MsgID: ev.msgID})
		return &dropped{reason: DropOutOfBounds, detail: ev.bound.what}, nil
	}
	if r.Outbox != nil && r.Outbox.Method == a2a.MethodSendMessage && r.Outbox.MessageID == BriefMessageID(r.ID) {
		// Any event of the task proves the agent has the brief.
		r.Outbox = nil
	}
	if r.AgentReplica == "" && o.replica != "" && natsbind.ValidToken(o.replica) {
		// The replica that publishes the task's events holds it, as its
		// SendMessage reply would say: when the event comes first, the
		// reply then has nothing left to write.
		r.AgentReplica = o.replica
	}
	err := t.applyItem(r, ev.item, ev.msgID, now)
	if errors.Is(err, errNoChange) {
		return nil, nil // still written: the event's id and sequence are now applied
	}
	return nil, err
}

func (t *Tracker) apply(ctx context.Context, subject, msgID string, data []byte, o applyOpts) error {
	ev, err := parseEvent(subject, msgID, data)
	if err != nil {
		return err
	}
	var drop *dropped
	mutate := func(r *Record) (err error) {
		drop, err = t.applyTo(r, ev, o, t.now())
		return err
	}
	// overflow is what is written instead when the event would outgrow the
	// record's budget: its place in the sequence, and a count.
	overflow := func(r *Record) error {
		if err := ev.order(r, o); err != nil {
			return err
		}
		r.EventsUnrecorded++
		r.UpdatedAt = t.now()
		drop = &dropped{reason: DropRecordFull}
		return nil
	}
	// The read before the compare-and-swap may come from this process's
	// last write of the record (revCache): the swap still guards what is
	// written. What is decided without a write is safe on such a read too
	// (a duplicate stays one), except a gap, which may be an event another
	// instance applied that this one's watcher has not shown yet: a gap is
	// looked at again on a read of the store.
	budget := t.recordBudget(ev.agentID, ev.taskID)
	wrote := func(n int) { t.charge(ev.agentID, n) }
	_, err = t.Store.update(withCachedReads(ctx), ev.taskID, mutate, budget, overflow, wrote)
	if errors.Is(err, errGap) {
		_, err = t.Store.update(ctx, ev.taskID, mutate, budget, overflow, wrote)
	}
	switch {
	case drop != nil && (err == nil || errors.Is(err, errNoChange)):
		return drop
	case errors.Is(err, errNoChange):
		return nil
	case errors.Is(err, ErrRecordFull):
		return &dropped{reason: DropRecordFull}
	}
	return err
}

func (t *Tracker) applyItem(r *Record, item *a2a.StreamResponse, msgID string, now time.Time) error {
	switch {
	case item.StatusUpdate != nil:
		u := item.StatusUpdate
		r.learnIDs(u.TaskID, u.ContextID, now)
		return t.applyStatus(r, u.Status, "/statusUpdate/status/state", msgID, now)
	case item.ArtifactUpdate != nil:
		u := item.ArtifactUpdate
		r.learnIDs(u.TaskID, u.ContextID, now)
		return t.addArtifact(r, u, "/artifactUpdate/artifact", msgID, now)
	case item.Task != nil:
		r.learnIDs(item.Task.ID, item.Task.ContextID, now)
		if to, ok := FromWire(item.Task.Status.State); ok && r.State.Terminal() && to == r.State {
			// The end already applied, observed again (an HTTP agent's task
			// read once more by a follower that took over): nothing new.
			return errNoChange
		}
		for i, a := range item.Task.Artifacts {
			if err := t.addArtifact(r, &a2a.TaskArtifactUpdateEvent{Artifact: a}, "/task/artifacts/"+strconv.Itoa(i), msgID, now); err != nil {
				return err
			}
		}
		return t.applyStatus(r, item.Task.Status, "/task/status/state", msgID, now)
	}
	return errNoChange // a bare message item carries no task change on this binding
}

// learnIDs records the agent's task and context ids from an event. A task
// canceled before the agent's id was known (its brief's delivery was
// unconfirmed) learns here that the agent has it after all, and gets its
// CancelTask into the outbox, due at once.
func (r *Record) learnIDs(agentTaskID, contextID string, now time.Time) {
	if r.AgentTaskID == "" && agentTaskID != "" {
		r.AgentTaskID = agentTaskID
		if r.State == Canceled && (r.Outbox == nil || r.Outbox.CancelOnReply) {
			params, _ := json.Marshal(a2a.CancelTaskRequest{ID: agentTaskID})
			r.Outbox = &Outbound{Method: a2a.MethodCancelTask, Params: params, NotBefore: now}
		}
	}
	if r.ContextID == "" {
		r.ContextID = contextID
	}
}

// addArtifact adds the artifact (or chunk) of u, found at pointer ptr in
// the event, to the task's pending artifacts.
//
// An artifact whose lastChunk came is sealed: a later update of it is
// refused and recorded (at ptr), and the content it was sealed with stands;
// the same artifact again, unchanged (a final Task repeating what was
// streamed), changes nothing. An update (a chunk, or a whole artifact)
// that takes its artifact past the policy's max_parts or
// max_artifact_bytes fails the task at once, as does one that takes the
// task past its limits (max_task_bytes, MaxPendingParts,
// MaxPendingBytes): the reason is ReasonArtifactTooLarge, then the
// artifact and the limit ("artifact_too_large: artifact ra passed
// max_parts (16 parts)").
func (t *Tracker) addArtifact(r *Record, u *a2a.TaskArtifactUpdateEvent, ptr, msgID string, now time.Time) error {
	if r.State.Terminal() {
		r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "artifact", Source: SourceAgent,
			Reason: "refused at " + ptr + ": artifact after a terminal state", Pointer: ptr, Refused: true, MsgID: msgID})
		return fmt.Errorf("%w: artifact after %s", ErrIllegalTransition, r.State)
	}
	i := -1
	for j := range r.Pending {
		if r.Pending[j].ArtifactID == u.Artifact.ArtifactID {
			i = j
		}
	}
	if len(r.PendingChunks) != len(r.Pending) { // a record from before chunks were tracked
		r.PendingChunks = make([]Chunks, len(r.Pending))
	}
	if i >= 0 && r.PendingChunks[i].Last {
		if !u.Append && reflect.DeepEqual(r.Pending[i], u.Artifact) {
			return nil
		}
		r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "artifact", Source: SourceAgent,
			Reason: "refused at " + ptr + ": artifact " + shownArtifactID(r.Pending[i].ArtifactID, i) +
				" was sealed by its lastChunk; the content it was sealed with stands", Pointer: ptr, Refused: true, MsgID: msgID})
		return nil
	}
	switch {
	case i >= 0 && u.Append:
		r.Pending[i].Parts = append(r.Pending[i].Parts, u.Artifact.Parts...)
		r.PendingChunks[i].Appends++
	case i >= 0: // the same artifact id again, whole: it replaces the first
		r.Pending[i] = u.Artifact
		r.PendingChunks[i] = Chunks{}
	default:
		r.Pending = append(r.Pending, u.Artifact)
		c := Chunks{}
		if u.Append {
			c.Fault = "chunk_without_start"
		}
		r.PendingChunks = append(r.PendingChunks, c)
		i = len(r.Pending) - 1
	}
	if u.LastChunk {
		r.PendingChunks[i].Last = true
	}
	pol := t.policy(r.AgentID)
	// A chunk stream, or one update, is cut at the update that crosses a
	// limit, with a reason naming the artifact and the limit.
	a := r.Pending[i]
	var over string
	switch {
	case len(a.Parts) > pol.MaxParts:
		over = fmt.Sprintf("max_parts (%d parts)", pol.MaxParts)
	case artifact.Size(a) > pol.MaxArtifactBytes:
		over = fmt.Sprintf("max_artifact_bytes (%d bytes)", pol.MaxArtifactBytes)
	case pendingBytes(r.Pending) > pol.MaxTaskBytes:
		over = fmt.Sprintf("max_task_bytes (%d bytes over all the task's artifacts)", pol.MaxTaskBytes)
	case pendingParts(r.Pending) > MaxPendingParts:
		over = fmt.Sprintf("the task's part limit (%d parts over all its artifacts)", MaxPendingParts)
	case encodedBytes(r.Pending) > MaxPendingBytes:
		over = fmt.Sprintf("the task record's limit (%d bytes of JSON-encoded artifacts)", MaxPendingBytes)
	}
	if over != "" {
		label := shownArtifactID(a.ArtifactID, i)
		r.Pending, r.PendingChunks = nil, nil
		return r.Move(now, EventFail, SourceDaemon, ReasonArtifactTooLarge+": artifact "+label+" passed "+over, msgID)
	}
	r.UpdatedAt = now
	return nil
}

// shownArtifactID is how a2ad names the artifact at index i of a task in
// its own words: its artifactId when that is a safe identifier
// ([artifact.ShownID]), else "artifact-<i+1>", as verdicts do.
func shownArtifactID(id string, i int) string {
	if s := artifact.ShownID(id); s != "" {
		return s
	}
	return fmt.Sprintf("artifact-%d", i+1)
}

// policy is agent id's artifact policy, defaults applied.
func (t *Tracker) policy(agentID string) artifact.Policy {
	return t.Policies[agentID].WithDefaults()
}

func pendingParts(as []a2a.Artifact) int {
	n := 0
	for _, a := range as {
		n += len(a.Parts)
	}
	return n
}

// encodedBytes is the size of the pending artifacts in the task record.
func encodedBytes(as []a2a.Artifact) int {
	b, err := json.Marshal(as)
	if err != nil {
		return math.MaxInt
	}
	return len(b)
}

// pendingBytes measures a task's pending artifacts as artifact.Size does.
func pendingBytes(as []a2a.Artifact) int {
	n := 0
	for _, a := range as {
		n += artifact.Size(a)
	}
	return n
}

// applyStatus applies the status st, whose state is at pointer ptr in the
// event; a refused move names ptr in the history.
func (t *Tracker) applyStatus(r *Record, st a2a.TaskStatus, ptr, msgID string, now time.Time) error {
	n := len(r.History)
	err := t.moveTo(r, st, msgID, now)
	if errors.Is(err, ErrIllegalTransition) && len(r.History) > n {
		if h := &r.History[len(r.History)-1]; h.Refused && h.MsgID == msgID && h.Source == SourceAgent {
			h.Pointer = ptr
			if rest, ok := strings.CutPrefix(h.Reason, "refused: "); ok {
				h.Reason = "refused at " + ptr + ": " + rest
			}
		}
	}
	return err
}

func (t *Tracker) moveTo(r *Record, st a2a.TaskStatus, msgID string, now time.Time) error {
	to, ok := FromWire(st.State)
	if !ok {
		return fmt.Errorf("%w: unknown state", ErrIllegalTransition)
	}
	text := untrusted.Clip(st.Message.Text(), MaxAgentTextBytes)
	if to == r.State && r.State.Terminal() {
		return errNoChange // a terminal record keeps its status message
	}
	if to == r.State {
		if text != "" {
			r.StatusMessage = text
			if to.Interrupted() {
				r.Question = text
				r.setQuestionSchema(st.Message)
			}
			r.UpdatedAt = now
			return nil
		}
		return errNoChange
	}
	event := EventFor(r.State, to)
	var err error
	switch to {
	case Completed:
		err = t.complete(r, msgID, now)
	case Failed:
		err = r.Move(now, event, SourceAgent, ReasonAgentFailed, msgID)
	case Rejected:
		err = r.Move(now, event, SourceAgent, ReasonAgentRejected, msgID)
	case Canceled:
		err = r.Move(now, event, SourceAgent, "canceled_by_agent", msgID)
	default:
		err = r.Move(now, event, SourceAgent, "", msgID)
	}
	switch {
	case err != nil:
	case r.State == to:
		r.StatusMessage = text
		if to.Interrupted() {
			r.Question = text
			r.setQuestionSchema(st.Message)
		}
	default:
		// The daemon overrode the agent (e.g. artifact_rejected): its
		// message may carry the rejected content, so none of it is kept.
		r.StatusMessage = ""
	}
	return err
}

// chunkVerdict adds to v what the artifact's chunk sequence broke: a fault
// (keyword "chunk_without_start", or "chunk_after_last" in a record from
// before sealed artifacts refused later chunks), or appended chunks with no
// lastChunk (keyword "chunks_incomplete": the agent never finished the
// artifact). Both apply to the whole artifact (pointer "").
func chunkVerdict(v artifact.Verdict, c Chunks) artifact.Verdict {
	kw := c.Fault
	if kw == "" && c.Appends > 0 && !c.Last {
		kw = "chunks_incomplete"
	}
	if kw == "" {
		return v
	}
	v.Valid = false
	v.Violations = append([]artifact.Violation{{Pointer: "", Keyword: kw}}, v.Violations...)
	return v
}

// complete validates the pending artifacts against the task's host schema;
// the task completes only if every artifact passes, and otherwise fails with
// ReasonArtifactRejected (or ReasonArtifactMissing when there is none). The
// rejected content is dropped: only verdicts remain.
func (t *Tracker) complete(r *Record, msgID string, now time.Time) error {
	if _, err := Fire(r.State, EventComplete); err != nil {
		return r.Move(now, EventComplete, SourceAgent, "", msgID) // records the refusal
	}
	schema, err := t.Schemas.ForTask(r.OutputSchema, r.SchemaDigest)
	if err != nil {
		r.Pending, r.PendingChunks = nil, nil
		return r.Move(now, EventFail, SourceDaemon, ReasonArtifactRejected+": host schema "+r.OutputSchema+" version no longer known", msgID)
	}
	if len(r.Pending) == 0 {
		return r.Move(now, EventFail, SourceDaemon, ReasonArtifactMissing, msgID)
	}
	var ok []Artifact
	rejected := false
	r.Verdicts = r.Verdicts[:0]
	for i, a := range r.Pending {
		v := artifact.CheckPolicy(schema, a, t.policy(r.AgentID))
		if i < len(r.PendingChunks) {
			v = chunkVerdict(v, r.PendingChunks[i])
		}
		v.ArtifactID = shownArtifactID(a.ArtifactID, i)
		r.Verdicts = append(r.Verdicts, v)
		if !v.Valid {
			rejected = true
			continue
		}
		ok = append(ok, Artifact{ArtifactID: a.ArtifactID, Name: a.Name, Parts: a.Parts})
	}
	r.Pending, r.PendingChunks = nil, nil
	if rejected {
		r.Artifacts = nil
		return r.Move(now, EventFail, SourceDaemon, ReasonArtifactRejected, msgID)
	}
	r.Artifacts = ok
	return r.Move(now, EventComplete, SourceAgent, "", msgID)
}
