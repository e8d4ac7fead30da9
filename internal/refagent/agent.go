// Package refagent is the reference remote agent of the A2A-over-NATS binding
// urn:a2ad:binding:nats:v1 (docs/nats-binding.md): a deterministic
// fraud-review agent that tests and `a2ad demo` run in-process and that
// cmd/fraud-review-agent runs as a process.
//
// The agent serves SendMessage, GetTask and CancelTask on
// a2a.agent.<agentId>.rpc, answers SendMessage at once, and reports the work
// as A2A 1.0 stream items published with JetStream acknowledgement to the
// events subject a2ad named in the request. It registers its card on
// a2a.registry.register at start.
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
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// Agent is the reference fraud-review agent. Build it with [New], run it
// with [Agent.Start], stop it with [Agent.Stop]. It is safe for concurrent
// use.
type Agent struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	agentID   string
	card      []byte
	cred      string
	misbehave map[string]string
	slowFor   time.Duration
	log       *slog.Logger

	ctx    context.Context // cancelled by Stop: ends every task and publish
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	started   bool
	stopped   bool
	sub       *nats.Subscription
	tasks     map[string]*task // by agent task id
	taskOrder []string
	seen      map[string]string // SendMessage messageId -> agent task id
	seenOrder []string
	stats     Stats
	stopOnce  sync.Once

	reportAtOnce atomic.Bool
}

// task is the agent's record of one task. Fields below the line are
// guarded by Agent.mu.
type task struct {
	id            string
	contextID     string
	a2adTaskID    string
	eventsSubject string
	traceparent   string
	ev            evidence
	evErr         error
	mode          string
	answer        chan bool // the reviewer's answer (identity verified?), buffered 1
	ctx           context.Context
	cancel        context.CancelFunc

	status    a2a.TaskStatus
	artifacts []a2a.Artifact
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
	mis := make(map[string]string, len(cfg.Misbehave))
	for caseID, mode := range cfg.Misbehave {
		if !knownMode(mode) {
			return nil, fmt.Errorf("refagent: case %q: unknown misbehaviour mode %q", caseID, mode)
		}
		mis[caseID] = mode
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("refagent: jetstream: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{
		nc:        nc,
		js:        js,
		agentID:   cfg.AgentID,
		card:      slices.Clone(card),
		cred:      cfg.Credential,
		misbehave: mis,
		slowFor:   cmp.Or(cfg.SlowFor, 3*time.Second),
		log:       log.With("agent", cfg.AgentID),
		ctx:       ctx,
		cancel:    cancel,
		tasks:     make(map[string]*task),
		seen:      make(map[string]string),
	}
	a.reportAtOnce.Store(cfg.ReportAtOnce)
	return a, nil
}

// SetReportAtOnce changes [Config.ReportAtOnce] for tasks that start from
// now on.
func (a *Agent) SetReportAtOnce(on bool) { a.reportAtOnce.Store(on) }

// Start subscribes to a2a.agent.<agentId>.rpc in queue group [QueueGroup]
// and starts registering the card in the background (every second until
// a2ad answers). When the connection is up, Start returns only once the
// server has the subscription. The agent runs until [Agent.Stop] or until
// ctx is done.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.stopped {
		return errors.New("refagent: agent already started")
	}
	sub, err := a.nc.QueueSubscribe(natsbind.RPCSubject(a.agentID), QueueGroup, a.serve)
	if err != nil {
		return fmt.Errorf("refagent: subscribe: %w", err)
	}
	if a.nc.IsConnected() {
		if err := a.nc.FlushTimeout(5 * time.Second); err != nil {
			_ = sub.Unsubscribe()
			return fmt.Errorf("refagent: subscribe: %w", err)
		}
	}
	a.sub = sub
	a.started = true
	if a.nc.IsConnected() {
		a.log.Info("serving", "subject", natsbind.RPCSubject(a.agentID), "misbehave", len(a.misbehave))
	} else {
		a.log.Info("will serve once connected", "subject", natsbind.RPCSubject(a.agentID), "misbehave", len(a.misbehave))
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.register()
	}()
	context.AfterFunc(ctx, a.Stop)
	return nil
}

// Stop unsubscribes (once it returns, requests to the agent get no
// responders), abandons pending publishes and waits for the agent's
// goroutines. It does not close the connection. It is idempotent.
func (a *Agent) Stop() {
	a.stopOnce.Do(func() {
		a.mu.Lock()
		a.stopped = true
		sub := a.sub
		a.mu.Unlock()
		if sub != nil && sub.Unsubscribe() == nil && a.nc.IsConnected() {
			_ = a.nc.FlushTimeout(time.Second) // the server stops routing requests here
		}
		a.cancel()
		a.wg.Wait()
		a.log.Info("stopped")
	})
}

