// Package broker is a2ad's application service: it turns a host's request
// into a delegation (agent lookup, brief, task record, SendMessage), follows
// it, and answers, resumes and cancels it. The MCP edge, the admin API and
// the demo all call it; it knows nothing of MCP.
package broker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go/jetstream"
)

// Principal is who calls: it comes from the transport (a verified token on
// HTTP, the launching configuration on stdio), never from tool arguments.
type Principal struct {
	Subject string
	Tenant  string
	Scopes  []string
}

// Errors a host can act on.
var (
	ErrIdempotencyConflict = errors.New("idempotency_key already used for a different brief")
	ErrNotInterrupted      = errors.New("task is not waiting for an answer")
	ErrTerminal            = errors.New("task already ended")
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
	Schemas *artifact.Registry
	Tasks   *task.Store
	Client  *natsbind.Client
	Log     *slog.Logger
	Limits  brief.Limits
	// EvidenceSchemas maps "agentId/skillId" to a host schema the evidence
	// must satisfy before anything is sent.
	EvidenceSchemas map[string]string
	idem            jetstream.KeyValue

	timersMu sync.Mutex
	timers   map[string]*time.Timer
}

// IdempotencyBucket maps (tenant, idempotency key) to a task.
const IdempotencyBucket = "a2ad_idempotency"

// Init binds the idempotency bucket and arms deadline timers for every open
// task in the store (so deadlines survive restarts).
func (s *Service) Init(ctx context.Context, js jetstream.JetStream, replicas int) error {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: IdempotencyBucket, Description: "a2ad idempotency keys per tenant", History: 1,
		Replicas: max(1, replicas), TTL: 24 * time.Hour, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("broker: KV bucket %s: %w", IdempotencyBucket, err)
	}
	s.idem = kv
	s.timers = map[string]*time.Timer{}
	recs, err := s.Tasks.List(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if !r.State.Terminal() {
			s.armDeadline(r.ID, r.Deadline)
		}
	}
	return nil
}

// Close stops deadline timers.
func (s *Service) Close() {
	s.timersMu.Lock()
	defer s.timersMu.Unlock()
	for id, t := range s.timers {
		t.Stop()
		delete(s.timers, id)
	}
}

func newTaskID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "tsk-" + hex.EncodeToString(b[:])
}

// Delegate validates the request, stores a submitted task and sends the
// brief to the agent. Errors: agentcard.ErrAgentNotFound, *agentcard.NotDelegableError,
// agentcard.ErrSkillNotFound, artifact.ErrSchemaNotFound, *brief.Error,
// *EvidenceError, natsbind.ErrAgentOffline, ErrIdempotencyConflict. On any
// error no task remains.
func (s *Service) Delegate(ctx context.Context, p Principal, req DelegateRequest) (*task.Record, error) {
	if _, _, err := s.Agents.ForDelegation(ctx, p.Tenant, req.Agent, req.Skill); err != nil {
		if errors.Is(err, agentcard.ErrAgentNotFound) {
			return nil, fmt.Errorf("%w: no agent %q is visible to this principal", err, req.Agent)
		}
		return nil, err
	}
	schema, err := s.Schemas.Get(req.Brief.OutputSchema)
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
	b, err := brief.Build(req.Brief, brief.OutputSchema{Name: schema.Name, Digest: schema.Digest, Document: schema.Document}, s.Limits)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	r := &task.Record{
		ID: newTaskID(), Tenant: p.Tenant, Subject: p.Subject, AgentID: req.Agent, Skill: req.Skill,
		BriefDigest: b.Digest(), OutputSchema: schema.Name, SchemaDigest: schema.Digest,
		IdempotencyKey: req.IdempotencyKey, State: task.Submitted, Turns: 1,
		Deadline:  now.Add(time.Duration(b.Budget.DeadlineSeconds) * time.Second),
		CreatedAt: now, UpdatedAt: now,
		History: []task.Transition{{At: now, To: task.Submitted, Event: "submit", Source: task.SourceHost}},
	}
	var idemKey string
	if req.IdempotencyKey != "" {
		idemKey = idempotencyKVKey(p.Tenant, req.IdempotencyKey)
		val, _ := json.Marshal(idemEntry{TaskID: r.ID, BriefDigest: b.Digest(), Agent: req.Agent, Skill: req.Skill})
		if _, err := s.idem.Create(ctx, idemKey, val); err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return nil, fmt.Errorf("idempotency: %w", err)
			}
			return s.replay(ctx, p, idemKey, b.Digest(), req)
		}
	}
	if err := s.Tasks.Create(ctx, r); err != nil {
		s.dropIdem(idemKey)
		return nil, err
	}
	if err := s.send(ctx, r, b); err != nil {
		// Nothing reached the agent: remove the record so no half-created task remains.
		_ = s.Tasks.Delete(context.WithoutCancel(ctx), r.ID)
		s.dropIdem(idemKey)
		return nil, err
	}
	s.armDeadline(r.ID, r.Deadline)
	got, _, err := s.Tasks.Get(ctx, r.ID)
	return got, err
}

