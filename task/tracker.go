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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/failpoint"
	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/untrusted"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream stream that captures agent events and of the
// durable consumer a2ad instances share to apply them.
const (
	EventsStream   = "A2AD_EVENTS"
	EventsConsumer = "a2ad-tracker"
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
// artifacts and chunks; beyond it the task fails with ReasonArtifactTooLarge.
const MaxPendingParts = 256

// errNoChange tells Store.Update to skip the write.
var errNoChange = errors.New("no change")

// Tracker applies agent events to task records: FSM check, artifact
// validation on completion, compare-and-swap write.
type Tracker struct {
	Store *Store
	// Schemas gives each task the host schema version it was delegated
	// with (Record.SchemaDigest), whatever has been reloaded since.
	Schemas *artifact.Catalog
	// Policies are, by agent id, what that agent's artifacts may carry and
	// their limits (artifact.Policy; an agent without one gets the strict
	// defaults).
	Policies map[string]artifact.Policy
	Log      *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Workers is how many events Run applies at once, each of another
	// task; 0 means DefaultWorkers, 1 applies them one after the other.
	Workers int
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now().UTC()
	}
	return time.Now().UTC()
}

// EnsureStream creates or updates the events stream: work-queue retention
// (an event stays until an instance applied it), deduplication on
// Nats-Msg-Id within 2 minutes, 7 days maximum age.
func EnsureStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := jsretry.Do(ctx, time.Minute, func() (err error) {
		st, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        EventsStream,
			Description: "A2A events from agents, kept until an a2ad instance applied them",
			Subjects:    []string{natsbind.EventsWildcard},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    max(1, replicas),
			Duplicates:  2 * time.Minute,
			MaxAge:      7 * 24 * time.Hour,
			MaxMsgSize:  1 << 20,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("task: events stream: %w", err)
	}
	return st, nil
}

// Run applies events from the shared durable consumer until ctx ends.
func (t *Tracker) Run(ctx context.Context, js jetstream.JetStream, replicas int) error {
	st, err := EnsureStream(ctx, js, replicas)
	if err != nil {
		return err
	}
	var cons jetstream.Consumer
	err = jsretry.Do(ctx, time.Minute, func() (err error) {
		cons, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       EventsConsumer,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       10 * time.Second,
			MaxAckPending: 1024,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("task: events consumer: %w", err)
	}
	// Events of different tasks apply concurrently, each task's in the
	// order delivered: every event of a task goes to the same worker.
	n := cmp.Or(t.Workers, DefaultWorkers)
	queues := make([]chan jetstream.Msg, n)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan jetstream.Msg, workerQueue)
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return // what is queued is redelivered after the ack wait
				case m := <-queues[i]:
					t.handle(ctx, st, m)
				}
			}
		})
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case queues[partition(m.Subject(), n)] <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("task: consume events: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	wg.Wait()
	return nil
}

// DefaultWorkers is how many events a tracker applies at once (of as many
// different tasks) when Tracker.Workers is zero. Applying an event is
// mostly waiting for NATS (a read and a compare-and-swap of the record),
// so a serial tracker caps the instance at one event per round trip pair.
const DefaultWorkers = 32

// workerQueue is how many delivered events wait for each worker; when its
// queue is full the consumer's delivery waits.
const workerQueue = 64

// partition is the worker of an events subject (a2a.events.<agentId>.<taskId>):
// by task id, so that one task's events, whichever agent published them,
// apply one after the other in the order delivered.
func partition(subject string, n int) int {
	taskID := subject[strings.LastIndexByte(subject, '.')+1:]
	h := fnv.New32a()
	_, _ = h.Write([]byte(taskID))
	return int(h.Sum32() % uint32(n))
}

