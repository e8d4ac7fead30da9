package httpbind

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EventIDPrefix starts every Nats-Msg-Id the follower publishes: never the
// binding's sequenced "<taskId>.<seq>" form, so the tracker orders these
// events by the stream (docs/http-binding.md §6).
const EventIDPrefix = "h1-"

// MaxEventBytes is the largest event the follower publishes (the agent's
// events stream's default max_msg_size, task.DefaultEventLimits); a larger
// observation is refused and logged.
const MaxEventBytes = 1 << 20

// observation is one change seen at the agent, ready to publish.
type observation struct {
	body     []byte // one A2A 1.0 stream item
	msgID    string
	terminal bool // it reports a terminal state
}

// ContentID is the Nats-Msg-Id of one observed change of agent task
// taskID: "h1-" and the hex SHA-256 of the task id, the kind of change
// ("status"; "artifact", "artifact-last" for a whole artifact without and
// with lastChunk; "chunk@N", "chunk-last@N" for an appended chunk after N
// parts of its artifact) and the change's content as a2a-go marshals it
// (the status, the artifact). Not of the form it was observed in: a status
// seen in a stream's update, in a GetTask snapshot and in a push has one
// id, whichever instance saw it, so JetStream and the tracker apply it
// once — a stale read of input-required after the host's answer is the
// change already applied, not a new question. Two identical chunks stay
// two (their positions differ). 67 bytes of [a-z0-9-].
func ContentID(taskID a2a.TaskID, kind string, content []byte) string {
	h := sha256.New()
	h.Write([]byte(taskID))
	h.Write([]byte{0})
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(content)
	return EventIDPrefix + hex.EncodeToString(h.Sum(nil))
}

// snapshotOf is the observation of task t, one change per message: each
// artifact whole, then the status (the tracker validates artifacts on the
// completion, so they go first); history is not kept (the tracker does
// not need it).
func snapshotOf(t *a2a.Task) ([]observation, error) {
	var obs []observation
	for _, a := range t.Artifacts {
		if a == nil {
			continue
		}
		o, _, err := itemOf(&a2a.TaskArtifactUpdateEvent{TaskID: t.ID, ContextID: t.ContextID, Artifact: a}, map[a2a.ArtifactID]int{})
		if err != nil {
			return nil, err
		}
		obs = append(obs, o)
	}
	o, _, err := itemOf(&a2a.TaskStatusUpdateEvent{TaskID: t.ID, ContextID: t.ContextID, Status: t.Status}, nil)
	if err != nil {
		return nil, err
	}
	return append(obs, o), nil
}

// itemOf is the observation of a status or artifact update; parts counts,
// per artifact id, the parts seen so far in this subscription (updated).
// ok is false for an item that carries no task change (a message, a Task:
// see snapshotOf).
func itemOf(ev a2a.Event, parts map[a2a.ArtifactID]int) (o observation, ok bool, err error) {
	var kind string
	var content any
	switch e := ev.(type) {
	case *a2a.TaskStatusUpdateEvent:
		kind, content = "status", e.Status
	case *a2a.TaskArtifactUpdateEvent:
		if e.Artifact == nil {
			return observation{}, false, nil
		}
		last := ""
		if e.LastChunk {
			last = "-last"
		}
		if e.Append {
			kind = "chunk" + last + "@" + strconv.Itoa(parts[e.Artifact.ID])
			parts[e.Artifact.ID] += len(e.Artifact.Parts)
		} else {
			kind = "artifact" + last
			parts[e.Artifact.ID] = len(e.Artifact.Parts)
		}
		content = e.Artifact
	default:
		return observation{}, false, nil
	}
	b, err := json.Marshal(a2a.StreamResponse{Event: ev})
	if err != nil {
		return observation{}, false, err
	}
	c, err := json.Marshal(content)
	if err != nil {
		return observation{}, false, err
	}
	return observation{body: b, msgID: ContentID(taskIDOf(ev), kind, c), terminal: terminalOf(ev)}, true, nil
}

// taskIDOf is the agent task id an event is about.
func taskIDOf(ev a2a.Event) a2a.TaskID {
	switch e := ev.(type) {
	case *a2a.Task:
		return e.ID
	case *a2a.TaskStatusUpdateEvent:
		return e.TaskID
	case *a2a.TaskArtifactUpdateEvent:
		return e.TaskID
	}
	return ""
}

// terminalOf reports whether ev reports a terminal state.
func terminalOf(ev a2a.Event) bool {
	switch e := ev.(type) {
	case *a2a.Task:
		return e.Status.State.Terminal()
	case *a2a.TaskStatusUpdateEvent:
		return e.Status.State.Terminal()
	}
	return false
}