// Stats returns a copy of what the agent has received.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{BriefsReceived: a.stats.BriefsReceived, Received: make([][]byte, len(a.stats.Received)),
		Redeliveries: a.stats.Redeliveries, CancelsReceived: a.stats.CancelsReceived}
	for i, b := range a.stats.Received {
		s.Received[i] = slices.Clone(b)
	}
	for _, b := range a.stats.FormAnswers {
		s.FormAnswers = append(s.FormAnswers, slices.Clone(b))
	}
	return s
}

// serve answers one request on the RPC subject.
func (a *Agent) serve(msg *nats.Msg) {
	if msg.Reply == "" {
		a.log.Warn("request without reply subject ignored")
		return
	}
	body, after := a.handle(msg.Header, msg.Data)
	out := nats.NewMsg(msg.Reply)
	out.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
	out.Data = body
	if err := a.nc.PublishMsg(out); err != nil {
		a.log.Warn("reply not sent", "err", err)
	}
	if after != nil {
		after()
	}
}

// handle decodes and dispatches one JSON-RPC request and returns the
// encoded response, plus work to run once the response is sent (nil if
// none).
func (a *Agent) handle(hdr nats.Header, data []byte) ([]byte, func()) {
	req, rerr := decodeRequest(data)
	if rerr != nil {
		id := ""
		if req != nil {
			id = req.ID
		}
		return encodeResponse(id, nil, rerr), nil
	}
	if rerr := checkVersion(header(hdr, natsbind.HeaderA2AVersion)); rerr != nil {
		return encodeResponse(req.ID, nil, rerr), nil
	}
	var (
		result any
		after  func()
	)
	switch req.Method {
	case a2a.MethodSendMessage:
		result, after, rerr = a.sendMessage(req.Params, header(hdr, natsbind.HeaderTraceparent))
	case a2a.MethodGetTask:
		result, rerr = a.getTask(req.Params)
	case a2a.MethodCancelTask:
		result, rerr = a.cancelTask(req.Params)
	default:
		rerr = rpcError(a2a.CodeMethodNotFound, "method %q not found (this binding serves SendMessage, GetTask, CancelTask)", truncate(req.Method, 64))
	}
	if rerr != nil {
		a.log.Debug("request refused", "method", truncate(req.Method, 64), "code", rerr.Code, "msg", rerr.Message)
		return encodeResponse(req.ID, nil, rerr), nil
	}
	return encodeResponse(req.ID, result, nil), after
}

// sendMessageMetadata is what a2ad puts in the message's metadata.
type sendMessageMetadata struct {
	taskID        string
	eventsSubject string
}

