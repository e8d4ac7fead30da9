// Package broker is a2ad's application service: it turns a host's request
// into a delegation (agent lookup, brief, task record, SendMessage), follows
// it, and answers, resumes and cancels it. The MCP edge, the admin API and
// the demo all call it; it knows nothing of MCP.
package broker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/failpoint"
	"github.com/a2ad/a2ad/internal/lograte"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/tracing"
	"github.com/a2ad/a2ad/task"
)

// Principal is who calls: it comes from the transport (a verified token on
// HTTP, the launching configuration on stdio), never from tool arguments.
type Principal struct {
	Subject string
	Tenant  string
	Scopes  []string
}

// Admission decides whether new work may be accepted.
type Admission interface {
	// Admit returns nil, or an error wrapping task.ErrUnavailable that
	// says, in a2ad's words, why no new delegation is accepted now.
	Admit() error
	// Full reports a write the store refused for lack of room.
	Full()
}

// Errors a host can act on.
var (
	ErrIdempotencyConflict = errors.New("idempotency_key already used for a different brief")
	ErrNotInterrupted      = errors.New("task is not waiting for an answer")
	ErrTerminal            = errors.New("task already ended")
	// ErrIdempotencyKeyExpired: the key's task ended and was removed after
	// its retention; its id is never reused (task.ErrRemoved).
	ErrIdempotencyKeyExpired = errors.New("idempotency_key named a task that ended and was removed after its retention (retention.ended_tasks); use a new key")
)

// Wait bounds (DESIGN.md): default 20 s, capped at 50 s, below the ~60 s
// at which common hosts give up on a call.
const (
	DefaultWait = 20 * time.Second
	MaxWait     = 50 * time.Second
)

// DelegateRequest is a delegation as the host asks for it.
type DelegateRequest struct {
	Agent          string
	Skill          string
	Brief          brief.Request
	IdempotencyKey string
}

// Service wires the domain packages to NATS.
type Service struct {
	Agents  *agentcard.Registry
	Schemas *artifact.Catalog // the host schemas in force
	Tasks   *task.Store
	// Bindings reach agents, by task.Record.Binding: "" is a2ad's NATS
	// binding (natsbind.Client), "JSONRPC" and "HTTP+JSON" the HTTP one.
	Bindings map[string]Binding
	Log      *slog.Logger
	Limits   brief.Limits
	// EvidenceSchemas maps "agentId/skillId" to a host schema the evidence
	// must satisfy before anything is sent.
	EvidenceSchemas map[string]string
	// EvidenceAllow maps "agentId/skillId" (or "agentId/*" for the agent's
	// other skills) to the evidence that agent may receive; the rest is
	// dropped before the brief is built and listed in
	// task.Record.DroppedEvidence. No entry: all evidence goes.
	EvidenceAllow map[string]*brief.Allowlist
	// OutputSchemas maps "agentId/skillId" (or "agentId/*" for the agent's
	// other skills) to the host schemas a delegation to that skill may
	// name as its output schema; no entry: every host schema in force.
	OutputSchemas map[string][]string

	// OnDelegate, if set, is called once per Delegate call, after it, with
	// its outcome. It must not block.
	OnDelegate func(ctx context.Context, d Delegation)
	// IdempotencySecret keys the task ids derived from idempotency keys
	// (HMAC-SHA256); every instance must share it. IdempotencySince is
	// when it was made: tasks with idempotency keys created before it have
	// the ids of earlier versions (a plain hash), which a retry looks up
	// too while the store holds such a task (the watcher saw one, [Track])
	// and until LegacyIdempotencyUntil, so that a retry of a task delegated
	// before the upgrade gets that task.
	IdempotencySecret      []byte
	IdempotencySince       time.Time
	LegacyIdempotencyUntil time.Time
	// OnHTTPReply, if set, is given the result of each SendMessage an HTTP
	// agent answered (a SendMessageResponse), with the task it is for: its
	// Task may already carry the outcome (httpbind.Follower.PublishReply).
	// It is called off the host's path and must not block for long.
	OnHTTPReply func(ctx context.Context, id, agentID, agentTask string, result []byte)
	// Admission, if set, decides whether a new delegation may be stored
	// (the JetStream store keeps room for the tasks already delegated).
	Admission Admission

	schedOnce        sync.Once
	sched            *scheduler
	legacyIdempotent atomic.Bool    // the store holds a task of an earlier version with an idempotency key
	logs             lograte.Gate   // bounds the log lines about one agent's deliveries
	bg               sync.WaitGroup // background settles
	badReplicas      atomic.Uint64  // replies naming their replica with an invalid token
}

