// Package a2a holds the A2A 1.0 wire types a2ad speaks on its NATS binding:
// messages, parts, tasks, stream items and JSON-RPC 2.0 envelopes, in their
// ProtoJSON (camelCase) shape. It is a small codec, not an SDK: a2ad owns it
// because the only Go SDK served here speaks A2A 0.3.
//
// Source: A2A specification 1.0 (a2aproject/A2A, specification/a2a.proto and
// docs/specification.md §4 "Protocol data objects", §9 "JSON-RPC binding").
package a2a

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// Version is the A2A protocol version this binding speaks; it is sent in the
// A2A-Version header of every request.
const Version = "1.0"

// Method names of A2A 1.0 (JSON-RPC binding, §9.4).
const (
	MethodSendMessage = "SendMessage"
	MethodGetTask     = "GetTask"
	MethodCancelTask  = "CancelTask"
)

// TaskState is a task's state as spelled on the wire in A2A 1.0
// (TASK_STATE_*). The 0.3 spellings ("working", …) are a decode error.
type TaskState string

// The A2A 1.0 task states (§4.1.3).
const (
	TaskStateUnspecified   TaskState = "TASK_STATE_UNSPECIFIED"
	TaskStateSubmitted     TaskState = "TASK_STATE_SUBMITTED"
	TaskStateWorking       TaskState = "TASK_STATE_WORKING"
	TaskStateInputRequired TaskState = "TASK_STATE_INPUT_REQUIRED"
	TaskStateAuthRequired  TaskState = "TASK_STATE_AUTH_REQUIRED"
	TaskStateCompleted     TaskState = "TASK_STATE_COMPLETED"
	TaskStateFailed        TaskState = "TASK_STATE_FAILED"
	TaskStateCanceled      TaskState = "TASK_STATE_CANCELED"
	TaskStateRejected      TaskState = "TASK_STATE_REJECTED"
)

// ErrDecode is wrapped by every decode error of this package.
var ErrDecode = errors.New("a2a: malformed payload")

// ErrAgentUnreachable means a request provably never reached the agent
// (no NATS responder, a TCP connection refused): it may be sent again
// without asking the agent first. Each binding wraps it with its own
// words (natsbind.ErrAgentOffline, httpbind).
var ErrAgentUnreachable = errors.New("agent offline")

// UnmarshalJSON accepts only the A2A 1.0 enum names; TASK_STATE_UNSPECIFIED is
// refused too, since no task is ever in it.
func (s *TaskState) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: task state must be a string", ErrDecode)
	}
	switch TaskState(v) {
	case TaskStateSubmitted, TaskStateWorking, TaskStateInputRequired, TaskStateAuthRequired,
		TaskStateCompleted, TaskStateFailed, TaskStateCanceled, TaskStateRejected:
		*s = TaskState(v)
		return nil
	}
	return fmt.Errorf("%w: unknown task state (A2A 1.0 spells states TASK_STATE_*)", ErrDecode)
}

// Role is the sender of a message: ROLE_USER (the client, here a2ad) or
// ROLE_AGENT.
type Role string

// A2A 1.0 roles.
const (
	RoleUser  Role = "ROLE_USER"
	RoleAgent Role = "ROLE_AGENT"
)

// UnmarshalJSON accepts only the A2A 1.0 role names.
func (r *Role) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: role must be a string", ErrDecode)
	}
	if Role(v) != RoleUser && Role(v) != RoleAgent {
		return fmt.Errorf("%w: unknown role (A2A 1.0 spells roles ROLE_*)", ErrDecode)
	}
	*r = Role(v)
	return nil
}