func (a *Agent) sendMessage(params json.RawMessage, traceparent string) (any, func(), *a2a.RPCError) {
	var p a2a.SendMessageRequest
	if err := strictDecode(params, &p); err != nil {
		return nil, nil, rpcError(a2a.CodeInvalidParams, "SendMessage params: %s", err)
	}
	m := p.Message
	switch {
	case m.MessageID == "":
		return nil, nil, rpcError(a2a.CodeInvalidParams, "message.messageId is required")
	case m.Role != a2a.RoleUser:
		return nil, nil, rpcError(a2a.CodeInvalidParams, "message.role must be ROLE_USER")
	}
	if c := p.Configuration; c != nil && len(c.AcceptedOutputModes) > 0 && !slices.Contains(c.AcceptedOutputModes, "application/json") {
		return nil, nil, rpcError(a2a.CodeContentTypeNotSupported, "this agent produces application/json only")
	}
	meta, rerr := a.decodeMetadata(m.Metadata)
	if rerr != nil {
		return nil, nil, rerr
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if id, dup := a.seen[m.MessageID]; dup {
		a.stats.Redeliveries++
		t := a.tasks[id]
		if t == nil {
			return nil, nil, rpcError(a2a.CodeTaskNotFound, "message %q was processed for a task no longer kept", truncate(m.MessageID, 64))
		}
		return a2a.SendMessageResponse{Task: t.snapshot()}, nil, nil
	}
	if m.TaskID == "" {
		return a.newTask(m, meta, traceparent)
	}
	return a.followUp(m, meta)
}

// newTask creates a task from the brief in m. a.mu is held.
func (a *Agent) newTask(m a2a.Message, meta sendMessageMetadata, traceparent string) (any, func(), *a2a.RPCError) {
	b, err := brief.FromMessage(m)
	if err != nil {
		return nil, nil, rpcError(a2a.CodeInvalidParams, "message carries no valid brief: %s", truncate(err.Error(), 200))
	}
	a.stats.BriefsReceived++
	a.stats.Received = append(a.stats.Received, slices.Clone(b.Bytes()))
	if n := len(a.stats.Received); n > maxReceived {
		a.stats.Received = slices.Clone(a.stats.Received[n-maxReceived:])
	}

	ev, evErr := parseEvidence(b.Evidence)
	t := &task{
		id:            newID("fr-"),
		contextID:     m.ContextID,
		a2adTaskID:    meta.taskID,
		eventsSubject: meta.eventsSubject,
		traceparent:   traceparent,
		ev:            ev,
		evErr:         evErr,
		answer:        make(chan bool, 1),
		status:        a2a.TaskStatus{State: a2a.TaskStateSubmitted, Timestamp: now()},
	}
	if t.contextID == "" {
		t.contextID = newID("ctx-")
	}
	if evErr == nil {
		t.mode = a.misbehave[ev.CaseID]
	}
	t.ctx, t.cancel = context.WithCancel(a.ctx)
	a.tasks[t.id] = t
	a.taskOrder = append(a.taskOrder, t.id)
	a.evictTasks()
	a.remember(m.MessageID, t.id)
	a.log.Info("task created", "task", t.id, "a2adTask", t.a2adTaskID, "case", ev.CaseID, "misbehave", t.mode)

	after := func() { a.spawn(t) }
	if t.mode == ModeSilent {
		after = nil
	}
	return a2a.SendMessageResponse{Task: t.snapshot()}, after, nil
}

// followUp resumes an input-required task with the answer in m. a.mu is
// held.
func (a *Agent) followUp(m a2a.Message, meta sendMessageMetadata) (any, func(), *a2a.RPCError) {
	t := a.tasks[m.TaskID]
	switch {
	case t == nil:
		return nil, nil, rpcError(a2a.CodeTaskNotFound, "task %q not found", truncate(m.TaskID, 64))
	case meta.taskID != t.a2adTaskID:
		return nil, nil, rpcError(a2a.CodeInvalidParams, "%s %q does not match the task's %q", MetaTaskID, meta.taskID, t.a2adTaskID)
	case m.ContextID != "" && m.ContextID != t.contextID:
		return nil, nil, rpcError(a2a.CodeInvalidParams, "contextId %q does not match the task's %q", truncate(m.ContextID, 64), t.contextID)
	case t.status.State != a2a.TaskStateInputRequired:
		return nil, nil, rpcError(a2a.CodeUnsupportedOperation, "task %s is %s, not TASK_STATE_INPUT_REQUIRED", t.id, t.status.State)
	}
	var verified bool
	if t.mode == ModeStructuredQuestion {
		v, data, err := parseApproval(m.Parts)
		if err != nil {
			return nil, nil, rpcError(a2a.CodeInvalidParams, "%s", err)
		}
		verified = v
		a.stats.FormAnswers = append(a.stats.FormAnswers, data)
		if n := len(a.stats.FormAnswers); n > maxReceived {
			a.stats.FormAnswers = slices.Clone(a.stats.FormAnswers[n-maxReceived:])
		}
	} else {
		answer := strings.TrimSpace(m.Text())
		if answer == "" {
			return nil, nil, rpcError(a2a.CodeInvalidParams, "the answer must be a non-empty text part")
		}
		verified = affirmative(answer)
	}
	t.status = a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: now()}
	a.remember(m.MessageID, t.id)
	a.log.Info("answer received", "task", t.id, "verified", verified)
	return a2a.SendMessageResponse{Task: t.snapshot()}, func() { t.answer <- verified }, nil
}