// unknownTaskRetries is how often an event for a task not (yet) in the
// store is redelivered before it is dropped: a KV read served by a replica
// a few milliseconds behind must not lose an event.
const unknownTaskRetries = 5

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
func (t *Tracker) handle(ctx context.Context, st jetstream.Stream, m jetstream.Msg) {
	md, mdErr := m.Metadata()
	msgID := m.Headers().Get(natsbind.HeaderMsgID)
	completed := failpoint.Armed() && isCompletion(m.Data())
	if completed {
		failpoint.Hit("event-completed-before-apply")
	}
	opts := applyOpts{sequenced: true, waitGap: mdErr == nil && md.NumDelivered < gapPatience}
	err := t.apply(context.WithoutCancel(ctx), m.Subject(), msgID, m.Data(), opts)
	streamOrdered := errors.Is(err, errUnsequenced)
	if streamOrdered {
		if mdErr == nil {
			first, gerr := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(m.Subject()))
			switch {
			case gerr != nil && !errors.Is(gerr, jetstream.ErrMsgNotFound):
				// The order cannot be checked (a leader election, say): later.
				_ = m.NakWithDelay(250 * time.Millisecond)
				return
			case gerr == nil && first.Sequence < md.Sequence.Stream:
				_ = m.NakWithDelay(50 * time.Millisecond)
				return
			}
		}
		err = t.apply(context.WithoutCancel(ctx), m.Subject(), msgID, m.Data(), applyOpts{})
	}
	switch {
	case errors.Is(err, errGap):
		_ = m.NakWithDelay(gapPause(md.NumDelivered))
		return
	case errors.Is(err, ErrNotFound) && mdErr == nil && md.NumDelivered < unknownTaskRetries:
		_ = m.NakWithDelay(time.Duration(md.NumDelivered) * 200 * time.Millisecond)
		return
	case err != nil && !errors.Is(err, ErrIllegalTransition) && !errors.Is(err, ErrNotFound) && !errors.Is(err, errRefused):
		t.Log.Warn("event not applied; will be redelivered", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Second)
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
}

// eventSeq parses a binding event id "<taskId>.<seq>", seq ≥ 1.
func eventSeq(msgID string) (prefix string, n int, ok bool) {
	i := strings.LastIndexByte(msgID, '.')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(msgID[i+1:])
	if err != nil || n < 1 {
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

var errRefused = errors.New("event refused")

// Apply applies one event published on subject (a2a.events.<agentId>.<taskId>).
// Redelivered events (same msgID) change nothing. Returns ErrNotFound for an
// unknown task, an error wrapping ErrIllegalTransition for a refused
// transition (recorded in the task's history, state unchanged), errRefused
// for a malformed or foreign event (also recorded), or a store error.
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

func (t *Tracker) apply(ctx context.Context, subject, msgID string, data []byte, o applyOpts) error {
	agentID, taskID, err := natsbind.ParseEventsSubject(subject)
	if err != nil {
		t.Log.Warn("event on a malformed subject dropped", "subject", subject)
		return errRefused
	}
	item, decErr := a2a.DecodeStreamResponse(data)
	foreign := false
	mutate := func(r *Record) error {
		now := t.now()
		if r.seen(msgID) {
			return errNoChange
		}
		foreign = r.AgentID != agentID
		if o.sequenced && !foreign {
			prefix, n, ok := eventSeq(msgID)
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
		}
		if foreign {
			// Not remembered: another agent's message ids must not mark
			// the owner's events as seen.
			t.Log.Warn("event for a task of another agent refused", "task", taskID, "subject_agent", agentID, "owner", r.AgentID)
			r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "event", Source: SourceAgent,
				Reason: "refused: event published by an agent that does not own this task", Refused: true, MsgID: msgID})
			return nil
		}
		r.remember(msgID)
		if decErr != nil {
			t.Log.Warn("malformed event refused", "task", taskID, "agent", agentID, "err", decErr)
			r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "event", Source: SourceAgent,
				Reason: "refused: malformed A2A 1.0 event", Refused: true, MsgID: msgID})
			return nil
		}
		if r.Outbox != nil && r.Outbox.Method == a2a.MethodSendMessage && r.Outbox.MessageID == BriefMessageID(r.ID) {
			// Any event of the task proves the agent has the brief.
			r.Outbox = nil
		}
		err := t.applyItem(r, item, msgID, now)
		if errors.Is(err, errNoChange) {
			return nil // still written: the event's id and sequence are now applied
		}
		return err
	}
	// The read before the compare-and-swap may come from this process's
	// last write of the record (revCache): the swap still guards what is
	// written. What is decided without a write is safe on such a read too
	// (a duplicate stays one), except a gap, which may be an event another
	// instance applied that this one's watcher has not shown yet: a gap is
	// looked at again on a read of the store.
	_, err = t.Store.Update(withCachedReads(ctx), taskID, mutate)
	if errors.Is(err, errGap) {
		_, err = t.Store.Update(ctx, taskID, mutate)
	}
	switch {
	case errors.Is(err, errNoChange):
		return nil
	case errors.Is(err, errGap), errors.Is(err, errUnsequenced):
		return err
	case errors.Is(err, ErrNotFound):
		t.Log.Warn("event for an unknown task dropped", "subject", subject)
		return err
	case err == nil && (decErr != nil || foreign):
		return errRefused
	}
	return err
}