// BadReplicaHeaders is how many SendMessage replies named their replica
// (header A2ad-Replica, docs/nats-binding.md §5.8) with a value that is not
// one NATS token; each was ignored.
func (s *Service) BadReplicaHeaders() uint64 { return s.badReplicas.Load() }

// Track is the task store's change callback ([task.NewStore]): it keeps the
// schedule of deadlines and outbox deliveries. It may be called before
// [Service.Run].
func (s *Service) Track(sn task.Snapshot) {
	var deadline time.Time
	if !sn.Deleted && !sn.State.Terminal() {
		deadline = sn.Deadline
	}
	s.scheduler().track(sn.ID, sn.AgentID, dueOf(sn), deadline)
	if sn.Idempotent && !sn.Deleted && sn.CreatedAt.Before(s.IdempotencySince) {
		s.legacyIdempotent.Store(true)
	}
}

// Scheduled is the number of tasks whose deadline or outbox delivery this
// instance is watching.
func (s *Service) Scheduled() int { return s.scheduler().Len() }

func (s *Service) scheduler() *scheduler {
	s.schedOnce.Do(func() { s.sched = newScheduler() })
	return s.sched
}

// Run enforces deadlines and redelivers outboxes as they fall due, until
// ctx ends. Every instance runs it; compare-and-swap on the task record
// decides which instance's action takes effect.
func (s *Service) Run(ctx context.Context) {
	s.scheduler().run(ctx, s.act)
	s.bg.Wait()
}

func newTaskID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "tsk-" + hex.EncodeToString(b[:])
}

// idempotentTaskID derives the task id from the tenant and the host's
// idempotency key, so that creating the record is itself the idempotency
// check: one atomic KV create, no separate index that a crash could leave
// half-written. It is an HMAC-SHA256 (RFC 2104) under a secret every
// instance shares: a task id is a capability (docs/nats-binding.md §10),
// and one computable from a guessable key would hand it to anyone.
func idempotentTaskID(secret []byte, tenant, key string) string {
	mac := hmac.New(sha256.New, secret)
	_, _ = mac.Write(idempotencyInput(tenant, key))
	return "tsk-" + hex.EncodeToString(mac.Sum(nil)[:12])
}

// legacyIdempotentTaskID is the id earlier versions derived, with a plain
// SHA-256, for tasks that may still be retried.
func legacyIdempotentTaskID(tenant, key string) string {
	h := sha256.Sum256(idempotencyInput(tenant, key))
	return "tsk-" + hex.EncodeToString(h[:12])
}

// idempotencyInput is what an idempotent task id is derived from:
// length-prefixed, so no (tenant, key) pair reads as another.
func idempotencyInput(tenant, key string) []byte {
	return fmt.Appendf(nil, "a2ad/idempotency\x00%d:%s%d:%s", len(tenant), tenant, len(key), key)
}

