package refagent

import (
	"context"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	ia2a "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// Executor is the fraud-review skill as one a2a-go/v2 executor, the same
// for both bindings: a2asrv serves it over HTTP ([HTTPAgent]) and
// natsagent over NATS ([Agent]). The modes a2a-go's task manager refuses
// (an event after a terminal state: [ModeIllegalTransition]) are added by
// [Executor.Handler]'s decorator of a2asrv's handler.
//
// Execute yields, for a new task (a2ad's brief in the message): the
// SUBMITTED task; REJECTED when the evidence lacks case_id or
// amount_cents; else WORKING, AUTH_REQUIRED then WORKING again
// ([ModeAuthRequired]), INPUT_REQUIRED with the question when the amount
// needs review or the mode asks a form (execution ends there; the answer
// resumes it: WORKING), the risk_assessment artifact and COMPLETED. With
// report-at-once and nothing to ask, it yields one Task, COMPLETED with the
// artifact.
type Executor struct {
	misbehave    map[string]string
	slowFor      time.Duration
	log          *slog.Logger
	stop         chan struct{}
	stopOnce     sync.Once
	reportAtOnce func() bool
	hooks        executorHooks

	mu    sync.Mutex
	tasks map[a2a.TaskID]*execTask
	order []a2a.TaskID
}

// executorHooks tell the agent that serves the executor what it received
// (its Stats); a nil hook is skipped.
type executorHooks struct {
	brief  func(a2adTask string, brief []byte)
	answer func(form []byte)
	cancel func(known bool)
}

type execTask struct {
	ev    evidence
	evErr error
	mode  string
}

// newExecutor checks the modes (HTTP-only modes allowed when httpModes).
func newExecutor(misbehave map[string]string, httpModes bool, slowFor time.Duration, log *slog.Logger,
	reportAtOnce func() bool, hooks executorHooks) (*Executor, error) {
	mis := make(map[string]string, len(misbehave))
	for c, m := range misbehave {
		if !knownMode(m) && !(httpModes && httpMode(m)) {
			return nil, fmt.Errorf("refagent: case %q: unknown misbehaviour mode %q", c, m)
		}
		mis[c] = m
	}
	if slowFor <= 0 {
		slowFor = 3 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reportAtOnce == nil {
		reportAtOnce = func() bool { return false }
	}
	return &Executor{misbehave: mis, slowFor: slowFor, log: log, stop: make(chan struct{}),
		reportAtOnce: reportAtOnce, hooks: hooks, tasks: map[a2a.TaskID]*execTask{}}, nil
}

// Stop ends every task's waiting (a hanging request returns). Idempotent.
func (x *Executor) Stop() { x.stopOnce.Do(func() { close(x.stop) }) }

func (x *Executor) task(id a2a.TaskID) *execTask {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.tasks[id]
}

// remember keeps the task's mode for its follow-ups, the oldest forgotten
// beyond maxRemembered.
func (x *Executor) remember(id a2a.TaskID, t *execTask) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tasks[id] = t
	x.order = append(x.order, id)
	for len(x.order) > maxRemembered {
		delete(x.tasks, x.order[0])
		x.order = x.order[1:]
	}
}

// Execute runs a new task (the brief) or resumes an input-required one (the
// answer); see [Executor].
func (x *Executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask != nil {
			x.resume(ctx, ec, yield)
			return
		}
		b, err := briefOf(ec.Message)
		if err != nil {
			yield(nil, fmt.Errorf("%w: the message carries no valid a2ad brief: %s", a2a.ErrInvalidParams, truncate(err.Error(), 200)))
			return
		}
		ev, evErr := parseEvidence(b.Evidence)
		t := &execTask{ev: ev, evErr: evErr}
		if evErr == nil {
			t.mode = x.misbehave[ev.CaseID]
		}
		a2adTask, _ := ec.Message.Metadata[MetaTaskID].(string)
		x.remember(ec.TaskID, t)
		if x.hooks.brief != nil {
			x.hooks.brief(a2adTask, b.Bytes())
		}
		x.log.Info("task created", "task", ec.TaskID, "a2adTask", a2adTask, "case", ev.CaseID, "misbehave", t.mode)
		if t.mode == ModeUnresponsive {
			<-x.stop
			return
		}
		task := a2a.NewSubmittedTask(ec, ec.Message)
		task.History = nil
		if !yield(task, nil) {
			return
		}
		if evErr == nil && t.mode == "" && !ev.needsReview() && x.reportAtOnce() {
			// The outcome in one event: the task, COMPLETED with the assessment.
			art, err := x.artifact(ec, t, nil)
			if err != nil {
				yield(nil, err)
				return
			}
			done := *task
			done.Status = a2a.TaskStatus{State: a2a.TaskStateCompleted, Timestamp: ptrNow()}
			done.Artifacts = []*a2a.Artifact{art.Artifact}
			if yield(&done, nil) {
				x.log.Info("task completed", "task", ec.TaskID, "case", ev.CaseID)
			}
			return
		}
		if evErr != nil {
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateRejected, agentText(ec, evErr.Error())), nil)
			return
		}
		if t.mode == ModeCancelHangs {
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil)
		}
		if t.mode == ModeSilent || t.mode == ModeCancelHangs {
			x.wait(ctx, 0)
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		if t.mode == ModeAuthRequired {
			msg := fmt.Sprintf("Sign in to fraud-review at https://fraud-review.example/authorize to release case %s.", ev.CaseID)
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateAuthRequired, agentText(ec, msg)), nil) || !x.wait(ctx, time.Second) ||
				!yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
				return
			}
		}
		if ev.needsReview() || asksForm(t.mode) {
			msg := agentText(ec, ev.question())
			form := ""
			switch t.mode {
			case ModeStructuredQuestion:
				msg, form = agentText(ec, ev.formQuestion()), ApprovalForm
			case ModeUnformableQuestion:
				form = NestedForm
			}
			if form != "" {
				var schema any
				_ = json.Unmarshal([]byte(form), &schema) // a constant
				msg.Parts = append(msg.Parts, &a2a.Part{Content: a2a.Data{Value: schema}, MediaType: "application/schema+json"})
			}
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, msg), nil)
			return
		}
		x.finish(ctx, ec, t, nil, yield)
	}
}

