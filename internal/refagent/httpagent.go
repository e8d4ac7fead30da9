package refagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/brief"
	ia2a "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
)

// Paths the HTTP agent serves under its base URL: the card at A2A's
// well-known path (A2A 1.0 §8.2), JSON-RPC (§9) and HTTP+JSON (§11).
const (
	HTTPJSONRPCPath = "/a2a/jsonrpc"
	HTTPRESTPath    = "/a2a/rest"
)

// HTTPConfig configures an [HTTPAgent]: the same fraud-review skill as
// [Agent], served as a standard A2A 1.0 agent over HTTP with the official
// Go SDK (a2a-go/v2 a2asrv) instead of a2ad's NATS binding.
type HTTPConfig struct {
	// BaseURL is the agent's URL as its card advertises it
	// (http://127.0.0.1:8080): its interfaces are BaseURL+HTTPJSONRPCPath
	// and BaseURL+HTTPRESTPath. Required.
	BaseURL string
	// Streaming is the card's capabilities.streaming (a2asrv streams
	// either way).
	Streaming bool
	// Misbehave maps a case id to a misbehaviour mode, as [Config] does;
	// [ModeUnresponsive] is for this agent only.
	Misbehave map[string]string
	// SlowFor is how long a [ModeSlow] case stays WORKING; default 3 s.
	SlowFor time.Duration
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// ModeUnresponsive never answers: SendMessage and CancelTask of the case
// hang until the agent stops (an HTTP agent that accepted the connection
// and went silent).
const ModeUnresponsive = "unresponsive"

// ModeCancelHangs works (TASK_STATE_WORKING) and never finishes, and its
// CancelTask hangs until the agent stops: the @a2a-js/sdk agent's
// CancelTask on an interrupted task was measured hanging over 60 s.
const ModeCancelHangs = "cancel-hangs"

// HTTPAgent is the reference fraud-review agent over A2A's HTTP bindings.
type HTTPAgent struct {
	cfg     HTTPConfig
	log     *slog.Logger
	card    *a2a.AgentCard
	handler http.Handler
	stop    chan struct{}
	once    sync.Once

	mu    sync.Mutex
	tasks map[a2a.TaskID]*httpTask
	stats HTTPStats
}

// HTTPStats counts what the agent received.
type HTTPStats struct {
	// Briefs is how many SendMessage requests created a task; ByA2ADTask
	// counts them by the a2ad task id in their metadata (a2ad/taskId), so
	// a test can tell whether one delegation reached the agent twice.
	Briefs     int
	ByA2ADTask map[string]int
	Answers    int
	Cancels    int
	// FormAnswers holds the data parts, as JSON, of the answers to
	// [ModeStructuredQuestion] questions it took, in order.
	FormAnswers [][]byte
}

type httpTask struct {
	ev    evidence
	evErr error
	mode  string
}

// NewHTTP returns the agent; serve [HTTPAgent.Handler] at cfg.BaseURL.
func NewHTTP(cfg HTTPConfig) (*HTTPAgent, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("refagent: HTTPConfig.BaseURL is required")
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	if cfg.SlowFor == 0 {
		cfg.SlowFor = 3 * time.Second
	}
	for c, m := range cfg.Misbehave {
		if !knownMode(m) && !httpMode(m) {
			return nil, fmt.Errorf("refagent: misbehave %s:%s: unknown mode", m, c)
		}
	}
	a := &HTTPAgent{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), tasks: map[a2a.TaskID]*httpTask{},
		stats: HTTPStats{ByA2ADTask: map[string]int{}}}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.card = &a2a.AgentCard{
		Name:        "Fraud Review Agent (HTTP)",
		Description: "Assesses the fraud risk of a customer refund request from the evidence in a2ad's brief and returns a risk level, a recommendation and the reasons behind it.",
		Version:     "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(cfg.BaseURL+HTTPJSONRPCPath, a2a.TransportProtocolJSONRPC),
			a2a.NewAgentInterface(cfg.BaseURL+HTTPRESTPath, a2a.TransportProtocolHTTPJSON),
		},
		Provider:           &a2a.AgentProvider{Org: "a2ad reference agents", URL: "https://github.com/a2ad/a2ad"},
		Capabilities:       a2a.AgentCapabilities{Streaming: cfg.Streaming},
		DefaultInputModes:  []string{"application/json", "text/plain"},
		DefaultOutputModes: []string{"application/json"},
		Skills: []a2a.AgentSkill{{
			ID:          "assess_refund_risk",
			Name:        "Assess refund risk",
			Description: "Scores the fraud risk of one refund request and recommends approve, review or deny, with reasons. When the refund amount is above the brief's manual_review_above_cents evidence, it asks a question (input required) before deciding.",
			Tags:        []string{"fraud", "refunds", "risk"},
			OutputModes: []string{"application/json"},
		}},
	}
	// a2a-go's default store answers ListTasks only for an authenticated
	// user; this agent has no authentication of its own, so every caller
	// is one user, "anonymous", and a2ad can find a task by contextId
	// after a lost reply (docs/http-binding.md §5).
	store := taskstore.NewInMemory(&taskstore.InMemoryStoreConfig{Authenticator: func(ctx context.Context) (string, error) {
		if cc, ok := a2asrv.CallContextFrom(ctx); ok && cc.User != nil && cc.User.Name != "" {
			return cc.User.Name, nil
		}
		return "anonymous", nil
	}})
	h := a2asrv.NewHandler(&httpExecutor{a: a}, a2asrv.WithLogger(a.log), a2asrv.WithTaskStore(store))
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(a.card))
	mux.Handle(HTTPJSONRPCPath, a2asrv.NewJSONRPCHandler(h))
	mux.Handle(HTTPRESTPath+"/", http.StripPrefix(HTTPRESTPath, a2asrv.NewRESTHandler(h)))
	a.handler = mux
	return a, nil
}