// Delegate validates the request, stores a submitted task whose outbox holds
// the brief, and sends it to the agent. Errors: agentcard.ErrAgentNotFound,
// *agentcard.NotDelegableError, agentcard.ErrSkillNotFound,
// artifact.ErrSchemaNotFound, *brief.Error, *EvidenceError,
// natsbind.ErrAgentOffline, *a2a.RPCError (the agent refused the brief),
// ErrIdempotencyConflict. On any of these no task remains. When the agent's
// answer does not come (a timeout), the task is returned submitted and the
// brief is redelivered with the same messageId until the agent answers or
// the deadline passes (docs/durability.md).
func (s *Service) Delegate(ctx context.Context, p Principal, req DelegateRequest) (*task.Record, error) {
	start := time.Now()
	created := ""
	r, err := s.delegate(ctx, p, &req, &created)
	if s.OnDelegate != nil {
		d := Delegation{Principal: p, Request: &req, Task: r, Err: err, Start: start}
		if err != nil {
			d.Withdrawn = created
		}
		s.OnDelegate(ctx, d)
	}
	return r, err
}

// Delegation is one Delegate call as OnDelegate sees it.
type Delegation struct {
	Principal Principal
	Request   *DelegateRequest
	// Task is the task the host got: nil when refused; for an idempotent
	// retry, the existing task (created before Start).
	Task  *task.Record
	Err   error
	Start time.Time
	// Withdrawn is the id of a task this call created and removed again
	// (the agent was offline, or refused the brief); "" otherwise.
	Withdrawn string
}