// wait waits d (0: until the agent stops), and reports whether it waited
// the whole time (false: the task's context ended or the agent stopped).
func (x *Executor) wait(ctx context.Context, d time.Duration) bool {
	var after <-chan time.Time
	if d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		after = tm.C
	}
	select {
	case <-after:
		return true
	case <-x.stop:
	case <-ctx.Done():
	}
	return false
}

// resume takes the answer to an input-required task and finishes it.
func (x *Executor) resume(ctx context.Context, ec *a2asrv.ExecutorContext, yield func(a2a.Event, error) bool) {
	t := x.task(ec.TaskID)
	if t == nil || ec.StoredTask.Status.State != a2a.TaskStateInputRequired {
		if x.hooks.answer != nil {
			x.hooks.answer(nil)
		}
		yield(nil, fmt.Errorf("%w: the task is not waiting for an answer", a2a.ErrUnsupportedOperation))
		return
	}
	var verified bool
	if t.mode == ModeStructuredQuestion {
		var parts []ia2a.Part
		for _, p := range ec.Message.Parts {
			if d, ok := p.Content.(a2a.Data); ok {
				if b, err := json.Marshal(d.Value); err == nil {
					parts = append(parts, ia2a.Part{Data: b})
				}
			}
		}
		v, data, err := parseApproval(parts)
		if err != nil {
			data = nil
		}
		if x.hooks.answer != nil {
			x.hooks.answer(data)
		}
		if err != nil {
			yield(nil, fmt.Errorf("%w: %s", a2a.ErrInvalidParams, err))
			return
		}
		verified = v
	} else {
		if x.hooks.answer != nil {
			x.hooks.answer(nil)
		}
		answer := ""
		for _, p := range ec.Message.Parts {
			answer += p.Text()
		}
		if strings.TrimSpace(answer) == "" {
			yield(nil, fmt.Errorf("%w: the answer must be a non-empty text part", a2a.ErrInvalidParams))
			return
		}
		verified = affirmative(answer)
	}
	x.log.Info("answer received", "task", ec.TaskID, "verified", verified)
	if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
		return
	}
	x.finish(ctx, ec, t, &verified, yield)
}

// artifact is the assessment (a schema-violating one in
// ModeInvalidArtifact) as one whole artifact update.
func (x *Executor) artifact(ec *a2asrv.ExecutorContext, t *execTask, verified *bool) (*a2a.TaskArtifactUpdateEvent, error) {
	var data any = assess(t.ev, verified)
	if t.mode == ModeInvalidArtifact {
		data = invalidAssessment(t.ev)
	}
	art, err := dataArtifact(ec, data)
	if err != nil {
		return nil, err
	}
	art.LastChunk = true
	return art, nil
}

