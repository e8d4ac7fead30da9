package natsagent

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// task is what the Server keeps of a task it runs: where its events go and
// how many it published. mu orders the publishes of the task's executions
// (the first and each follow-up's).
type task struct {
	id         string
	contextID  string
	a2adTaskID string
	subject    string

	mu          sync.Mutex
	seq         int
	traceparent string
}

// delivery is one SendMessage messageId being answered or answered. done
// is closed when the first request for it was answered; ok says it
// started (or continued) taskID, or was answered with a message (reply).
type delivery struct {
	done   chan struct{}
	ok     bool
	taskID string
	reply  json.RawMessage
}

// first is the handler's first event (or error) of an execution.
type first struct {
	ev  a2a.Event
	err error
}

var errNoEvent = errors.New("the handler's stream ended without an event")

type a2adMeta struct{ taskID, subject string }

// meta reads and checks a2ad's metadata (docs/nats-binding.md §5.2): the
// events subject must be exactly a2a.events.<own agent id>.<a2ad task id>.
func (s *Server) meta(md map[string]any) (a2adMeta, *wire.RPCError) {
	id, _ := md[MetaTaskID].(string)
	if !natsbind.ValidToken(id) {
		return a2adMeta{}, rpcError(wire.CodeInvalidParams, "message.metadata[%q] must be one NATS token", MetaTaskID)
	}
	want := natsbind.EventsSubject(s.cfg.AgentID, id)
	if subj, _ := md[MetaEventsSubject].(string); subj != want {
		return a2adMeta{}, rpcError(wire.CodeInvalidParams, "message.metadata[%q] must be %q", MetaEventsSubject, want)
	}
	return a2adMeta{taskID: id, subject: want}, nil
}