func (s *Service) delegate(ctx context.Context, p Principal, req *DelegateRequest, created *string) (*task.Record, error) {
	agent, _, err := s.Agents.ForDelegation(ctx, p.Tenant, req.Agent, req.Skill)
	if err != nil {
		if errors.Is(err, agentcard.ErrAgentNotFound) {
			return nil, fmt.Errorf("%w: no agent %q is visible to this principal", err, req.Agent)
		}
		return nil, err
	}
	if allowed, ok := s.outputSchemas(req.Agent, req.Skill); ok && !slices.Contains(allowed, req.Brief.OutputSchema) {
		return nil, &SchemaNotAllowedError{Agent: req.Agent, Skill: req.Skill, Schema: truncate(req.Brief.OutputSchema, 64), Allowed: allowed}
	}
	schema, err := s.Schemas.Get(req.Brief.OutputSchema)
	if err != nil {
		return nil, err
	}
	al, ok := s.EvidenceAllow[req.Agent+"/"+req.Skill]
	if !ok {
		al = s.EvidenceAllow[req.Agent+"/*"]
	}
	if err := brief.CheckEvidenceSize(req.Brief.Evidence, s.Limits); err != nil {
		return nil, err
	}
	var dropped []string
	if req.Brief.Evidence, dropped, err = al.Filter(req.Brief.Evidence); err != nil {
		return nil, err
	}
	// Limits and the secret scan first: a credential is refused as such,
	// whatever else is wrong with the evidence.
	b, err := brief.Build(req.Brief, brief.OutputSchema{Name: schema.Name, Digest: schema.Digest, Document: schema.Document}, s.Limits)
	if err != nil {
		return nil, err
	}
	if name, ok := s.EvidenceSchemas[req.Agent+"/"+req.Skill]; ok {
		es, err := s.Schemas.Get(name)
		if err != nil {
			return nil, fmt.Errorf("evidence schema for %s/%s: %w", req.Agent, req.Skill, err)
		}
		if v := es.Validate(req.Brief.Evidence); len(v) > 0 {
			return nil, &EvidenceError{Schema: name, Violations: v}
		}
	}
	now := time.Now().UTC()
	id := newTaskID()
	if req.IdempotencyKey != "" {
		id = idempotentTaskID(s.IdempotencySecret, p.Tenant, req.IdempotencyKey)
		if s.legacyIdempotent.Load() && now.Before(s.LegacyIdempotencyUntil) {
			// A retry of a delegation an earlier version made gets its task.
			legacy := legacyIdempotentTaskID(p.Tenant, req.IdempotencyKey)
			if prev, err := s.Get(ctx, p, legacy); err == nil && prev.IdempotencyKey == req.IdempotencyKey {
				return s.replay(ctx, p, legacy, b.Digest(), *req)
			}
		}
	}
	if s.Admission != nil {
		if err := s.Admission.Admit(); err != nil {
			if req.IdempotencyKey != "" {
				// A retry of a task that exists needs no room.
				if prev, rerr := s.replay(ctx, p, id, b.Digest(), *req); rerr == nil || !errors.Is(rerr, task.ErrNotFound) {
					return prev, rerr
				}
			}
			return nil, err
		}
	}
	r := &task.Record{
		ID: id, Tenant: p.Tenant, Subject: p.Subject, AgentID: req.Agent, Skill: req.Skill,
		BriefDigest: b.Digest(), OutputSchema: schema.Name, SchemaDigest: schema.Digest,
		IdempotencyKey: req.IdempotencyKey, DroppedEvidence: dropped, State: task.Submitted, Turns: 1,
		Deadline:  now.Add(time.Duration(b.Budget.DeadlineSeconds) * time.Second),
		CreatedAt: now, UpdatedAt: now,
		History:     []task.Transition{{At: now, To: task.Submitted, Event: "submit", Source: task.SourceHost, By: p.Subject}},
		TraceParent: tracing.Traceparent(ctx),
	}
	if agent.Binding != "" && agent.Binding != agentcard.BindingNATS {
		// A standard agent: it learns no events subject, and a2ad chooses
		// the context id, by which it finds the task again should the
		// reply be lost (docs/http-binding.md §5).
		r.Binding, r.ContextID = agent.Binding, HTTPContextID(r.ID)
	}
	md := metadata(r)
	msg := b.Message(messageID(r, 1), "", md)
	msg.ContextID = r.ContextID
	params, err := json.Marshal(a2a.SendMessageRequest{
		Message:       msg,
		Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true, AcceptedOutputModes: []string{"application/json"}},
		Metadata:      md,
	})
	if err != nil {
		return nil, err
	}
	r.Outbox = &task.Outbound{Method: a2a.MethodSendMessage, MessageID: messageID(r, 1), Params: params,
		Attempts: 1, NotBefore: now.Add(leaseFor(r)), SentAt: now}
	for attempt := 0; ; attempt++ {
		err := s.Tasks.Create(ctx, r)
		if err == nil {
			*created = id
			break
		}
		if errors.Is(err, task.ErrUnavailable) && s.Admission != nil {
			s.Admission.Full()
		}
		if errors.Is(err, task.ErrRemoved) {
			return nil, ErrIdempotencyKeyExpired
		}
		if !errors.Is(err, task.ErrExists) || req.IdempotencyKey == "" {
			return nil, err
		}
		prev, err := s.replay(ctx, p, id, b.Digest(), *req)
		if !errors.Is(err, task.ErrNotFound) || attempt > 0 {
			return prev, err
		}
		// The first delegation with this key was removed (its agent was
		// offline or refused it) while this one waited: create it anew.
	}
	failpoint.Hit("delegate-after-create")
	if time.Now().After(r.Outbox.NotBefore.Add(-leaseFor(r) / 2)) {
		// The create took most of the lease (a leader election): another
		// instance may start redelivering soon, so leave the delivery to
		// the scheduler; the host gets the task submitted.
		s.Log.Info("task stored slowly; its brief goes out with the next redelivery", "task", r.ID)
		return r, nil
	}
	return s.deliverFirst(ctx, r)
}

// replay answers a repeated delegation: the same brief to the same agent
// and skill gets the task the key already names, anything else
// ErrIdempotencyConflict. No second brief is sent.
func (s *Service) replay(ctx context.Context, p Principal, id, digest string, req DelegateRequest) (*task.Record, error) {
	prev, err := s.Get(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if prev.BriefDigest != digest || prev.AgentID != req.Agent || prev.Skill != req.Skill {
		return nil, ErrIdempotencyConflict
	}
	// While the first delegation's own delivery is in flight, its outcome
	// decides whether the task exists at all: wait for it (at most the lease).
	for prev.State == task.Submitted && prev.Outbox != nil && prev.Outbox.Attempts == 1 && time.Now().Before(prev.Outbox.NotBefore) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if prev, err = s.Get(ctx, p, id); err != nil {
			return nil, err
		}
	}
	return prev, nil
}