// dataArtifact is the risk_assessment artifact holding data as its one
// application/json data part, the bytes in the assessment's field order.
func dataArtifact(ec *a2asrv.ExecutorContext, data any) (*a2a.TaskArtifactUpdateEvent, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("assessment not encodable: %w", err)
	}
	part := a2a.NewDataPart(jsonObject(raw))
	part.MediaType = "application/json"
	art := a2a.NewArtifactEvent(ec, part)
	art.Artifact.ID, art.Artifact.Name = artifactID, artifactName
	return art, nil
}

// finish yields the assessment as the task's mode says (whole; replaced
// after its last chunk; as endless chunks) and COMPLETED.
func (x *Executor) finish(ctx context.Context, ec *a2asrv.ExecutorContext, t *execTask, verified *bool, yield func(a2a.Event, error) bool) {
	if t.mode == ModeSlow && !x.wait(ctx, x.slowFor) {
		return
	}
	art, err := x.artifact(ec, t, verified)
	if err != nil {
		yield(nil, err)
		return
	}
	switch t.mode {
	case ModeReplaceAfterLast:
		swapped, err := dataArtifact(ec, assessment{CaseID: t.ev.CaseID, RiskLevel: "low", Score: 0,
			Reasons: []string{"misbehaviour: replace-after-last"}, PolicyVersion: PolicyVersion})
		if err != nil || !yield(art, nil) || !yield(swapped, nil) {
			return
		}
	case ModeEndlessChunks:
		art.LastChunk = false
		if !yield(art, nil) {
			return
		}
		for range EndlessChunks {
			chunk := *art
			chunk.Append = true
			if !yield(&chunk, nil) {
				return
			}
		}
	default:
		if !yield(art, nil) {
			return
		}
	}
	if yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil) {
		x.log.Info("task completed", "task", ec.TaskID, "case", t.ev.CaseID)
	}
}

// Cancel cancels the task; a [ModeUnresponsive] or [ModeCancelHangs] one
// hangs until the agent stops instead.
func (x *Executor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		t := x.task(ec.TaskID)
		if x.hooks.cancel != nil {
			x.hooks.cancel(t != nil)
		}
		if t != nil && (t.mode == ModeUnresponsive || t.mode == ModeCancelHangs) {
			x.wait(ctx, 0)
			return
		}
		x.log.Info("task canceled", "task", ec.TaskID)
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// Handler is a2asrv's request handler for the executor, with opts, wrapped
// so that a [ModeIllegalTransition] task's stream (SendStreamingMessage,
// the one natsagent publishes) yields one more status update, WORKING,
// after COMPLETED: a2a-go's task manager refuses it from an executor.
func (x *Executor) Handler(opts ...a2asrv.RequestHandlerOption) a2asrv.RequestHandler {
	return &misbehavingHandler{RequestHandler: a2asrv.NewHandler(x, opts...), x: x}
}

type misbehavingHandler struct {
	a2asrv.RequestHandler
	x *Executor
}

// errOutputModes refuses a request that accepts none of the agent's output
// modes (A2A 1.0 -32005).
func errOutputModes(req *a2a.SendMessageRequest) error {
	if c := req.Config; c != nil && len(c.AcceptedOutputModes) > 0 && !slices.Contains(c.AcceptedOutputModes, "application/json") {
		return fmt.Errorf("%w: this agent produces application/json only", a2a.ErrUnsupportedContentType)
	}
	return nil
}

func (h *misbehavingHandler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	if err := errOutputModes(req); err != nil {
		return nil, err
	}
	return h.RequestHandler.SendMessage(ctx, req)
}

func (h *misbehavingHandler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	if err := errOutputModes(req); err != nil {
		return func(yield func(a2a.Event, error) bool) { yield(nil, err) }
	}
	inner := h.RequestHandler.SendStreamingMessage(ctx, req)
	return func(yield func(a2a.Event, error) bool) {
		for ev, err := range inner {
			if !yield(ev, err) {
				return
			}
			su, ok := ev.(*a2a.TaskStatusUpdateEvent)
			if err != nil || !ok || su.Status.State != a2a.TaskStateCompleted {
				continue
			}
			if t := h.x.task(su.TaskID); t != nil && t.mode == ModeIllegalTransition {
				extra := *su
				extra.Status = a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: ptrNow()}
				if !yield(&extra, nil) {
					return
				}
			}
		}
	}
}

func ptrNow() *time.Time {
	t := time.Now().UTC()
	return &t
}

// jsonObject is a JSON object's encoding kept byte for byte in an a2a-go
// data part (a map would re-encode it with its keys sorted). It is
// registered with gob because a2a-go's task store copies tasks with gob.
type jsonObject []byte

// MarshalJSON returns the bytes.
func (o jsonObject) MarshalJSON() ([]byte, error) { return o, nil }

func init() { gob.Register(jsonObject(nil)) }
