// Package refagent is the reference remote agent of the A2A-over-NATS binding
// urn:a2ad:binding:nats:v1 (docs/nats-binding.md): a deterministic
// fraud-review agent that tests and `a2ad demo` run in-process and that
// cmd/fraud-review-agent runs as a process.
//
// The agent is one a2a-go/v2 executor, [Executor], served over NATS by the
// public package natsagent ([Agent]: SendMessage, GetTask and CancelTask on
// a2a.agent.<agentId>.rpc, events published with JetStream acknowledgement,
// the card registered on a2a.registry.register) and over HTTP by a2asrv
// ([HTTPAgent]): the same behaviour on both bindings.
//
// Behaviour, from the brief's evidence (case_id, amount_cents, optional
// manual_review_above_cents, customer_tenure_days, prior_refunds_90d):
// WORKING; if amount_cents > manual_review_above_cents, INPUT_REQUIRED with
// a yes/no question about the customer's identity, then WORKING on the
// answer; then a risk_assessment artifact and COMPLETED. Evidence without
// case_id or amount_cents is REJECTED. Per-case misbehaviour
// ([ModeInvalidArtifact], [ModeSilent], [ModeIllegalTransition], [ModeSlow]) lets tests
// of a2ad exercise its defences against a faulty agent.
package refagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/natsagent"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/nats-io/nats.go"
)

// QueueGroup is the queue group the agent's RPC subscription joins, so that
// several replicas of one agent share its requests.
const QueueGroup = "fraud-review-agent"

// Metadata keys a2ad puts in the SendMessage message's metadata.
const (
	MetaTaskID        = "a2ad/taskId"
	MetaEventsSubject = "a2ad/eventsSubject"
)

// maxRemembered bounds the message ids remembered for idempotency and the
// tasks kept for GetTask/CancelTask (oldest terminal tasks go first).
const maxRemembered = 100_000

// maxReceived bounds the briefs kept in [Stats.Received].
const maxReceived = 1000

// Config configures an [Agent].
type Config struct {
	// AgentID is the agent's id on the binding (one NATS token; in
	// production the sub of its credential). Required.
	AgentID string
	// Card is the agent's A2A card, sent verbatim (surrounding whitespace
	// trimmed) in the registration request. Required; must be a JSON object.
	Card []byte
	// Misbehave maps a case id (the brief's evidence.case_id) to a
	// misbehaviour mode; see [ParseMisbehave]. Other cases behave normally.
	Misbehave map[string]string
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
	// SlowFor is how long a [ModeSlow] case stays WORKING; default 3 s.
	SlowFor time.Duration
	// Credential is the agent credential a2ad minted for AgentID (`a2ad
	// agents credential ID`), sent with the registration as
	// Authorization: Bearer. Empty: the registration carries none (a2ad
	// refuses it).
	Credential string
	// ReportAtOnce makes a task that needs nothing more from its requester
	// (no question, no sign-in, no misbehaviour mode) report its outcome in
	// one event: a Task (A2A 1.0 StreamResponse.task) with state
	// TASK_STATE_COMPLETED and the risk assessment as its artifact, as an
	// agent that answers at once would. Off (the default), it reports
	// TASK_STATE_WORKING, then the artifact, then TASK_STATE_COMPLETED,
	// each after JetStream acknowledged the previous one. See also
	// [Agent.SetReportAtOnce].
	ReportAtOnce bool
}

// ConnectOptions are the NATS options an agent connection needs on a2ad's
// embedded server (docs/nats-binding.md §10): the credential as the CONNECT
// token and the inbox prefix its permissions allow, _INBOX_<agentID>.
func ConnectOptions(agentID, credential string) []nats.Option {
	return []nats.Option{nats.Token(credential), nats.CustomInboxPrefix("_INBOX_" + agentID)}
}

// Stats is what the agent has received so far.
type Stats struct {
	// BriefsReceived counts SendMessage requests that created a task.
	BriefsReceived int
	// Received holds the exact data-part bytes of each of those briefs, in
	// order of arrival: the last 1000, so that a long-running agent does not
	// grow without bound.
	Received [][]byte
	// Redeliveries counts SendMessage requests whose messageId was already
	// processed: answered with the task's current state, nothing redone.
	Redeliveries int
	// CancelsReceived counts CancelTask requests for a task the agent knows.
	CancelsReceived int
	// FormAnswers holds the exact data-part bytes of each answer to a
	// [ModeStructuredQuestion] question it took, in order (the last 1000).
	FormAnswers [][]byte
}