// Handler serves the card, JSON-RPC and HTTP+JSON.
func (a *HTTPAgent) Handler() http.Handler { return a.handler }

// Card is the agent's card as it serves it.
func (a *HTTPAgent) Card() *a2a.AgentCard { return a.card }

// Stop ends every task's work (a hanging request returns).
func (a *HTTPAgent) Stop() { a.once.Do(func() { close(a.stop) }) }

// Stats returns a copy of the counters.
func (a *HTTPAgent) Stats() HTTPStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.ByA2ADTask = make(map[string]int, len(a.stats.ByA2ADTask))
	for k, v := range a.stats.ByA2ADTask {
		s.ByA2ADTask[k] = v
	}
	s.FormAnswers = nil
	for _, b := range a.stats.FormAnswers {
		s.FormAnswers = append(s.FormAnswers, append([]byte(nil), b...))
	}
	return s
}

type httpExecutor struct{ a *HTTPAgent }

// Execute runs a new task (the brief) or resumes an input-required one
// (the answer), yielding its events as a2asrv expects: the submitted task
// first, then status and artifact updates; execution ends at
// input-required or a terminal state.
func (e *httpExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	a := e.a
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask != nil {
			a.resume(ctx, ec, yield)
			return
		}
		b, err := briefOf(ec.Message)
		if err != nil {
			yield(nil, fmt.Errorf("%w: the message carries no valid a2ad brief", a2a.ErrInvalidParams))
			return
		}
		ev, evErr := parseEvidence(b.Evidence)
		t := &httpTask{ev: ev, evErr: evErr}
		if evErr == nil {
			t.mode = a.cfg.Misbehave[ev.CaseID]
		}
		a2adTask, _ := ec.Message.Metadata[MetaTaskID].(string)
		a.mu.Lock()
		a.tasks[ec.TaskID] = t
		a.stats.Briefs++
		a.stats.ByA2ADTask[a2adTask]++
		a.mu.Unlock()
		a.log.Info("task created", "task", ec.TaskID, "a2adTask", a2adTask, "case", ev.CaseID, "misbehave", t.mode)
		if t.mode == ModeUnresponsive {
			<-a.stop
			return
		}
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
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
			select {
			case <-a.stop:
			case <-ctx.Done():
			}
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
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
		a.finish(ctx, ec, t, nil, yield)
	}
}