func (t *Tracker) applyItem(r *Record, item *a2a.StreamResponse, msgID string, now time.Time) error {
	switch {
	case item.StatusUpdate != nil:
		u := item.StatusUpdate
		r.learnIDs(u.TaskID, u.ContextID, now)
		return t.applyStatus(r, u.Status, msgID, now)
	case item.ArtifactUpdate != nil:
		u := item.ArtifactUpdate
		r.learnIDs(u.TaskID, u.ContextID, now)
		return t.addArtifact(r, u, msgID, now)
	case item.Task != nil:
		r.learnIDs(item.Task.ID, item.Task.ContextID, now)
		for _, a := range item.Task.Artifacts {
			if err := t.addArtifact(r, &a2a.TaskArtifactUpdateEvent{Artifact: a}, msgID, now); err != nil {
				return err
			}
		}
		return t.applyStatus(r, item.Task.Status, msgID, now)
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

func (t *Tracker) addArtifact(r *Record, u *a2a.TaskArtifactUpdateEvent, msgID string, now time.Time) error {
	if r.State.Terminal() {
		r.refuse(Transition{At: now, From: r.State, To: r.State, Event: "artifact", Source: SourceAgent,
			Reason: "refused: artifact after a terminal state", Refused: true, MsgID: msgID})
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
	switch {
	case i >= 0 && u.Append:
		r.Pending[i].Parts = append(r.Pending[i].Parts, u.Artifact.Parts...)
		c := &r.PendingChunks[i]
		c.Appends++
		if c.Last && c.Fault == "" {
			c.Fault = "chunk_after_last"
		}
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
	if pendingBytes(r.Pending) > t.policy(r.AgentID).MaxTaskBytes || encodedBytes(r.Pending) > MaxPendingBytes ||
		pendingParts(r.Pending) > MaxPendingParts {
		r.Pending, r.PendingChunks = nil, nil
		return r.Move(now, EventFail, SourceDaemon, ReasonArtifactTooLarge, msgID)
	}
	r.UpdatedAt = now
	return nil
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

func (t *Tracker) applyStatus(r *Record, st a2a.TaskStatus, msgID string, now time.Time) error {
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
		}
	default:
		// The daemon overrode the agent (e.g. artifact_rejected): its
		// message may carry the rejected content, so none of it is kept.
		r.StatusMessage = ""
	}
	return err
}

// chunkVerdict adds to v what the artifact's chunk sequence broke: a fault
// (keyword "chunk_without_start" or "chunk_after_last"), or appended chunks
// with no lastChunk (keyword "chunks_incomplete": the agent never finished
// the artifact). Both apply to the whole artifact (pointer "").
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
		if v.ArtifactID == "" {
			v.ArtifactID = fmt.Sprintf("artifact-%d", i+1) // the agent's id was not safe to show
		}
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