// metadata names the task and, on the NATS binding, the events subject
// the agent must publish on.
func metadata(r *task.Record) json.RawMessage {
	md := map[string]string{"a2ad/taskId": r.ID}
	if !r.HTTP() {
		md["a2ad/eventsSubject"] = natsbind.EventsSubject(r.AgentID, r.ID)
	}
	m, _ := json.Marshal(md)
	return m
}

// HTTPContextID is the contextId a2ad chooses for task id delegated over
// an HTTP binding: the agent keeps it, and ListTasks by it finds the
// agent's task when the SendMessage reply was lost.
func HTTPContextID(taskID string) string { return "a2ad-" + taskID }

// messageID is stable per task and turn, so a resend is recognisable.
func messageID(r *task.Record, turn int) string {
	if turn == 1 {
		return task.BriefMessageID(r.ID)
	}
	return fmt.Sprintf("%s-m%d", r.ID, turn)
}

var errSkip = errors.New("skip")

// Get returns the caller's task; task.ErrNotFound for an unknown ID or one
// of another tenant (the two are indistinguishable to the caller).
func (s *Service) Get(ctx context.Context, p Principal, id string) (*task.Record, error) {
	if !natsbind.ValidToken(id) {
		return nil, task.ErrNotFound
	}
	r, _, err := s.Tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.Tenant != p.Tenant {
		return nil, task.ErrNotFound
	}
	return r, nil
}

// Wait returns the task once it is terminal or interrupted, or when wait
// elapses or ctx ends (then with its current state, no error). Each change
// seen meanwhile is passed to onChange (may be nil). wait ≤ 0 returns at once.
func (s *Service) Wait(ctx context.Context, p Principal, id string, wait time.Duration, onChange func(*task.Record)) (*task.Record, error) {
	return s.WaitUntil(ctx, p, id, wait, func(r *task.Record) bool { return r.State.Terminal() || r.State.Interrupted() }, onChange)
}

// firstReadTimeout bounds WaitUntil's first read once its ctx has ended.
const firstReadTimeout = 2 * time.Second