// resume takes the answer to an input-required task and finishes it.
func (a *HTTPAgent) resume(ctx context.Context, ec *a2asrv.ExecutorContext, yield func(a2a.Event, error) bool) {
	a.mu.Lock()
	t := a.tasks[ec.TaskID]
	a.stats.Answers++
	a.mu.Unlock()
	if t == nil || ec.StoredTask.Status.State != a2a.TaskStateInputRequired {
		yield(nil, fmt.Errorf("%w: the task is not waiting for an answer", a2a.ErrUnsupportedOperation))
		return
	}
	var verified bool
	if t.mode == ModeStructuredQuestion {
		var parts []ia2a.Part
		for _, p := range ec.Message.Parts {
			if d, ok := p.Content.(a2a.Data); ok {
				b, err := json.Marshal(d.Value)
				if err == nil {
					parts = append(parts, ia2a.Part{Data: b})
				}
			}
		}
		v, data, err := parseApproval(parts)
		if err != nil {
			yield(nil, fmt.Errorf("%w: %s", a2a.ErrInvalidParams, err))
			return
		}
		verified = v
		a.mu.Lock()
		a.stats.FormAnswers = append(a.stats.FormAnswers, data)
		a.mu.Unlock()
	} else {
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
	a.log.Info("answer received", "task", ec.TaskID, "verified", verified)
	if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
		return
	}
	a.finish(ctx, ec, t, &verified, yield)
}

// finish yields the assessment (a schema-violating one in
// ModeInvalidArtifact) and COMPLETED.
func (a *HTTPAgent) finish(ctx context.Context, ec *a2asrv.ExecutorContext, t *httpTask, verified *bool, yield func(a2a.Event, error) bool) {
	if t.mode == ModeSlow {
		select {
		case <-time.After(a.cfg.SlowFor):
		case <-a.stop:
			return
		case <-ctx.Done():
			return
		}
	}
	var data any = assess(t.ev, verified)
	if t.mode == ModeInvalidArtifact {
		data = invalidAssessment(t.ev)
	}
	// Through JSON: a2a-go's data parts hold a JSON object as a map.
	raw, _ := json.Marshal(data)
	var obj map[string]any
	_ = json.Unmarshal(raw, &obj)
	art := a2a.NewArtifactEvent(ec, a2a.NewDataPart(obj))
	art.Artifact.ID, art.Artifact.Name = artifactID, artifactName
	art.LastChunk = true
	if !yield(art, nil) {
		return
	}
	if yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil) {
		a.log.Info("task completed", "task", ec.TaskID, "case", t.ev.CaseID)
	}
}

// Cancel cancels the task (a ModeUnresponsive one hangs instead).
func (e *httpExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	a := e.a
	return func(yield func(a2a.Event, error) bool) {
		a.mu.Lock()
		t := a.tasks[ec.TaskID]
		a.stats.Cancels++
		a.mu.Unlock()
		if t != nil && (t.mode == ModeUnresponsive || t.mode == ModeCancelHangs) {
			<-a.stop
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// briefOf reads a2ad's brief from an a2a-go message: through its A2A 1.0
// JSON, which the brief package reads.
func briefOf(m *a2a.Message) (*brief.Brief, error) {
	if m == nil {
		return nil, errors.New("no message")
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var im ia2a.Message
	if err := json.Unmarshal(raw, &im); err != nil {
		return nil, err
	}
	return brief.FromMessage(im)
}

func agentText(ec *a2asrv.ExecutorContext, text string) *a2a.Message {
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(text))
}