func (s *Server) sendMessage(params json.RawMessage, traceparent string) (any, func(), *wire.RPCError) {
	var p a2a.SendMessageRequest
	if err := decodeParams(params, &p); err != nil {
		return nil, nil, rpcError(wire.CodeInvalidParams, "SendMessage params: %s", err)
	}
	m := p.Message
	switch {
	case m == nil:
		return nil, nil, rpcError(wire.CodeInvalidParams, "SendMessage params carry no message")
	case m.ID == "":
		return nil, nil, rpcError(wire.CodeInvalidParams, "message.messageId is required")
	case m.Role != a2a.MessageRoleUser:
		return nil, nil, rpcError(wire.CodeInvalidParams, "message.role must be ROLE_USER")
	}
	meta, rerr := s.meta(m.Metadata)
	if rerr != nil {
		return nil, nil, rerr
	}

	// Deduplicate: a messageId already taken gets the task's state; one
	// being answered makes this request wait for that answer.
	var d *delivery
	for d == nil {
		s.mu.Lock()
		prev := s.seen.get(m.ID)
		if prev == nil {
			d = &delivery{done: make(chan struct{})}
			s.seen.put(m.ID, d)
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		select {
		case <-prev.done:
		case <-time.After(firstEventWait):
			return nil, nil, rpcError(wire.CodeInternalError, "message %q is still being answered", bound(m.ID, 64))
		}
		if !prev.ok {
			continue // the first was refused: this one is checked anew
		}
		s.mu.Lock()
		s.stats.Redeliveries++
		s.mu.Unlock()
		if prev.taskID == "" {
			return prev.reply, nil, nil
		}
		snap, err := s.snapshot(prev.taskID)
		if err != nil {
			return nil, nil, handlerError("SendMessage", err)
		}
		return json.RawMessage(mustJSON(a2a.StreamResponse{Event: snap})), nil, nil
	}
	result, after, rerr := s.execute(&p, meta, traceparent, d)
	s.mu.Lock()
	if rerr != nil {
		s.seen.remove(m.ID)
	}
	s.mu.Unlock()
	d.ok = rerr == nil
	close(d.done)
	return result, after, rerr
}

// execute starts the handler on p and waits for its first event, the
// reply. after (run once the reply is sent) lets the execution go on
// publishing.
func (s *Server) execute(p *a2a.SendMessageRequest, meta a2adMeta, traceparent string, d *delivery) (any, func(), *wire.RPCError) {
	var (
		t    *task
		prev *a2a.Task // the task before a follow-up
	)
	if id := string(p.Message.TaskID); id != "" {
		s.mu.Lock()
		t = s.tasks.get(id)
		s.mu.Unlock()
		if t == nil {
			return nil, nil, rpcError(wire.CodeTaskNotFound, "task %q is not held by this replica", bound(id, 64))
		}
		if t.a2adTaskID != meta.taskID {
			return nil, nil, rpcError(wire.CodeInvalidParams, "%s %q does not match the task's %q", MetaTaskID, meta.taskID, t.a2adTaskID)
		}
		snap, err := s.snapshot(id)
		if err != nil {
			return nil, nil, handlerError("SendMessage", err)
		}
		if p.Message.ContextID != "" && p.Message.ContextID != snap.ContextID {
			return nil, nil, rpcError(wire.CodeInvalidParams, "contextId %q does not match the task's %q", bound(p.Message.ContextID, 64), snap.ContextID)
		}
		prev = snap
		if snap.Status.State != a2a.TaskStateInputRequired {
			return nil, nil, rpcError(wire.CodeUnsupportedOperation, "task %s is %s, not TASK_STATE_INPUT_REQUIRED", id, snap.Status.State)
		}
		if traceparent != "" {
			t.mu.Lock()
			t.traceparent = traceparent
			t.mu.Unlock()
		}
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, nil, rpcError(wire.CodeInternalError, "this replica is shutting down")
	}
	if s.live >= s.cfg.MaxLiveTasks {
		s.mu.Unlock()
		return nil, nil, rpcError(wire.CodeInternalError, "this replica runs %d tasks, its MaxLiveTasks", s.cfg.MaxLiveTasks)
	}
	s.live++
	s.execs.Add(1)
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(s.base)
	firstc := make(chan first, 1)
	proceed := make(chan *proceedWith, 1)
	go s.run(ctx, cancel, p, firstc, proceed)

	var f first
	select {
	case f = <-firstc:
	case <-time.After(firstEventWait):
		cancel()
		proceed <- nil
		return nil, nil, rpcError(wire.CodeInternalError, "the agent produced no first event within %s", firstEventWait)
	}
	if f.err != nil {
		proceed <- nil
		return nil, nil, handlerError("SendMessage", f.err)
	}
	var (
		reply      a2a.Event
		publishOne bool
	)
	switch ev := f.ev.(type) {
	case *a2a.Message:
		proceed <- nil
		reply := mustJSON(a2a.StreamResponse{Event: ev})
		d.reply = reply
		return json.RawMessage(reply), nil, nil
	case *a2a.Task:
		reply = stripHistory(ev)
		publishOne = ev.Status.State != a2a.TaskStateSubmitted || len(ev.Artifacts) > 0
	default:
		// The reply is the task as the first event leaves it: the task
		// before (a follow-up's) or a new one, with the event applied.
		// (The handler's GetTask may already be further on.)
		info := f.ev.TaskInfo()
		tk := &a2a.Task{ID: info.TaskID, ContextID: info.ContextID, Status: a2a.TaskStatus{State: a2a.TaskStateWorking}}
		if prev != nil {
			tk = prev
		}
		switch ev := f.ev.(type) {
		case *a2a.TaskStatusUpdateEvent:
			tk.Status = ev.Status
		case *a2a.TaskArtifactUpdateEvent:
			tk.Status = a2a.TaskStatus{State: a2a.TaskStateWorking}
		}
		stamp(&tk.Status)
		reply, publishOne = tk, true
	}
	id := string(f.ev.TaskInfo().TaskID)
	s.mu.Lock()
	if t == nil {
		t = &task{id: id, contextID: string(f.ev.TaskInfo().ContextID), a2adTaskID: meta.taskID, subject: meta.subject, traceparent: traceparent}
		s.tasks.put(id, t)
		s.stats.Tasks++
	}
	s.mu.Unlock()
	d.taskID = id
	s.log.Info("task running", "task", id, "a2adTask", meta.taskID, "followUp", p.Message.TaskID != "")
	after := func() { proceed <- &proceedWith{t: t, first: publishOne} }
	return json.RawMessage(mustJSON(a2a.StreamResponse{Event: reply})), after, nil
}

// proceedWith lets an execution go on once the reply is sent: t is the
// task whose events it publishes, first whether the first event is
// published too.
type proceedWith struct {
	t     *task
	first bool
}

// run consumes the handler's stream: the first event goes to the request
// (firstc); once the reply is sent (proceed), every later one is published
// in order. It ends with the stream, at the first publish given up, or
// when proceed says nil.
func (s *Server) run(ctx context.Context, cancel context.CancelFunc, p *a2a.SendMessageRequest, firstc chan<- first, proceed <-chan *proceedWith) {
	defer func() {
		cancel()
		s.mu.Lock()
		s.live--
		s.mu.Unlock()
		s.execs.Done()
	}()
	var go_ *proceedWith
	n, ended := 0, false
	defer func() {
		// Shutdown gave up on this execution before it ended: say so, so
		// that a2ad ends the task now rather than at its deadline.
		if go_ != nil && !ended && s.base.Err() != nil {
			s.abandon(go_.t)
		}
	}()
	for ev, err := range s.h.SendStreamingMessage(ctx, p) {
		n++
		if n == 1 {
			firstc <- first{ev: ev, err: err}
			if go_ = <-proceed; go_ == nil || err != nil {
				return
			}
			if !go_.first {
				continue
			}
		} else if err != nil {
			s.log.Warn("the handler's stream failed; publishing nothing more", "task", go_.t.id, "err", bound(err.Error(), maxAgentText))
			return
		}
		if !s.publish(ctx, go_.t, ev) {
			return
		}
		ended = ended || endsTask(ev)
	}
	if n == 0 {
		firstc <- first{err: errNoEvent}
		<-proceed
	}
}

// endsTask reports whether ev leaves its task in a terminal state.
func endsTask(ev a2a.Event) bool {
	switch e := ev.(type) {
	case *a2a.Task:
		return e.Status.State.Terminal()
	case *a2a.TaskStatusUpdateEvent:
		return e.Status.State.Terminal()
	}
	return false
}

// abandonWait bounds the publication of the FAILED event of an execution
// Shutdown gave up on.
const abandonWait = 2 * time.Second

// abandon publishes TASK_STATE_FAILED for t, whose execution Shutdown
// cancelled before it ended, waiting at most abandonWait for the ack.
func (s *Server) abandon(t *task) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonWait)
	defer cancel()
	msg := a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("replica "+s.replica+" shut down before the task finished"))
	msg.TaskID, msg.ContextID = a2a.TaskID(t.id), t.contextID
	ev := &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(t.id), ContextID: t.contextID,
		Status: a2a.TaskStatus{State: a2a.TaskStateFailed, Message: msg}}
	if s.publish(ctx, t, ev) {
		s.log.Info("task failed: the replica shut down before it finished", "task", t.id)
	}
}

func (s *Server) snapshot(id string) (*a2a.Task, error) {
	ctx, cancel := context.WithTimeout(s.base, callTimeout)
	defer cancel()
	t, err := s.h.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
	if err != nil {
		return nil, err
	}
	return stripHistory(t), nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": "natsagent: not encodable: " + bound(err.Error(), 200)})
	}
	return b
}