func (a *Agent) getTask(params json.RawMessage) (any, *a2a.RPCError) {
	var p a2a.GetTaskRequest
	if err := strictDecode(params, &p); err != nil || p.ID == "" {
		return nil, rpcError(a2a.CodeInvalidParams, "GetTask params must be {\"id\": <task id>}")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[p.ID]
	if t == nil {
		return nil, rpcError(a2a.CodeTaskNotFound, "task %q not found", truncate(p.ID, 64))
	}
	return t.snapshot(), nil
}

func (a *Agent) cancelTask(params json.RawMessage) (any, *a2a.RPCError) {
	var p a2a.CancelTaskRequest
	if err := strictDecode(params, &p); err != nil || p.ID == "" {
		return nil, rpcError(a2a.CodeInvalidParams, "CancelTask params must be {\"id\": <task id>}")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[p.ID]
	if t == nil {
		return nil, rpcError(a2a.CodeTaskNotFound, "task %q not found", truncate(p.ID, 64))
	}
	a.stats.CancelsReceived++
	if terminal(t.status.State) {
		return nil, rpcError(a2a.CodeTaskNotCancelable, "task %s is %s", t.id, t.status.State)
	}
	t.status = a2a.TaskStatus{State: a2a.TaskStateCanceled, Timestamp: now()}
	t.cancel()
	a.log.Info("task canceled", "task", t.id)
	return t.snapshot(), nil
}

// decodeMetadata extracts and checks a2ad's metadata: the events subject
// must be exactly a2a.events.<own agent id>.<a2ad task id>.
func (a *Agent) decodeMetadata(raw json.RawMessage) (sendMessageMetadata, *a2a.RPCError) {
	var md map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &md) != nil || md == nil {
		return sendMessageMetadata{}, rpcError(a2a.CodeInvalidParams, "message.metadata must carry %s and %s", MetaTaskID, MetaEventsSubject)
	}
	var meta sendMessageMetadata
	if json.Unmarshal(md[MetaTaskID], &meta.taskID) != nil || !natsbind.ValidToken(meta.taskID) {
		return meta, rpcError(a2a.CodeInvalidParams, "message.metadata[%q] must be one NATS token", MetaTaskID)
	}
	want := natsbind.EventsSubject(a.agentID, meta.taskID)
	if json.Unmarshal(md[MetaEventsSubject], &meta.eventsSubject) != nil || meta.eventsSubject != want {
		return meta, rpcError(a2a.CodeInvalidParams, "message.metadata[%q] must be %q", MetaEventsSubject, want)
	}
	return meta, nil
}

// remember records a processed messageId. a.mu is held.
func (a *Agent) remember(messageID, taskID string) {
	a.seen[messageID] = taskID
	a.seenOrder = append(a.seenOrder, messageID)
	for len(a.seenOrder) > maxRemembered {
		delete(a.seen, a.seenOrder[0])
		a.seenOrder = a.seenOrder[1:]
	}
}

// evictTasks forgets the oldest terminal tasks beyond maxRemembered. a.mu
// is held.
func (a *Agent) evictTasks() {
	for n := len(a.taskOrder); len(a.tasks) > maxRemembered && n > 0; n-- {
		id := a.taskOrder[0]
		a.taskOrder = a.taskOrder[1:]
		if t := a.tasks[id]; t != nil && !terminal(t.status.State) {
			a.taskOrder = append(a.taskOrder, id)
			continue
		}
		delete(a.tasks, id)
	}
}

// snapshot returns a copy of the task as A2A sees it. a.mu is held.
func (t *task) snapshot() *a2a.Task {
	return &a2a.Task{
		ID:        t.id,
		ContextID: t.contextID,
		Status:    t.status,
		Artifacts: slices.Clone(t.artifacts),
	}
}

func terminal(s a2a.TaskState) bool {
	switch s {
	case a2a.TaskStateCompleted, a2a.TaskStateFailed, a2a.TaskStateCanceled, a2a.TaskStateRejected:
		return true
	}
	return false
}

// decodeRequest decodes a JSON-RPC 2.0 request: not JSON is -32700; JSON
// that is not a request with a string id and a method is -32600.
func decodeRequest(data []byte) (*a2a.Request, *a2a.RPCError) {
	if !json.Valid(data) {
		return nil, rpcError(a2a.CodeParseError, "request body is not JSON")
	}
	var req a2a.Request
	if err := strictDecode(data, &req); err != nil {
		return nil, rpcError(a2a.CodeInvalidRequest, "not a JSON-RPC 2.0 request with a string id: %s", err)
	}
	if req.JSONRPC != "2.0" || req.Method == "" || req.ID == "" {
		return &req, rpcError(a2a.CodeInvalidRequest, "a JSON-RPC 2.0 request needs jsonrpc \"2.0\", a string id and a method")
	}
	return &req, nil
}

// checkVersion accepts any 1.x in the A2A-Version header; an absent header
// means 0.3 (A2A 1.0 §3.2.6) and is refused like any other major.
func checkVersion(v string) *a2a.RPCError {
	major, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	if major == "1" {
		return nil
	}
	if v == "" {
		v = "absent (0.3)"
	}
	return rpcError(a2a.CodeVersionNotSupported, "A2A-Version %s not supported; this binding speaks %s", truncate(v, 16), a2a.Version)
}

func encodeResponse(id string, result any, rerr *a2a.RPCError) []byte {
	resp := a2a.Response{JSONRPC: "2.0", ID: id, Error: rerr}
	if rerr == nil {
		b, err := json.Marshal(result)
		if err != nil {
			resp.Error = rpcError(a2a.CodeInternalError, "encode result: %s", err)
		} else {
			resp.Result = b
		}
	}
	b, _ := json.Marshal(resp) // only strings and raw JSON: cannot fail
	return b
}

func rpcError(code int, format string, args ...any) *a2a.RPCError {
	return &a2a.RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
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

// header looks a header up case-insensitively: A2A service parameter names
// are case-insensitive, NATS headers are not.
func header(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// now is an RFC 3339 UTC timestamp with milliseconds (ProtoJSON's shape).
func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