// observe follows the agent's task until ctx ends (the lease lost or the
// task ended in the store): by SubscribeToTask where the card declares
// streaming and the agent serves it, else by GetTask polls; with push
// notifications registered when push is set.
func (fl *following) observe(ctx context.Context, target Target, push bool) {
	if push {
		fl.registerPush(ctx, target)
	}
	if !target.Streaming || !fl.stream(ctx, target) {
		if target.Streaming {
			mode := ModePoll
			if push {
				mode += pushSuffix
			}
			fl.mode.Store(mode) // written at the next renewal
		}
		fl.poll(ctx, target, push)
	}
	<-ctx.Done() // the end published: the lease is held until the store shows it
}

// stream subscribes to the task and resubscribes when the stream drops
// (200 ms doubling to 5 s, back to 200 ms after a stream that delivered);
// after each stream a GetTask catches what happened while none was open.
// It returns false when the agent refuses SubscribeToTask
// (UnsupportedOperation): the caller polls instead.
func (fl *following) stream(ctx context.Context, target Target) bool {
	pause := streamRetryMin
	for ctx.Err() == nil && !fl.ended.Load() {
		client, _, err := fl.f.Binding.Client(ctx, fl.agentID)
		if err != nil {
			fl.logAgent("client", "HTTP agent unreachable for following", err)
			if !sleepCtx(ctx, pause) {
				return true
			}
			pause = min(2*pause, streamRetryMax)
			continue
		}
		delivered := false
		parts := map[a2a.ArtifactID]int{}
		for ev, err := range client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(fl.agentTask), Tenant: target.Tenant}) {
			if err != nil {
				if errors.Is(err, a2a.ErrUnsupportedOperation) {
					return false
				}
				switch {
				case ctx.Err() != nil:
				case errors.Is(err, a2a.ErrTaskNotFound):
					// a2a-go answers so while no execution runs (the task
					// waits for input): GetTask follows it meanwhile.
					fl.logAgentAt(slog.LevelDebug, "stream", "SubscribeToTask: no execution to stream now; following by GetTask", err)
				default:
					fl.logAgent("stream", "SubscribeToTask stream ended", err)
				}
				break
			}
			delivered = true
			if !fl.publishEvent(ctx, ev, parts) {
				return true
			}
		}
		if ctx.Err() != nil || fl.ended.Load() {
			return true
		}
		fl.getTask(ctx, client, target)
		if delivered {
			pause = streamRetryMin
		}
		select {
		case <-ctx.Done():
			return true
		case <-fl.poke:
		case <-time.After(pause):
		}
		if !delivered {
			pause = min(2*pause, streamRetryMax)
		}
	}
	return true
}

// poll polls GetTask: PollMin doubling to PollMax while nothing changes
// (to PushPoll when push notifications are on), back to PollMin on a
// change; a push notification polls at once.
func (fl *following) poll(ctx context.Context, target Target, push bool) {
	lo, hi := cmp.Or(fl.f.PollMin, DefaultPollMin), cmp.Or(fl.f.PollMax, DefaultPollMax)
	if push {
		hi = cmp.Or(fl.f.PushPoll, DefaultPushPoll)
	}
	pause := lo
	for ctx.Err() == nil && !fl.ended.Load() {
		client, _, err := fl.f.Binding.Client(ctx, fl.agentID)
		changed := false
		if err != nil {
			fl.logAgent("client", "HTTP agent unreachable for following", err)
		} else {
			changed = fl.getTask(ctx, client, target)
		}
		if changed {
			pause = lo
		} else {
			pause = min(2*pause, hi)
		}
		select {
		case <-ctx.Done():
		case <-fl.poke:
			pause = lo
		case <-time.After(pause):
		}
	}
}

// getTask reads the task (within followCallTimeout) and publishes its snapshot
// when it differs from the last one published; it reports whether it did.
func (fl *following) getTask(ctx context.Context, client *a2aclient.Client, target Target) bool {
	cctx, cancel := context.WithTimeout(ctx, followCallTimeout)
	t, err := client.GetTask(cctx, &a2a.GetTaskRequest{ID: a2a.TaskID(fl.agentTask), Tenant: target.Tenant, HistoryLength: new(0)})
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			fl.logAgent("get", "GetTask failed", err)
		}
		return false
	case t == nil:
		fl.logAgent("get", "GetTask answered no task", ownWords("empty result"))
		return false
	case t.ID != a2a.TaskID(fl.agentTask):
		fl.logAgent("foreign", "agent returned another task than asked for: ignored", ownWords("another task id"))
		return false
	}
	return fl.publishSnapshot(ctx, t)
}

// publishSnapshot publishes what task t shows (snapshotOf), unless it is
// the snapshot this follower published last; it reports whether it did.
func (fl *following) publishSnapshot(ctx context.Context, t *a2a.Task) bool {
	obs, err := snapshotOf(t)
	if err != nil {
		fl.logAgent("encode", "agent's task not encodable as A2A 1.0: ignored", err)
		return false
	}
	var all []byte
	for _, o := range obs {
		all = append(append(all, o.msgID...), ' ')
	}
	fl.mu.Lock()
	same := bytes.Equal(all, fl.lastSnap)
	fl.mu.Unlock()
	if same {
		return false
	}
	for _, o := range obs {
		if !fl.publish(ctx, o) {
			return false
		}
	}
	fl.mu.Lock()
	fl.lastSnap = all
	fl.mu.Unlock()
	return true
}