// WaitUntil is Wait with its own end condition: it returns once done holds
// for the task (checked first on the current record), or when wait elapses
// or ctx ends. An ended ctx is not an error: the task comes back as it is
// (the first read is made even then, bounded by 2 s).
func (s *Service) WaitUntil(ctx context.Context, p Principal, id string, wait time.Duration, done func(*task.Record) bool, onChange func(*task.Record)) (*task.Record, error) {
	if wait > MaxWait {
		wait = MaxWait
	}
	if !natsbind.ValidToken(id) {
		return nil, task.ErrNotFound
	}
	// Each change comes with its value from the store's watcher: after the
	// first read, waking up costs no read of the record.
	f := s.Tasks.Follow(id)
	defer f.Stop()
	// The first read outlives ctx: a wait whose ctx ended (a host that
	// went away, an edge that is shutting down) still returns the task as
	// it is, as it would a moment later in the loop, not a cancellation.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), firstReadTimeout)
	r, rev, err := s.Tasks.Get(rctx, id)
	cancel()
	if err == nil && r.Tenant != p.Tenant {
		r, err = nil, task.ErrNotFound
	}
	if err != nil || wait <= 0 || done(r) {
		return r, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	last := r.UpdatedAt
	for {
		select {
		case <-ctx.Done():
			return r, nil
		case <-timer.C:
			return r, nil
		case <-f.C():
		}
		nr, nrev, err := f.Latest()
		if nrev <= rev {
			continue // a change the first read already had
		}
		if err != nil {
			return r, err
		}
		r, rev = nr, nrev
		if onChange != nil && !r.UpdatedAt.Equal(last) {
			onChange(r)
		}
		last = r.UpdatedAt
		if done(r) {
			return r, nil
		}
	}
}

// Respond answers an interrupted task's question with text: it is
// [Service.RespondAnswer] with Answer{Text: answer}.
func (s *Service) Respond(ctx context.Context, p Principal, id, answer string) (*task.Record, error) {
	return s.RespondAnswer(ctx, p, id, Answer{Text: answer})
}

// MaxAnswerBytes bounds an answer: its text, or its data as JSON.
const MaxAnswerBytes = 16 << 10

// Answer is a host's answer to a task's question: Text, free text, or
// Data, a JSON object that satisfies the question's form
// (task.Record.QuestionSchema). Exactly one is set.
type Answer struct {
	Text string
	Data json.RawMessage
}

// AnswerError means an answer's data does not satisfy the question's form.
// It names JSON pointers into the answer (below /answer_data) and
// keywords, never the values.
type AnswerError struct {
	Violations []artifact.Violation
}

func (e *AnswerError) Error() string {
	var b strings.Builder
	b.WriteString("answer_data does not satisfy the question's question_schema:")
	for _, v := range e.Violations {
		fmt.Fprintf(&b, " /answer_data%s (%s);", v.Pointer, v.Keyword)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// checkAnswer refuses an answer that is not exactly one of text or data,
// or is over MaxAnswerBytes, or whose data is not a JSON object.
func checkAnswer(a Answer) error {
	switch {
	case a.Data != nil && a.Text != "":
		return &brief.Error{Field: "/answer", Reason: "give answer or answer_data, not both"}
	case a.Data == nil && strings.TrimSpace(a.Text) == "":
		return &brief.Error{Field: "/answer", Reason: "required (or answer_data, for a question with a question_schema)"}
	case len(a.Text) > MaxAnswerBytes:
		return &brief.Error{Field: "/answer", Reason: "longer than 16384 bytes"}
	case len(a.Data) > MaxAnswerBytes:
		return &brief.Error{Field: "/answer_data", Reason: "longer than 16384 bytes as JSON"}
	case a.Data != nil && (!json.Valid(a.Data) || bytes.TrimSpace(a.Data)[0] != '{'):
		return &brief.Error{Field: "/answer_data", Reason: "must be a JSON object"}
	}
	return nil
}

// answerParts are the parts of the message that carries answer a to the
// question of r: its text; or, for data, checked against r's form, a
// text part with the data as JSON (for agents that read only text) and a
// data part (application/json) with the data, both a2ad's encoding of the
// value it checked (artifact.EncodeAnswer).
// A mismatch of answer and question is a *brief.Error, data that does not
// satisfy the form an *AnswerError.
func answerParts(r *task.Record, a Answer) ([]a2a.Part, error) {
	if a.Data == nil {
		if r.QuestionSchema != nil {
			return nil, &brief.Error{Field: "/answer", Reason: "the question has a question_schema: answer with answer_data, a JSON object that satisfies it"}
		}
		return []a2a.Part{a2a.TextPart(a.Text)}, nil
	}
	if r.QuestionSchema == nil {
		return nil, &brief.Error{Field: "/answer_data", Reason: "the question has no question_schema: answer with answer, a text"}
	}
	f, err := artifact.ParseQuestionForm(r.QuestionSchema)
	if err != nil {
		return nil, fmt.Errorf("task %s: stored question form: %w", r.ID, err)
	}
	if vs := f.Check(a.Data); len(vs) > 0 {
		return nil, &AnswerError{Violations: vs}
	}
	// a2ad's encoding of the value it checked, not the host's bytes.
	data, err := artifact.EncodeAnswer(a.Data)
	if err != nil {
		return nil, &brief.Error{Field: "/answer_data", Reason: "must be a JSON object"}
	}
	return []a2a.Part{a2a.TextPart(string(data)), a2a.DataPart(data)}, nil
}

// RespondAnswer answers an interrupted task's question: the task resumes
// (working) with the answer in its outbox, in one compare-and-swap, and the
// answer is sent to the agent as a follow-up message in the same task and
// context (for data: a text and a data part, see answerParts). The answer
// must fit the question: text for a free question, data satisfying the
// form for one with a question_schema (a *brief.Error, or an
// *AnswerError naming pointers and keywords). ErrNotInterrupted if the
// task does not wait for an answer; if the agent is offline or refuses
// the answer, the task is back in input-required with its question (and
// form) and the error is returned. An answer whose delivery is
// unconfirmed stays in the outbox and is redelivered. The history names
// how it was answered (reason "answered", or "answered_data"), never the
// answer; the record's Exchanges keep the question and answer, bounded
// (task.AddExchange), for operators (an answer the agent then refuses
// stays there too).
func (s *Service) RespondAnswer(ctx context.Context, p Principal, id string, a Answer) (*task.Record, error) {
	if err := checkAnswer(a); err != nil {
		return nil, err
	}
	if _, err := s.Get(ctx, p, id); err != nil {
		return nil, err
	}
	var wrote json.RawMessage // the answer's params, once a write of them was attempted
	r, err := s.Tasks.Update(ctx, id, func(r *task.Record) error {
		if wrote != nil && r.Outbox != nil && bytes.Equal(r.Outbox.Params, wrote) {
			return errSkip // our write landed although its answer was lost
		}
		if r.State != task.InputRequired {
			return fmt.Errorf("%w (state %s)", ErrNotInterrupted, r.State)
		}
		now := time.Now().UTC()
		parts, err := answerParts(r, a)
		if err != nil {
			return err
		}
		question, form := r.Question, r.QuestionSchema
		r.Turns++
		md := metadata(r)
		msg := a2a.Message{MessageID: messageID(r, r.Turns), TaskID: r.AgentTaskID, ContextID: r.ContextID,
			Role: a2a.RoleUser, Parts: parts, Metadata: md}
		params, err := json.Marshal(a2a.SendMessageRequest{Message: msg,
			Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true}, Metadata: md})
		if err != nil {
			return err
		}
		how, text := "answered", a.Text
		if a.Data != nil {
			how, text = "answered_data", *parts[0].Text
		}
		if err := r.MoveBy(now, task.EventResume, task.SourceHost, how, "", p.Subject); err != nil {
			return err
		}
		r.AddExchange(now, question, text, a.Data != nil, p.Subject)
		r.Outbox = &task.Outbound{Method: a2a.MethodSendMessage, MessageID: msg.MessageID, Params: params,
			Question: question, QuestionSchema: form, Attempts: 1, NotBefore: now.Add(leaseFor(r)), SentAt: now}
		wrote = params
		return nil
	})
	if errors.Is(err, errSkip) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if time.Now().After(r.Outbox.NotBefore.Add(-leaseFor(r) / 2)) {
		// The write took most of the lease (a leader election): leave the
		// delivery to the scheduler rather than race another instance.
		return s.Get(ctx, p, id)
	}
	failpoint.Hit("respond-after-resume")
	if _, err := s.deliverFirst(ctx, r); err != nil {
		return nil, err
	}
	return s.Get(ctx, p, id)
}

// Cancel cancels the task: it records canceled (reason canceled_by_host)
// with a CancelTask in its outbox, then sends CancelTask (best effort: an
// offline agent does not keep the task open). ErrTerminal if it had
// already ended; if it ends concurrently, the first terminal state wins.
func (s *Service) Cancel(ctx context.Context, p Principal, id string) (*task.Record, error) {
	r, err := s.Get(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if r.State.Terminal() {
		return r, fmt.Errorf("%w (state %s)", ErrTerminal, r.State)
	}
	return s.cancel(ctx, id, task.SourceHost, task.ReasonCanceledByHost, p.Subject, "")
}

// CancelByOperator cancels the task, of any tenant, as Cancel does (the
// agent gets CancelTask), for an operator: the transition is recorded
// with source operator, reason canceled_by_operator, By operator (their
// verified token subject) and Note their words. Errors as Cancel's.
func (s *Service) CancelByOperator(ctx context.Context, operator, id, note string) (*task.Record, error) {
	if !natsbind.ValidToken(id) {
		return nil, task.ErrNotFound
	}
	r, _, err := s.Tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.State.Terminal() {
		return r, fmt.Errorf("%w (state %s)", ErrTerminal, r.State)
	}
	return s.cancel(ctx, id, task.SourceOperator, task.ReasonCanceledByOperator, operator, note)
}

func (s *Service) cancel(ctx context.Context, id, source, reason, by, note string) (*task.Record, error) {
	moved := false
	r, err := s.Tasks.Update(context.WithoutCancel(ctx), id, func(r *task.Record) error {
		if r.State.Terminal() {
			return errSkip // the first terminal state wins
		}
		now := time.Now().UTC()
		if err := r.MoveBy(now, task.EventCancel, source, reason, "", by); err != nil {
			return err
		}
		r.History[len(r.History)-1].Note = note // a terminal move is always recorded
		moved = true
		switch {
		case r.AgentTaskID != "":
			r.Outbox = cancelOutbox(r, now)
		case r.Outbox != nil && r.Outbox.MessageID == task.BriefMessageID(r.ID):
			// The agent may have the brief without a2ad knowing its task
			// id (the reply was lost): the brief goes out once more, with
			// the same messageId, to learn it, and CancelTask follows. An
			// agent that has it starts nothing new.
			r.Outbox.CancelOnReply = true
		default:
			r.Outbox = nil // an undelivered answer is moot now
		}
		return nil
	})
	if err != nil || !moved {
		return orCurrent(r, err)
	}
	if r.Outbox != nil && r.Outbox.Method == a2a.MethodCancelTask {
		return s.deliver(ctx, r, true)
	}
	return r, nil // a brief to learn the agent's id from goes out with the scheduler
}

// outputSchemas are the output schemas configured for the agent's skill
// (OutputSchemas), and whether any are.
func (s *Service) outputSchemas(agent, skill string) ([]string, bool) {
	if l, ok := s.OutputSchemas[agent+"/"+skill]; ok {
		return l, true
	}
	l, ok := s.OutputSchemas[agent+"/*"]
	return l, ok
}

// OutputSchemasFor are the names of the host schemas a delegation to the
// agent's skill may name as its output schema: those configured
// (OutputSchemas) that are in force, else every host schema in force;
// sorted as configured, or by name.
func (s *Service) OutputSchemasFor(agent, skill string) []string {
	if l, ok := s.outputSchemas(agent, skill); ok {
		out := make([]string, 0, len(l))
		for _, n := range l {
			if _, err := s.Schemas.Get(n); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	if n := s.Schemas.Names(); n != nil {
		return n
	}
	return []string{}
}

// EvidenceSchemaFor is the name of the host schema the evidence of a
// delegation to the agent's skill must satisfy, "" when none is
// configured (EvidenceSchemas).
func (s *Service) EvidenceSchemaFor(agent, skill string) string {
	return s.EvidenceSchemas[agent+"/"+skill]
}

// SchemaNotAllowedError refuses a delegation whose output schema is not
// one of those configured for the agent's skill (OutputSchemas); Allowed
// lists them.
type SchemaNotAllowedError struct {
	Agent, Skill, Schema string
	Allowed              []string
}

func (e *SchemaNotAllowedError) Error() string {
	return fmt.Sprintf("output schema %q is not allowed for skill %s of agent %s; allowed: %s", e.Schema, e.Skill, e.Agent, strings.Join(e.Allowed, ", "))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// EvidenceError means the evidence does not satisfy the skill's evidence
// schema. It names pointers and keywords only.
type EvidenceError struct {
	Schema     string
	Violations []artifact.Violation
}

func (e *EvidenceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "evidence does not satisfy host schema %s:", e.Schema)
	for _, v := range e.Violations {
		fmt.Fprintf(&b, " /evidence%s (%s);", v.Pointer, v.Keyword)
	}
	return strings.TrimSuffix(b.String(), ";")
}
