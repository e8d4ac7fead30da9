package httpbind

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	task     bool // a {"task":…} snapshot
	terminal bool // it reports a terminal state
}

// EventID is the Nats-Msg-Id of an observed stream item: "h1-" and the
// hex SHA-256 of its bytes as a2a-go marshals them, and for an artifact
// chunk of its position (the number of the artifact's parts before it),
// so the same observation has the same id whoever observes it and two
// identical chunks stay two. 67 bytes of [a-z0-9-].
func EventID(item []byte, chunkAt int) string {
	h := sha256.New()
	h.Write(item)
	if chunkAt >= 0 {
		h.Write([]byte("\x00chunk@" + strconv.Itoa(chunkAt)))
	}
	return EventIDPrefix + hex.EncodeToString(h.Sum(nil))
}

// snapshotOf is the observation of task t: history stripped (the tracker
// does not need it).
func snapshotOf(t *a2a.Task) (observation, error) {
	c := *t
	c.History = nil
	b, err := json.Marshal(a2a.StreamResponse{Event: &c})
	if err != nil {
		return observation{}, err
	}
	return observation{body: b, msgID: EventID(b, -1), task: true, terminal: t.Status.State.Terminal()}, nil
}

// itemOf is the observation of a status or artifact update; parts counts,
// per artifact id, the parts seen so far in this subscription (updated).
// ok is false for an item that carries no task change (a message).
func itemOf(ev a2a.Event, parts map[a2a.ArtifactID]int) (o observation, ok bool, err error) {
	chunkAt := -1
	switch e := ev.(type) {
	case *a2a.Task:
		o, err = snapshotOf(e)
		if err == nil {
			clear(parts)
			for _, a := range e.Artifacts {
				if a != nil {
					parts[a.ID] = len(a.Parts)
				}
			}
		}
		return o, err == nil, err
	case *a2a.TaskStatusUpdateEvent:
	case *a2a.TaskArtifactUpdateEvent:
		if e.Artifact == nil {
			return observation{}, false, nil
		}
		if e.Append {
			chunkAt = parts[e.Artifact.ID]
			parts[e.Artifact.ID] += len(e.Artifact.Parts)
		} else {
			chunkAt = 0
			parts[e.Artifact.ID] = len(e.Artifact.Parts)
		}
	default:
		return observation{}, false, nil
	}
	b, err := json.Marshal(a2a.StreamResponse{Event: ev})
	if err != nil {
		return observation{}, false, err
	}
	return observation{body: b, msgID: EventID(b, chunkAt), terminal: terminalOf(ev)}, true, nil
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
				if ctx.Err() == nil {
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
		fl.logAgent("get", "GetTask answered no task", errors.New("empty result"))
		return false
	case t.ID != a2a.TaskID(fl.agentTask):
		fl.logAgent("foreign", "agent returned another task than asked for: ignored", errors.New("task id "+strconv.Quote(clipAgentText(string(t.ID)))))
		return false
	}
	o, err := snapshotOf(t)
	if err != nil {
		fl.logAgent("encode", "agent's task not encodable as A2A 1.0: ignored", err)
		return false
	}
	fl.mu.Lock()
	last := fl.lastSnap
	fl.mu.Unlock()
	if bytes.Equal(o.body, last) {
		return false
	}
	return fl.publish(ctx, o)
}

// publishEvent publishes what one stream event shows; it returns false
// once ctx ended.
func (fl *following) publishEvent(ctx context.Context, ev a2a.Event, parts map[a2a.ArtifactID]int) bool {
	if id := taskIDOf(ev); id != "" && id != a2a.TaskID(fl.agentTask) {
		fl.logAgent("foreign", "agent sent an event of another task: ignored", errors.New("task id "+strconv.Quote(clipAgentText(string(id)))))
		return true
	}
	o, ok, err := itemOf(ev, parts)
	if err != nil || !ok {
		return true
	}
	if o.task {
		fl.mu.Lock()
		same := bytes.Equal(o.body, fl.lastSnap)
		fl.mu.Unlock()
		if same {
			return true
		}
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
		fl.logAgent("too-large", "agent's task change over the event size limit: not applied", errors.New(strconv.Itoa(len(o.body))+" bytes"))
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
	if o.task {
		fl.mu.Lock()
		fl.lastSnap = o.body
		fl.mu.Unlock()
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
	if ok, held := fl.f.gate.Allow(fl.agentID+"/"+kind, time.Now()); ok {
		fl.f.Log.Warn(msg, "agent", fl.agentID, "task", fl.id, "err", err, "similar_not_logged", held)
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

// clip shortens an agent-chosen string for a log line.
func clipAgentText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