// Part is one piece of content (§4.1.6): exactly one of Text, Raw, URL or
// Data is set. Raw is base64 on the wire ([]byte does that).
type Part struct {
	Text      *string         `json:"text,omitempty"`
	Raw       []byte          `json:"raw,omitempty"`
	URL       *string         `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// Kind names which content a part carries: "text", "raw", "url" or "data".
func (p Part) Kind() string {
	switch {
	case p.Text != nil:
		return "text"
	case p.Raw != nil:
		return "raw"
	case p.URL != nil:
		return "url"
	case p.Data != nil:
		return "data"
	}
	return ""
}

// TextPart returns a text part.
func TextPart(s string) Part { return Part{Text: &s} }

// DataPart returns a data part carrying v, which must already be JSON.
func DataPart(v json.RawMessage) Part { return Part{Data: v, MediaType: "application/json"} }

// validate checks that exactly one content field is set.
func (p Part) validate(ptr string) error {
	n := 0
	for _, set := range []bool{p.Text != nil, p.Raw != nil, p.URL != nil, p.Data != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return decodeErr(ptr, fmt.Sprintf("a part must carry exactly one of text, raw, url, data (has %d)", n))
	}
	return nil
}

// Message is one turn of communication (§4.1.4).
type Message struct {
	MessageID        string          `json:"messageId"`
	ContextID        string          `json:"contextId,omitempty"`
	TaskID           string          `json:"taskId,omitempty"`
	Role             Role            `json:"role"`
	Parts            []Part          `json:"parts"`
	Metadata         json.RawMessage `json:"metadata,omitempty"`
	Extensions       []string        `json:"extensions,omitempty"`
	ReferenceTaskIDs []string        `json:"referenceTaskIds,omitempty"`
}

// Text joins the message's text parts with newlines.
func (m *Message) Text() string {
	if m == nil {
		return ""
	}
	var b bytes.Buffer
	for _, p := range m.Parts {
		if p.Text != nil {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(*p.Text)
		}
	}
	return b.String()
}

func (m *Message) validate(ptr string) error {
	if m.MessageID == "" {
		return decodeErr(ptr+"/messageId", "message without messageId")
	}
	if m.Role == "" {
		return decodeErr(ptr+"/role", "message without role")
	}
	for i, p := range m.Parts {
		if err := p.validate(ptr + "/parts/" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

// TaskStatus is a task's state with an optional message and its time (§4.1.2).
// Timestamp is RFC 3339.
type TaskStatus struct {
	State     TaskState `json:"state"`
	Message   *Message  `json:"message,omitempty"`
	Timestamp string    `json:"timestamp,omitempty"`
}

// Artifact is an output of a task (§4.1.7). It has at least one part.
type Artifact struct {
	ArtifactID  string          `json:"artifactId"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parts       []Part          `json:"parts"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Extensions  []string        `json:"extensions,omitempty"`
}

func (a *Artifact) validate(ptr string) error {
	if a.ArtifactID == "" {
		return decodeErr(ptr+"/artifactId", "artifact without artifactId")
	}
	if len(a.Parts) == 0 {
		return decodeErr(ptr+"/parts", "an artifact has no parts")
	}
	for i, p := range a.Parts {
		if err := p.validate(ptr + "/parts/" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

// Task is the agent's view of a unit of work (§4.1.1). Its ID is the agent's.
type Task struct {
	ID        string          `json:"id"`
	ContextID string          `json:"contextId,omitempty"`
	Status    TaskStatus      `json:"status"`
	Artifacts []Artifact      `json:"artifacts,omitempty"`
	History   []Message       `json:"history,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

func (t *Task) validate(ptr string) error {
	if t.ID == "" {
		return decodeErr(ptr+"/id", "task without id")
	}
	if t.Status.State == "" {
		return decodeErr(ptr+"/status/state", "task without status.state")
	}
	if t.Status.Message != nil {
		if err := t.Status.Message.validate(ptr + "/status/message"); err != nil {
			return err
		}
	}
	for i := range t.Artifacts {
		if err := t.Artifacts[i].validate(ptr + "/artifacts/" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

// TaskStatusUpdateEvent reports a state change (§4.2.1).
type TaskStatusUpdateEvent struct {
	TaskID    string          `json:"taskId"`
	ContextID string          `json:"contextId,omitempty"`
	Status    TaskStatus      `json:"status"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// TaskArtifactUpdateEvent delivers an artifact or a chunk of one (§4.2.2).
type TaskArtifactUpdateEvent struct {
	TaskID    string          `json:"taskId"`
	ContextID string          `json:"contextId,omitempty"`
	Artifact  Artifact        `json:"artifact"`
	Append    bool            `json:"append,omitempty"`
	LastChunk bool            `json:"lastChunk,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// StreamResponse is one item of a task's event stream (§4.2.3): exactly one
// field is set.
type StreamResponse struct {
	Task           *Task                    `json:"task,omitempty"`
	Message        *Message                 `json:"message,omitempty"`
	StatusUpdate   *TaskStatusUpdateEvent   `json:"statusUpdate,omitempty"`
	ArtifactUpdate *TaskArtifactUpdateEvent `json:"artifactUpdate,omitempty"`
}

// DecodeStreamResponse strictly decodes one stream item: unknown fields, 0.3
// spellings, more or fewer than one item kind, and missing required fields
// are errors wrapping [ErrDecode]. Errors never quote more than a few bytes of
// the input.
func DecodeStreamResponse(b []byte) (*StreamResponse, error) {
	var s StreamResponse
	if err := strictUnmarshal(b, &s); err != nil {
		return nil, located(err, b, reflect.TypeFor[StreamResponse](), "")
	}
	n := 0
	if s.Task != nil {
		n++
		if err := s.Task.validate("/task"); err != nil {
			return nil, err
		}
	}
	if s.Message != nil {
		n++
		if err := s.Message.validate("/message"); err != nil {
			return nil, err
		}
	}
	if s.StatusUpdate != nil {
		n++
		u := s.StatusUpdate
		switch {
		case u.TaskID == "":
			return nil, decodeErr("/statusUpdate/taskId", "statusUpdate needs taskId and status.state")
		case u.Status.State == "":
			return nil, decodeErr("/statusUpdate/status/state", "statusUpdate needs taskId and status.state")
		}
		if u.Status.Message != nil {
			if err := u.Status.Message.validate("/statusUpdate/status/message"); err != nil {
				return nil, err
			}
		}
	}
	if s.ArtifactUpdate != nil {
		n++
		if s.ArtifactUpdate.TaskID == "" {
			return nil, decodeErr("/artifactUpdate/taskId", "artifactUpdate needs taskId")
		}
		if err := s.ArtifactUpdate.Artifact.validate("/artifactUpdate/artifact"); err != nil {
			return nil, err
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: a stream item carries exactly one of task, message, statusUpdate, artifactUpdate (has %d)", ErrDecode, n)
	}
	return &s, nil
}

// SendMessageConfiguration is the optional configuration of SendMessage.
type SendMessageConfiguration struct {
	AcceptedOutputModes []string `json:"acceptedOutputModes,omitempty"`
	ReturnImmediately   bool     `json:"returnImmediately,omitempty"`
}

// SendMessageRequest is the params of SendMessage (§7.1).
type SendMessageRequest struct {
	Message       Message                   `json:"message"`
	Configuration *SendMessageConfiguration `json:"configuration,omitempty"`
	Metadata      json.RawMessage           `json:"metadata,omitempty"`
}

// SendMessageResponse is the result of SendMessage: a Task (a2ad's binding
// always expects one, since it asks for returnImmediately).
type SendMessageResponse struct {
	Task    *Task    `json:"task,omitempty"`
	Message *Message `json:"message,omitempty"`
}

// GetTaskRequest is the params of GetTask (§7.3).
type GetTaskRequest struct {
	ID            string `json:"id"`
	HistoryLength *int   `json:"historyLength,omitempty"`
}

// CancelTaskRequest is the params of CancelTask (§7.5).
type CancelTaskRequest struct {
	ID string `json:"id"`
}

// DecodeSendMessageResponse strictly decodes a SendMessage result.
func DecodeSendMessageResponse(b []byte) (*SendMessageResponse, error) {
	var r SendMessageResponse
	if err := strictUnmarshal(b, &r); err != nil {
		return nil, err
	}
	if (r.Task == nil) == (r.Message == nil) {
		return nil, fmt.Errorf("%w: SendMessage result carries exactly one of task, message", ErrDecode)
	}
	if r.Task != nil {
		if err := r.Task.validate("/task"); err != nil {
			return nil, err
		}
	} else if err := r.Message.validate("/message"); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeTask strictly decodes a Task (the result of GetTask and CancelTask).
func DecodeTask(b []byte) (*Task, error) {
	var t Task
	if err := strictUnmarshal(b, &t); err != nil {
		return nil, err
	}
	if err := t.validate(""); err != nil {
		return nil, err
	}
	return &t, nil
}

// describeJSONError says what encoding/json refused in a2ad's own words:
// its messages quote the payload (an unknown field's name, a value), which
// is agent text and must not reach logs, task reasons or hosts.
func describeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var be base64.CorruptInputError
	switch {
	case errors.As(err, &be):
		return "a member is not valid base64"
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		return "a member has the wrong JSON type" // te.Field is a Go path the agent chose
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return "an unknown member (A2A 1.0 objects are closed)"
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "truncated JSON"
	}
	return "not a valid A2A 1.0 payload"
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, ErrDecode) {
			return err
		}
		return fmt.Errorf("%w: %s", ErrDecode, describeJSONError(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after JSON value", ErrDecode)
	}
	return nil
}