// Agent is the reference fraud-review agent on the NATS binding: its
// [Executor] served by a natsagent.Server. Build it with [New], run it with
// [Agent.Start], stop it with [Agent.Stop]. It is safe for concurrent use.
type Agent struct {
	srv  *natsagent.Server
	exec *Executor
	log  *slog.Logger

	mu       sync.Mutex
	stats    Stats
	stopOnce sync.Once

	reportAtOnce atomic.Bool
}

// New returns an agent that will serve on nc. It checks cfg: AgentID must be
// a valid NATS token, Card a JSON object, Misbehave modes known.
func New(nc *nats.Conn, cfg Config) (*Agent, error) {
	if nc == nil {
		return nil, errors.New("refagent: nil NATS connection")
	}
	if !natsbind.ValidToken(cfg.AgentID) {
		return nil, fmt.Errorf("refagent: agent id %q is not one NATS token of [A-Za-z0-9_-]", cfg.AgentID)
	}
	card := bytes.TrimSpace(cfg.Card)
	if len(card) == 0 || card[0] != '{' || !json.Valid(card) {
		return nil, errors.New("refagent: card is not a JSON object")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{log: log.With("agent", cfg.AgentID)}
	a.reportAtOnce.Store(cfg.ReportAtOnce)
	x, err := newExecutor(cfg.Misbehave, false, cfg.SlowFor, a.log, a.reportAtOnce.Load, executorHooks{
		brief: func(_ string, b []byte) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.stats.BriefsReceived++
			a.stats.Received = append(a.stats.Received, slices.Clone(b))
			if n := len(a.stats.Received); n > maxReceived {
				a.stats.Received = slices.Clone(a.stats.Received[n-maxReceived:])
			}
		},
		answer: func(form []byte) {
			if form == nil {
				return
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.stats.FormAnswers = append(a.stats.FormAnswers, slices.Clone(form))
			if n := len(a.stats.FormAnswers); n > maxReceived {
				a.stats.FormAnswers = slices.Clone(a.stats.FormAnswers[n-maxReceived:])
			}
		},
	})
	if err != nil {
		return nil, err
	}
	a.exec = x
	srv, err := natsagent.NewServer(nc, x.Handler(a2asrv.WithLogger(a.log)), natsagent.Config{
		AgentID: cfg.AgentID, Card: card, Credential: cfg.Credential, QueueGroup: QueueGroup, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("refagent: %w", err)
	}
	a.srv = srv
	return a, nil
}

// SetReportAtOnce changes [Config.ReportAtOnce] for tasks that start from
// now on.
func (a *Agent) SetReportAtOnce(on bool) { a.reportAtOnce.Store(on) }

// Start subscribes to a2a.agent.<agentId>.rpc in queue group [QueueGroup]
// (and to its replica's own subject) and starts registering the card in the
// background, as natsagent.Server.Start does. The agent runs until
// [Agent.Stop] or until ctx is done.
func (a *Agent) Start(ctx context.Context) error {
	if err := a.srv.Start(ctx); err != nil {
		return fmt.Errorf("refagent: %w", err)
	}
	context.AfterFunc(ctx, a.Stop)
	return nil
}

// Shutdown drains as [natsagent.Server.Shutdown] does: no new requests,
// running tasks go on publishing until ctx ends, and those cut short are
// published TASK_STATE_FAILED. Then it stops as [Agent.Stop].
func (a *Agent) Shutdown(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	a.Stop()
	return err
}

// Stop unsubscribes (once it returns, requests to the agent get no
// responders), abandons pending publishes and waits for the agent's
// goroutines. It does not close the connection. It is idempotent.
func (a *Agent) Stop() {
	a.stopOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a.exec.Stop()
		_ = a.srv.Shutdown(ctx) // cut short: the pending publishes are abandoned
	})
}

// Server is the natsagent.Server that serves the agent (its replica id,
// registration, counters).
func (a *Agent) Server() *natsagent.Server { return a.srv }

// Stats returns a copy of what the agent has received; Redeliveries and
// CancelsReceived are natsagent.Server's counts.
func (a *Agent) Stats() Stats {
	ss := a.srv.Stats()
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{BriefsReceived: a.stats.BriefsReceived, Received: make([][]byte, len(a.stats.Received)),
		Redeliveries: ss.Redeliveries, CancelsReceived: ss.Cancels}
	for i, b := range a.stats.Received {
		s.Received[i] = slices.Clone(b)
	}
	for _, b := range a.stats.FormAnswers {
		s.FormAnswers = append(s.FormAnswers, slices.Clone(b))
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New(truncate(err.Error(), 200))
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