type idemEntry struct {
	TaskID      string `json:"task_id"`
	BriefDigest string `json:"brief_digest"`
	Agent       string `json:"agent"`
	Skill       string `json:"skill"`
}

func idempotencyKVKey(tenant, key string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + key))
	return hex.EncodeToString(h[:])
}

func (s *Service) dropIdem(key string) {
	if key != "" {
		_ = s.idem.Delete(context.Background(), key)
	}
}

func (s *Service) replay(ctx context.Context, p Principal, key, digest string, req DelegateRequest) (*task.Record, error) {
	e, err := s.idem.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	var prev idemEntry
	if err := json.Unmarshal(e.Value(), &prev); err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	if prev.BriefDigest != digest || prev.Agent != req.Agent || prev.Skill != req.Skill {
		return nil, ErrIdempotencyConflict
	}
	// The first delegation may still be in flight; wait briefly for its record.
	for range 50 {
		r, err := s.Get(ctx, p, prev.TaskID)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, task.ErrNotFound) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, task.ErrNotFound
}

// metadata names the task and the events subject the agent must publish on.
func metadata(r *task.Record) json.RawMessage {
	m, _ := json.Marshal(map[string]string{
		"a2ad/taskId":        r.ID,
		"a2ad/eventsSubject": natsbind.EventsSubject(r.AgentID, r.ID),
	})
	return m
}

// messageID is stable per task and turn, so a resend is recognisable.
func messageID(r *task.Record, turn int) string { return fmt.Sprintf("%s-m%d", r.ID, turn) }

func (s *Service) send(ctx context.Context, r *task.Record, b *brief.Brief) error {
	md := metadata(r)
	msg := b.Message(messageID(r, 1), "", md)
	res, err := s.Client.Call(ctx, r.AgentID, a2a.MethodSendMessage, a2a.SendMessageRequest{
		Message:       msg,
		Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true, AcceptedOutputModes: []string{"application/json"}},
		Metadata:      md,
	}, nil)
	if err != nil {
		return err
	}
	return s.applyReply(ctx, r.ID, res)
}