// publishEvent publishes what one stream event shows; it returns false
// once ctx ended.
func (fl *following) publishEvent(ctx context.Context, ev a2a.Event, parts map[a2a.ArtifactID]int) bool {
	if id := taskIDOf(ev); id != "" && id != a2a.TaskID(fl.agentTask) {
		fl.logAgent("foreign", "agent sent an event of another task: ignored", ownWords("another task id"))
		return true
	}
	if t, ok := ev.(*a2a.Task); ok {
		clear(parts)
		for _, a := range t.Artifacts {
			if a != nil {
				parts[a.ID] = len(a.Parts)
			}
		}
		fl.publishSnapshot(ctx, t)
		return ctx.Err() == nil
	}
	o, ok, err := itemOf(ev, parts)
	if err != nil || !ok {
		return true
	}
	fl.publish(ctx, o)
	return ctx.Err() == nil
}

// publish publishes o on the agent's events stream, awaiting the
// acknowledgement and retrying (100 ms doubling to 5 s: a full stream
// refuses until the tracker applied its events) until it is stored or
// ctx ends. An event over MaxEventBytes, or one the stream refuses for its
// size, is not published and is logged. It reports whether o was stored.
func (fl *following) publish(ctx context.Context, o observation) bool {
	if fl.ended.Load() {
		// After the end nothing the agent says applies (the tracker would
		// refuse a terminal snapshot's artifacts as coming after the end).
		return true
	}
	if len(o.body) > MaxEventBytes {
		fl.logAgent("too-large", "agent's task change over the event size limit: not applied", ownWords(strconv.Itoa(len(o.body))+" bytes"))
		return false
	}
	// The agent's byte budget: waiting here holds its stream (or its
	// polls, its pushes) back, in TCP.
	if err := fl.f.limiter(fl.agentID).WaitN(ctx, len(o.body)); err != nil {
		return false
	}
	m := &nats.Msg{Subject: natsbind.EventsSubject(fl.agentID, fl.id), Data: o.body, Header: nats.Header{}}
	m.Header.Set(natsbind.HeaderMsgID, o.msgID)
	pause := 100 * time.Millisecond
	for {
		_, err := fl.f.JS.PublishMsg(ctx, m)
		if err == nil {
			break
		}
		if tooLarge(err) {
			fl.logAgent("too-large", "agent's task change refused by its events stream for its size", err)
			return false
		}
		if ctx.Err() != nil {
			return false
		}
		fl.logAgent("publish", "observed change not yet published; retrying", err)
		if !sleepCtx(ctx, pause) {
			return false
		}
		pause = min(2*pause, 5*time.Second)
	}
	if o.terminal {
		fl.ended.Store(true)
	}
	return true
}

// tooLarge reports whether err is the stream or the server refusing a
// message for its size.
func tooLarge(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) ||
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

func (fl *following) logAgent(kind, msg string, err error) {
	fl.logAgentAt(slog.LevelWarn, kind, msg, err)
}

func (fl *following) logAgentAt(level slog.Level, kind, msg string, err error) {
	if ok, held := fl.f.gate.Allow(fl.agentID+"/"+kind, time.Now()); ok {
		fl.f.Log.Log(context.Background(), level, msg, "agent", fl.agentID, "task", fl.id, "err", faultWords(err), "similar_not_logged", held)
	}
}

// sleep waits d or until ctx ends; false if it ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// PublishReply publishes, as events of task id (agent agentID, whose task
// there is agentTask), the Task an agent returned in its SendMessage reply
// (result: a SendMessageResponse, {"task":…}) when it already carries an
// outcome — a terminal or interrupted state: an agent that finished before
// it answered reports its result only there, and its GetTask may not find
// the task any more. Other replies change nothing the follower does not
// see itself. The events' ids are the follower's (ContentID), so the same
// change seen again on a stream applies once. For the broker
// (broker.Service.OnHTTPReply).
func (f *Follower) PublishReply(ctx context.Context, id, agentID, agentTask string, result []byte) {
	var sr a2a.StreamResponse
	if err := json.Unmarshal(result, &sr); err != nil {
		return
	}
	t, ok := sr.Event.(*a2a.Task)
	if !ok || t == nil || (agentTask != "" && t.ID != a2a.TaskID(agentTask)) {
		return
	}
	switch t.Status.State {
	case a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired:
	default:
		if !t.Status.State.Terminal() {
			return
		}
	}
	fl := &following{f: f, id: id, agentID: agentID, agentTask: string(t.ID)}
	fl.publishSnapshot(ctx, t)
}
