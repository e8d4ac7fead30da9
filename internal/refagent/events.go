package refagent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publish retry: backoff from publishBackoffMin doubling to publishBackoffMax,
// each attempt waiting up to publishAttemptTimeout for the stream's ack.
const (
	publishBackoffMin     = 50 * time.Millisecond
	publishBackoffMax     = 2 * time.Second
	publishAttemptTimeout = 2 * time.Second
)

// artifact identity of the risk assessment.
const (
	artifactID   = "risk-assessment"
	artifactName = "risk_assessment"
)

// spawn runs the task's work in a goroutine the agent waits for on Stop.
func (a *Agent) spawn(t *task) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer t.cancel() // releases the task's context; a canceled run is already over
		a.run(t)
	}()
}

// run does a task's work and publishes its events, in order, each after
// the previous one was acknowledged. It returns early when the task is
// canceled or the agent stops.
func (a *Agent) run(t *task) {
	ev := eventStream{a: a, t: t}
	if t.evErr != nil {
		st, ok := a.advance(t, a2a.TaskStateRejected, t.agentMessage(t.evErr.Error()))
		if ok {
			ev.status(st)
		}
		return
	}
	if t.mode == "" && !t.ev.needsReview() && a.reportAtOnce.Load() {
		a.reportOutcome(t, &ev)
		return
	}
	st, ok := a.advance(t, a2a.TaskStateWorking, nil)
	if !ok || !ev.status(st) {
		return
	}
	if t.mode == ModeAuthRequired {
		msg := fmt.Sprintf("Sign in to fraud-review at https://fraud-review.example/authorize to release case %s.", t.ev.CaseID)
		st, ok := a.advance(t, a2a.TaskStateAuthRequired, t.agentMessage(msg))
		if !ok || !ev.status(st) {
			return
		}
		select {
		case <-time.After(time.Second):
		case <-t.ctx.Done():
			return
		}
		st, ok = a.advance(t, a2a.TaskStateWorking, nil)
		if !ok || !ev.status(st) {
			return
		}
	}
	var verified *bool
	if t.ev.needsReview() || asksForm(t.mode) {
		var msg *a2a.Message
		switch t.mode {
		case ModeStructuredQuestion:
			msg = t.agentMessage(t.ev.formQuestion())
			msg.Parts = append(msg.Parts, a2a.Part{Data: json.RawMessage(ApprovalForm), MediaType: "application/schema+json"})
		case ModeUnformableQuestion:
			msg = t.agentMessage(t.ev.question())
			msg.Parts = append(msg.Parts, a2a.Part{Data: json.RawMessage(NestedForm), MediaType: "application/schema+json"})
		default:
			msg = t.agentMessage(t.ev.question())
		}
		st, ok := a.advance(t, a2a.TaskStateInputRequired, msg)
		if !ok || !ev.status(st) {
			return
		}
		var v bool
		select {
		case v = <-t.answer:
		case <-t.ctx.Done():
			return
		}
		verified = &v
		// The follow-up's reply already carried WORKING; the event records it.
		st, ok = a.advance(t, a2a.TaskStateWorking, nil)
		if !ok || !ev.status(st) {
			return
		}
	}

	if t.mode == ModeSlow {
		select {
		case <-time.After(a.slowFor):
		case <-t.ctx.Done():
			return
		}
	}
	var data any = assess(t.ev, verified)
	if t.mode == ModeInvalidArtifact {
		data = invalidAssessment(t.ev)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		a.log.Error("assessment not encodable", "task", t.id, "err", err)
		return
	}
	art := a2a.Artifact{ArtifactID: artifactID, Name: artifactName, Parts: []a2a.Part{a2a.DataPart(raw)}}
	st, ok = a.complete(t, art)
	if !ok {
		return
	}
	if !ev.misbehaveArtifact(art) || !ev.status(st) {
		return
	}
	a.log.Info("task completed", "task", t.id, "case", t.ev.CaseID)
	if t.mode == ModeIllegalTransition {
		ev.status(a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: now()})
	}
}

// reportOutcome completes a task that needs nothing more and publishes it
// as one Task event: COMPLETED, with the assessment as its artifact.
func (a *Agent) reportOutcome(t *task, ev *eventStream) {
	raw, err := json.Marshal(assess(t.ev, nil))
	if err != nil {
		a.log.Error("assessment not encodable", "task", t.id, "err", err)
		return
	}
	art := a2a.Artifact{ArtifactID: artifactID, Name: artifactName, Parts: []a2a.Part{a2a.DataPart(raw)}}
	st, ok := a.complete(t, art)
	if !ok {
		return
	}
	if ev.publish(a2a.StreamResponse{Task: &a2a.Task{ID: t.id, ContextID: t.contextID, Status: st, Artifacts: []a2a.Artifact{art}}}) {
		a.log.Info("task completed", "task", t.id, "case", t.ev.CaseID)
	}
}