// applyReply records the agent's ids from a SendMessage result. The reply is
// a snapshot that may arrive after later events, so it only moves a task
// that is still submitted.
func (s *Service) applyReply(ctx context.Context, id string, res []byte) error {
	resp, err := a2a.DecodeSendMessageResponse(res)
	if err != nil {
		return fmt.Errorf("agent answered SendMessage with an invalid result: %w", err)
	}
	if resp.Task == nil {
		return fmt.Errorf("%w: agent answered SendMessage with a message, not a task", a2a.ErrDecode)
	}
	at := resp.Task
	_, err = s.Tasks.Update(context.WithoutCancel(ctx), id, func(r *task.Record) error {
		changed := false
		if r.AgentTaskID == "" {
			r.AgentTaskID, changed = at.ID, true
		}
		if r.ContextID == "" && at.ContextID != "" {
			r.ContextID, changed = at.ContextID, true
		}
		if to, ok := task.FromWire(at.Status.State); ok && r.State == task.Submitted && to == task.Working {
			return r.Move(time.Now().UTC(), task.EventStart, task.SourceAgent, "", "")
		}
		if !changed {
			return errSkip
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
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
	if wait > MaxWait {
		wait = MaxWait
	}
	ch, stop := s.Tasks.Subscribe(id)
	defer stop()
	r, err := s.Get(ctx, p, id)
	if err != nil || wait <= 0 || r.State.Terminal() || r.State.Interrupted() {
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
		case <-ch:
		}
		nr, err := s.Get(context.WithoutCancel(ctx), p, id)
		if err != nil {
			return r, err
		}
		r = nr
		if onChange != nil && !r.UpdatedAt.Equal(last) {
			onChange(r)
		}
		last = r.UpdatedAt
		if r.State.Terminal() || r.State.Interrupted() {
			return r, nil
		}
	}
}

// Respond answers an interrupted task's question: the task resumes (working)
// and the answer is sent to the agent as a follow-up message in the same
// task and context. ErrNotInterrupted if the task does not wait for an
// answer; if the agent cannot be reached the task stays input-required.
func (s *Service) Respond(ctx context.Context, p Principal, id, answer string) (*task.Record, error) {
	if strings.TrimSpace(answer) == "" {
		return nil, &brief.Error{Field: "/answer", Reason: "required"}
	}
	if len(answer) > 16<<10 {
		return nil, &brief.Error{Field: "/answer", Reason: "longer than 16384 bytes"}
	}
	if _, err := s.Get(ctx, p, id); err != nil {
		return nil, err
	}
	var question string
	var turn int
	r, err := s.Tasks.Update(ctx, id, func(r *task.Record) error {
		if r.State != task.InputRequired {
			return fmt.Errorf("%w (state %s)", ErrNotInterrupted, r.State)
		}
		question = r.Question
		r.Turns++
		turn = r.Turns
		return r.Move(time.Now().UTC(), task.EventResume, task.SourceHost, "answered", "")
	})
	if err != nil {
		return nil, err
	}
	md := metadata(r)
	msg := a2a.Message{MessageID: messageID(r, turn), TaskID: r.AgentTaskID, ContextID: r.ContextID,
		Role: a2a.RoleUser, Parts: []a2a.Part{a2a.TextPart(answer)}, Metadata: md}
	res, err := s.Client.Call(ctx, r.AgentID, a2a.MethodSendMessage, a2a.SendMessageRequest{Message: msg,
		Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true}, Metadata: md}, nil)
	if err == nil {
		_, err = a2a.DecodeSendMessageResponse(res)
	}
	if err != nil {
		// The agent did not take the answer: ask the host again.
		_, _ = s.Tasks.Update(context.WithoutCancel(ctx), id, func(r *task.Record) error {
			if r.State != task.Working {
				return errSkip
			}
			err := r.Move(time.Now().UTC(), task.EventAsk, task.SourceDaemon, "answer not delivered", "")
			r.Question = question
			return err
		})
		return nil, err
	}
	return s.Get(ctx, p, id)
}

// Cancel cancels the task: CancelTask goes to the agent (best effort: an
// offline agent does not keep the task open) and the task records canceled.
// ErrTerminal if it had already ended.
func (s *Service) Cancel(ctx context.Context, p Principal, id string) (*task.Record, error) {
	r, err := s.Get(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if r.State.Terminal() {
		return r, fmt.Errorf("%w (state %s)", ErrTerminal, r.State)
	}
	return s.cancel(ctx, id, task.SourceHost, task.ReasonCanceledByHost)
}

func (s *Service) cancel(ctx context.Context, id, source, reason string) (*task.Record, error) {
	r, _, err := s.Tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.AgentTaskID != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, cerr := s.Client.Call(cctx, r.AgentID, a2a.MethodCancelTask, a2a.CancelTaskRequest{ID: r.AgentTaskID}, nil)
		cancel()
		if cerr != nil {
			s.Log.Info("CancelTask not confirmed by agent; canceling locally", "task", id, "agent", r.AgentID, "err", cerr)
		}
	}
	r, err = s.Tasks.Update(context.WithoutCancel(ctx), id, func(r *task.Record) error {
		if r.State.Terminal() {
			return errSkip // the first terminal state wins
		}
		return r.Move(time.Now().UTC(), task.EventCancel, source, reason, "")
	})
	if errors.Is(err, errSkip) {
		err = nil
	}
	s.disarm(id)
	return r, err
}

func (s *Service) armDeadline(id string, at time.Time) {
	s.timersMu.Lock()
	defer s.timersMu.Unlock()
	if s.timers == nil {
		return
	}
	if old, ok := s.timers[id]; ok {
		old.Stop()
	}
	s.timers[id] = time.AfterFunc(time.Until(at), func() {
		r, _, err := s.Tasks.Get(context.Background(), id)
		if err != nil || r.State.Terminal() {
			s.disarm(id)
			return
		}
		s.Log.Info("deadline exceeded; canceling", "task", id, "agent", r.AgentID)
		if _, err := s.cancel(context.Background(), id, task.SourceDaemon, task.ReasonDeadlineExceeded); err != nil {
			s.Log.Warn("deadline cancel failed", "task", id, "err", err)
		}
	})
}

func (s *Service) disarm(id string) {
	s.timersMu.Lock()
	defer s.timersMu.Unlock()
	if t, ok := s.timers[id]; ok {
		t.Stop()
		delete(s.timers, id)
	}
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
