// Package task keeps delegated tasks: the record, the lifecycle state machine
// (looplab/fsm), the store on a JetStream KV bucket with compare-and-swap, and
// the tracker that applies agent events. The KV record is the single source
// of truth: no task state lives only in memory.
package task

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/a2a"
)

// Reasons recorded with a terminal state or a refused transition.
const (
	ReasonArtifactRejected = "artifact_rejected"
	ReasonArtifactMissing  = "artifact_missing"
	ReasonArtifactTooLarge = "artifact_too_large"
	ReasonDeadlineExceeded = "deadline_exceeded"
	ReasonCanceledByHost   = "canceled_by_host"
	// ReasonCanceledByOperator ends a task an operator canceled through
	// the admin API (a2ad tasks cancel); the transition's By is the
	// operator's token subject and its Note their reason.
	ReasonCanceledByOperator = "canceled_by_operator"
	ReasonAgentFailed        = "agent_failed"
	ReasonAgentRejected      = "agent_rejected"
	// ReasonDeliveryUnknown ends a task whose brief or answer went to an
	// agent that does not deduplicate messageId (an HTTP agent) with an
	// unknown outcome, when a2ad cannot tell whether the agent has it:
	// it is never sent twice (docs/http-binding.md §5).
	ReasonDeliveryUnknown = "delivery_unknown"
)

// Sources of a transition.
const (
	SourceAgent  = "agent"
	SourceHost   = "host"
	SourceDaemon = "daemon"
	// SourceOperator is an operator's action through the admin API
	// (scope a2a:admin); By is their token subject.
	SourceOperator = "operator"
)

// Transition is one entry of a task's history: an applied or refused move.
type Transition struct {
	At      time.Time `json:"at"`
	From    State     `json:"from"`
	To      State     `json:"to"`
	Event   string    `json:"event"`
	Source  string    `json:"source"`
	Reason  string    `json:"reason,omitempty"`
	Refused bool      `json:"refused,omitempty"`
	// Pointer is, for a refused agent event, the RFC 6901 JSON pointer of
	// the member at fault in the event (e.g. "/statusUpdate/status/state"),
	// also named in Reason; "" when the event as a whole is at fault.
	Pointer string `json:"pointer,omitempty"`
	MsgID   string `json:"msg_id,omitempty"`
	// By is the subject of the host principal behind a host transition
	// (submit, answer, cancel), or of the operator's token behind an
	// operator's (source operator): tasks are shared within their tenant.
	By string `json:"by,omitempty"`
	// Note is the text an operator gave with their action (a2ad tasks
	// cancel --reason), at most 1024 bytes; the same text is in the audit
	// record of the transition.
	Note string `json:"note,omitempty"`
}

// Artifact is a validated artifact as hosts receive it.
type Artifact struct {
	ArtifactID string     `json:"artifact_id"`
	Name       string     `json:"name,omitempty"`
	Parts      []a2a.Part `json:"parts"`
}