// advance moves the task to state unless it is already terminal (canceled
// meanwhile) and returns the new status.
func (a *Agent) advance(t *task, state a2a.TaskState, msg *a2a.Message) (a2a.TaskStatus, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if terminal(t.status.State) {
		return a2a.TaskStatus{}, false
	}
	t.status = a2a.TaskStatus{State: state, Message: msg, Timestamp: now()}
	return t.status, true
}

// complete records the artifact and COMPLETED in one step, so that a
// CancelTask sees either a cancelable task or a completed one.
func (a *Agent) complete(t *task, art a2a.Artifact) (a2a.TaskStatus, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if terminal(t.status.State) {
		return a2a.TaskStatus{}, false
	}
	t.artifacts = append(t.artifacts, art)
	t.status = a2a.TaskStatus{State: a2a.TaskStateCompleted, Timestamp: now()}
	return t.status, true
}

// agentMessage is a status message from the agent with one text part.
func (t *task) agentMessage(text string) *a2a.Message {
	return &a2a.Message{
		MessageID: newID("msg-"),
		ContextID: t.contextID,
		TaskID:    t.id,
		Role:      a2a.RoleAgent,
		Parts:     []a2a.Part{a2a.TextPart(text)},
	}
}

// eventStream publishes one task's events; seq numbers them for
// Nats-Msg-Id. Only the task's run goroutine uses it.
type eventStream struct {
	a   *Agent
	t   *task
	seq int
}

func (s *eventStream) status(st a2a.TaskStatus) bool {
	return s.publish(a2a.StreamResponse{StatusUpdate: &a2a.TaskStatusUpdateEvent{
		TaskID: s.t.id, ContextID: s.t.contextID, Status: st,
	}})
}

func (s *eventStream) artifact(art a2a.Artifact) bool {
	return s.publish(a2a.StreamResponse{ArtifactUpdate: &a2a.TaskArtifactUpdateEvent{
		TaskID: s.t.id, ContextID: s.t.contextID, Artifact: art, LastChunk: true,
	}})
}

// misbehaveArtifact publishes art as the task's mode says: whole, with
// lastChunk; for ModeReplaceAfterLast followed by a whole replacement; for
// ModeEndlessChunks as a first chunk and EndlessChunks appended ones.
func (s *eventStream) misbehaveArtifact(art a2a.Artifact) bool {
	switch s.t.mode {
	case ModeReplaceAfterLast:
		swapped := assessment{CaseID: s.t.ev.CaseID, RiskLevel: "low", Score: 0,
			Reasons: []string{"misbehaviour: replace-after-last"}, PolicyVersion: PolicyVersion}
		raw, _ := json.Marshal(swapped)
		replacement := a2a.Artifact{ArtifactID: art.ArtifactID, Name: art.Name, Parts: []a2a.Part{a2a.DataPart(raw)}}
		return s.artifact(art) && s.publish(a2a.StreamResponse{ArtifactUpdate: &a2a.TaskArtifactUpdateEvent{
			TaskID: s.t.id, ContextID: s.t.contextID, Artifact: replacement,
		}})
	case ModeEndlessChunks:
		chunk := func(appendTo bool) bool {
			return s.publish(a2a.StreamResponse{ArtifactUpdate: &a2a.TaskArtifactUpdateEvent{
				TaskID: s.t.id, ContextID: s.t.contextID, Artifact: art, Append: appendTo,
			}})
		}
		if !chunk(false) {
			return false
		}
		for range EndlessChunks {
			if !chunk(true) {
				return false
			}
		}
		return true
	}
	return s.artifact(art)
}

// publish sends one stream item to the task's events subject with
// JetStream acknowledgement, retrying with backoff until acknowledged; it
// gives up (false) only when the task is canceled or the agent stops. The
// Nats-Msg-Id "<a2adTaskId>.<seq>" is the same on every retry, so the
// stream deduplicates a publish whose ack was lost.
func (s *eventStream) publish(item a2a.StreamResponse) bool {
	s.seq++
	body, err := json.Marshal(item)
	if err != nil {
		s.a.log.Error("event not encodable", "task", s.t.id, "err", err)
		return false
	}
	msgID := fmt.Sprintf("%s.%d", s.t.a2adTaskID, s.seq)
	ctx := s.t.ctx
	wait := publishBackoffMin
	for attempt := 1; ; attempt++ {
		m := nats.NewMsg(s.t.eventsSubject)
		m.Data = body
		m.Header.Set(natsbind.HeaderMsgID, msgID)
		m.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
		if s.t.traceparent != "" {
			m.Header.Set(natsbind.HeaderTraceparent, s.t.traceparent)
		}
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		_, err := s.a.js.PublishMsg(actx, m, jetstream.WithRetryAttempts(0))
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		lvl := slog.LevelDebug
		if attempt == 1 || attempt%20 == 0 {
			lvl = slog.LevelWarn
		}
		s.a.log.Log(ctx, lvl, "event not acknowledged, retrying", "task", s.t.id, "msgId", msgID, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, publishBackoffMax)
	}
}
