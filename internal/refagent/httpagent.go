package refagent

import (
	"context"
	"encoding/json"
	"errors"
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
	exec    *Executor

	mu    sync.Mutex
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

// NewHTTP returns the agent; serve [HTTPAgent.Handler] at cfg.BaseURL.
func NewHTTP(cfg HTTPConfig) (*HTTPAgent, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("refagent: HTTPConfig.BaseURL is required")
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	a := &HTTPAgent{cfg: cfg, log: cfg.Logger, stats: HTTPStats{ByA2ADTask: map[string]int{}}}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	x, err := newExecutor(cfg.Misbehave, true, cfg.SlowFor, a.log, nil, executorHooks{
		brief: func(a2adTask string, _ []byte) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.stats.Briefs++
			a.stats.ByA2ADTask[a2adTask]++
		},
		answer: func(form []byte) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.stats.Answers++
			if form != nil {
				a.stats.FormAnswers = append(a.stats.FormAnswers, form)
			}
		},
		cancel: func(bool) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.stats.Cancels++
		},
	})
	if err != nil {
		return nil, err
	}
	a.exec = x
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
	h := x.Handler(a2asrv.WithLogger(a.log), a2asrv.WithTaskStore(store))
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
func (a *HTTPAgent) Stop() { a.exec.Stop() }

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