// Record is a delegated task as stored under its ID in the KV bucket.
// Pending holds artifact content not yet validated; it is never shown to a
// host, and rejected content is dropped from the record.
type Record struct {
	ID          string `json:"task_id"`
	Tenant      string `json:"tenant"`
	Subject     string `json:"subject"`
	AgentID     string `json:"agent_id"`
	Skill       string `json:"skill"`
	AgentTaskID string `json:"agent_task_id,omitempty"`
	// AgentReplica names the replica of the agent that holds its task (one
	// NATS token), from the A2ad-Replica header of the SendMessage reply
	// that created it; "" when the agent sent none. The task's later
	// requests go to that replica first (docs/nats-binding.md §5.8).
	AgentReplica string `json:"agent_replica,omitempty"`
	ContextID    string `json:"context_id,omitempty"`
	BriefDigest  string `json:"brief_digest"`
	OutputSchema string `json:"output_schema"`
	SchemaDigest string `json:"schema_digest"`
	// DroppedEvidence lists, as JSON pointers into the host's evidence, the
	// members the agent's evidence allowlist kept out of the brief.
	DroppedEvidence []string           `json:"dropped_evidence,omitempty"`
	IdempotencyKey  string             `json:"idempotency_key,omitempty"`
	State           State              `json:"state"`
	Reason          string             `json:"reason,omitempty"`
	StatusMessage   string             `json:"status_message,omitempty"`
	Question        string             `json:"question,omitempty"`
	Artifacts       []Artifact         `json:"artifacts,omitempty"`
	Verdicts        []artifact.Verdict `json:"verdicts,omitempty"`
	Pending         []a2a.Artifact     `json:"pending,omitempty"`
	// PendingChunks says, for each Pending artifact (same index), how its
	// chunks arrived (A2A append / lastChunk).
	PendingChunks []Chunks     `json:"pending_chunks,omitempty"`
	Turns         int          `json:"turns"`
	Deadline      time.Time    `json:"deadline"`
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`
	History       []Transition `json:"history"`
	// EndedAt is when the task reached its terminal state (zero while open,
	// and in records of earlier versions): its retention counts from it.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// RefusedUnrecorded counts refusals beyond MaxRefusedHistory, which
	// the history does not hold.
	RefusedUnrecorded int `json:"refused_unrecorded,omitempty"`
	// HistoryUnrecorded counts applied transitions beyond MaxHistory
	// entries, which the history does not hold (the state does): an agent
	// flapping between working and an interrupted state must not grow the
	// record without bound.
	HistoryUnrecorded int `json:"history_unrecorded,omitempty"`
	// EventsUnrecorded counts the agent's events that were not applied
	// because the record would have outgrown MaxAgentRecordBytes.
	EventsUnrecorded int `json:"events_unrecorded,omitempty"`
	// Applied holds the Nats-Msg-Ids of the last events applied, so a
	// redelivered event changes nothing.
	Applied []string `json:"applied,omitempty"`
	// EventSeq is the highest event sequence applied, from event ids of the
	// binding's form "<taskId>.<seq>" (docs/nats-binding.md §6.3).
	EventSeq int `json:"event_seq,omitempty"`
	// Skipped holds sequences passed over when an event waited for them too
	// long: should one still come, it is applied rather than taken for a
	// duplicate (the most recent 64).
	Skipped []int `json:"skipped,omitempty"`
	// TraceParent is the W3C traceparent of a2ad's span for the
	// delegation (a child of the host's, when the host sent one): every
	// request to the agent for this task carries it (docs/nats-binding.md §4).
	TraceParent string `json:"traceparent,omitempty"`
	// Outbox is a request to the agent that the state above already
	// assumes but the agent has not yet acknowledged (a transactional
	// outbox: written in the same compare-and-swap as the state change that
	// needs it, cleared when the agent answered). Any instance redelivers it
	// once NotBefore has passed; docs/durability.md gives the order of writes.
	Outbox *Outbound `json:"outbox,omitempty"`
	// Binding is the binding a2ad delegated the task over, fixed at
	// delegation: "" for a2ad's NATS binding, else the card's
	// protocolBinding of the HTTP interface chosen ("JSONRPC",
	// "HTTP+JSON"; docs/http-binding.md).
	Binding string `json:"binding,omitempty"`
	// Follow is the lease of the a2ad instance that follows an open task
	// of an HTTP agent (stream, polls, push): one instance at a time;
	// another takes over once Until has passed (docs/http-binding.md §6).
	Follow *FollowLease `json:"follow,omitempty"`
	// QuestionSchema is, while input-required, the form the agent gave for
	// the answer (a data part of mediaType application/schema+json in its
	// status message, docs/nats-binding.md §6.7), as a2ad re-encoded it
	// ([artifact.ParseQuestionForm]: at most artifact.MaxFormBytes of the
	// agent's, within MCP elicitation's subset); nil for a free-text
	// question. Set and cleared with Question.
	QuestionSchema json.RawMessage `json:"question_schema,omitempty"`
	// QuestionSchemaNote says, in a2ad's words, why a schema the agent
	// gave with its question was not taken (the question is then asked as
	// free text): the *artifact.FormError's text.
	QuestionSchemaNote string `json:"question_schema_note,omitempty"`
	// Exchanges are the questions answered so far and their answers, the
	// newest MaxExchanges, each clipped (AddExchange): for operators.
	Exchanges []Exchange `json:"exchanges,omitempty"`
}

// FollowLease is who follows an HTTP agent's task, until when.
type FollowLease struct {
	// Owner is the following instance's id (random per process).
	Owner string `json:"owner"`
	// Until is when the lease ends unless renewed.
	Until time.Time `json:"until"`
	// Mode is how the owner follows: "stream" (SubscribeToTask), "poll"
	// (GetTask), with "+push" when push notifications are configured.
	Mode string `json:"mode,omitempty"`
}

// HTTP reports whether the task was delegated over an HTTP binding.
func (r *Record) HTTP() bool { return r.Binding != "" }

// BriefMessageID is the messageId of the SendMessage that carries task id's
// brief (turn 1); answers carry "<id>-m<turn>".
func BriefMessageID(id string) string { return id + "-m1" }

// Outbound is one request to the agent awaiting its answer.
type Outbound struct {
	// Method is the A2A 1.0 method: SendMessage (a brief or an answer) or
	// CancelTask.
	Method string `json:"method"`
	// MessageID is the SendMessage message's messageId, stable per task and
	// turn ("<taskId>-m<turn>"), so the agent recognises a redelivery.
	MessageID string `json:"message_id,omitempty"`
	// Params are the JSON-RPC params exactly as sent. They carry the brief
	// or the answer only until the agent acknowledged them.
	Params json.RawMessage `json:"params,omitempty"`
	// Question is the question an answer replies to, restored if the agent
	// refuses the answer.
	Question string `json:"question,omitempty"`
	// QuestionSchema is that question's form (Record.QuestionSchema),
	// restored with it.
	QuestionSchema json.RawMessage `json:"question_schema,omitempty"`
	// Attempts counts deliveries begun, the first included.
	Attempts int `json:"attempts"`
	// NotBefore is when another delivery may begin: the lease of the
	// instance delivering now, or the backoff after a failed attempt.
	NotBefore time.Time `json:"not_before"`
	// LastError is why the last attempt did not complete.
	LastError string `json:"last_error,omitempty"`
	// CancelOnReply marks a brief of a task canceled before the agent's
	// task id was known: it is redelivered only to learn that id, and
	// CancelTask follows the agent's answer.
	CancelOnReply bool `json:"cancel_on_reply,omitempty"`
	// Unreached marks the last attempt as provably not delivered (nothing
	// reached the agent: no responder, a connection refused), so the next
	// one needs no reconciliation. A claim clears it.
	Unreached bool `json:"unreached,omitempty"`
	// Reconcile is set by the claim of an attempt whose predecessor's
	// outcome is unknown (it timed out, or its instance died): over a
	// binding whose agents do not deduplicate messageId, a2ad asks the
	// agent what it holds before sending again (docs/http-binding.md §5).
	Reconcile bool `json:"reconcile,omitempty"`
	// SentAt is when the message last went out, or an attempt began that
	// may have sent it: over a binding whose agents do not deduplicate
	// messageId, "the agent has no such task" is proof only long enough
	// after it (docs/http-binding.md §5).
	SentAt time.Time `json:"sent_at,omitzero"`
	// Unanswered marks a message one of whose sends was written to the
	// agent and never answered (a timeout, a reset): the agent may still
	// be working on it, so finding no task is no proof it has none.
	Unanswered bool `json:"unanswered,omitempty"`
}

// Chunks is how one artifact's chunks arrived (A2A 1.0
// TaskArtifactUpdateEvent append and lastChunk; events are applied in the
// binding's per-task order, so arrival order is the agent's order).
type Chunks struct {
	// Appends counts the chunks appended after the first.
	Appends int `json:"appends,omitempty"`
	// Last is set once a chunk said lastChunk: the artifact is sealed, and
	// a later update of it is refused.
	Last bool `json:"last,omitempty"`
	// Fault names a chunk sequence a2ad cannot assemble faithfully, which
	// rejects the artifact: "chunk_without_start" (an append to an artifact
	// never begun, e.g. a lost first chunk), or "chunk_after_last" in a
	// record written before sealed artifacts refused later chunks.
	Fault string `json:"fault,omitempty"`
}

// Clone returns a copy that shares no slice or outbox with r, so the copy
// can change without changing r.
func (r *Record) Clone() *Record {
	c := *r
	c.History = slices.Clone(r.History)
	c.Artifacts = slices.Clone(r.Artifacts)
	c.Verdicts = slices.Clone(r.Verdicts)
	c.Pending = slices.Clone(r.Pending)
	c.PendingChunks = slices.Clone(r.PendingChunks)
	c.Applied = slices.Clone(r.Applied)
	c.Skipped = slices.Clone(r.Skipped)
	c.QuestionSchema = slices.Clone(r.QuestionSchema)
	c.Exchanges = slices.Clone(r.Exchanges)
	if r.Outbox != nil {
		o := *r.Outbox
		c.Outbox = &o
	}
	if r.Follow != nil {
		f := *r.Follow
		c.Follow = &f
	}
	return &c
}

// Redacted returns a copy fit for operators' eyes: no unvalidated artifact
// content and no brief or answer bytes waiting in the outbox.
func (r *Record) Redacted() *Record {
	c := *r
	c.Pending = nil
	if r.Outbox != nil {
		o := *r.Outbox
		o.Params = nil
		c.Outbox = &o
	}
	return &c
}

const maxApplied = 64

func (r *Record) seen(msgID string) bool { return msgID != "" && slices.Contains(r.Applied, msgID) }

func (r *Record) skipped(n int) bool { return slices.Contains(r.Skipped, n) }

// skip records the sequences from through to-1 as passed over.
func (r *Record) skip(from, to int) {
	from = max(from, to-maxApplied, 1)
	for n := from; n < to; n++ {
		r.Skipped = append(r.Skipped, n)
	}
	if len(r.Skipped) > maxApplied {
		r.Skipped = r.Skipped[len(r.Skipped)-maxApplied:]
	}
}

func (r *Record) remember(msgID string) {
	if msgID == "" {
		return
	}
	r.Applied = append(r.Applied, msgID)
	if len(r.Applied) > maxApplied {
		r.Applied = r.Applied[len(r.Applied)-maxApplied:]
	}
}

// Move applies event from the record's state through the FSM and records the
// outcome in History. On refusal the state is unchanged and the refusal is
// recorded; the error wraps ErrIllegalTransition.
func (r *Record) Move(now time.Time, event, source, reason, msgID string) error {
	return r.MoveBy(now, event, source, reason, msgID, "")
}

// MoveBy is [Record.Move] for a host transition: by is the subject of the
// principal behind it, kept in its history entry.
//
// History keeps at most MaxHistory entries and, beyond them, the terminal
// transition: later applied transitions change the state and are counted
// in HistoryUnrecorded, later refusals in RefusedUnrecorded.
func (r *Record) MoveBy(now time.Time, event, source, reason, msgID, by string) error {
	from := r.State
	to, err := Fire(from, event)
	if err != nil {
		r.refuse(Transition{At: now, From: from, To: from, Event: event, Source: source,
			Reason: "refused: " + event + " is not allowed from " + string(from), Refused: true, MsgID: msgID})
		return err
	}
	r.State = to
	if to.Terminal() && !from.Terminal() {
		r.EndedAt = now
	}
	if to.Terminal() || reason != "" {
		r.Reason = reason
	}
	if !to.Interrupted() {
		r.Question = ""
	}
	if to != InputRequired {
		r.QuestionSchema, r.QuestionSchemaNote = nil, ""
	}
	if to.Terminal() || len(r.History) < MaxHistory {
		r.History = append(r.History, Transition{At: now, From: from, To: to, Event: event, Source: source, Reason: reason, MsgID: msgID, By: by})
	} else {
		r.HistoryUnrecorded++
	}
	r.UpdatedAt = now
	return nil
}

// MaxRefusedHistory bounds the refusals a task's history records: an agent
// flooding a task with bad events must not grow its record past what one
// NATS message holds. Later refusals are only counted (RefusedUnrecorded).
const MaxRefusedHistory = 32

// MaxHistory bounds the entries of a task's history, refusals included;
// only a terminal transition is recorded beyond it.
const MaxHistory = 256

// refuse records a refused transition, or only counts it once
// MaxRefusedHistory refusals or MaxHistory entries are recorded.
func (r *Record) refuse(tr Transition) {
	n := 0
	for _, h := range r.History {
		if h.Refused {
			n++
		}
	}
	if n < MaxRefusedHistory && len(r.History) < MaxHistory {
		r.History = append(r.History, tr)
	} else {
		r.RefusedUnrecorded++
	}
	r.UpdatedAt = tr.At
}

func encode(r *Record) ([]byte, error) { return json.Marshal(r) }

func decode(b []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
