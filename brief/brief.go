// Package brief builds the minimal task brief a2ad sends to a remote agent:
// objective, evidence, constraints, output schema and budget — and nothing
// else. No conversation, memory, host token or unknown field can reach it:
// [Decode] refuses unknown fields, and [Build] copies only the named ones.
//
// On the wire (docs/nats-binding.md) the brief travels as the data part of one
// A2A 1.0 user message, after a text part carrying the objective.
package brief

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/gowebpki/jcs"
)

// Limits bound a brief. Zero fields take the defaults.
type Limits struct {
	MaxObjectiveBytes   int // default 4 KiB
	MaxEvidenceBytes    int // default 64 KiB
	MaxConstraints      int // default 32
	MaxConstraintBytes  int // default 1 KiB each
	MaxDeadlineSeconds  int // default 86400 (operator-set maximum)
	DefaultDeadlineSecs int // default 600
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxObjectiveBytes, 4<<10)
	def(&l.MaxEvidenceBytes, 64<<10)
	def(&l.MaxConstraints, 32)
	def(&l.MaxConstraintBytes, 1<<10)
	def(&l.MaxDeadlineSeconds, 86400)
	def(&l.DefaultDeadlineSecs, 600)
	return l
}

// Budget bounds the work. DeadlineSeconds counts from delegation; 0 means the
// default (600 s).
type Budget struct {
	DeadlineSeconds int `json:"deadline_seconds"`
}

// Request is what a host may put into a brief: the brief-relevant subset of
// the delegate tool's arguments.
type Request struct {
	Objective    string          `json:"objective"`
	Evidence     json.RawMessage `json:"evidence"`
	Constraints  []string        `json:"constraints,omitempty"`
	OutputSchema string          `json:"output_schema"`
	Budget       Budget          `json:"budget"`
}

// OutputSchema is the host schema the artifact must satisfy, sent whole so the
// agent can comply (it is host-owned, not secret).
type OutputSchema struct {
	Name     string          `json:"name"`
	Digest   string          `json:"digest"`
	Document json.RawMessage `json:"document"`
}

// Brief is the minimal task brief. Its JSON form (see [Brief.Bytes]) is
// exactly what the agent receives in the message's data part.
type Brief struct {
	Objective    string          `json:"objective"`
	Evidence     json.RawMessage `json:"evidence"`
	Constraints  []string        `json:"constraints"`
	OutputSchema OutputSchema    `json:"output_schema"`
	Budget       Budget          `json:"budget"`

	canonical []byte
	digest    string
}

// Error is a brief refused for a reason the host can fix. Field is a JSON
// pointer into the delegate arguments ("/evidence", "/objective").
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return "brief: " + e.Field + ": " + e.Reason }

// ErrInvalid is matched by every *Error via errors.Is.
var ErrInvalid = errors.New("brief: invalid")

// Is makes errors.Is(err, ErrInvalid) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Decode strictly decodes a brief request: unknown fields, trailing data and
// wrong types are an *Error.
func Decode(raw []byte) (*Request, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return nil, &Error{Field: "", Reason: err.Error()}
	}
	if dec.More() {
		return nil, &Error{Field: "", Reason: "trailing data after the JSON object"}
	}
	return &r, nil
}

// Build makes the brief from r and the resolved output schema. It checks
// sizes against lim, requires a non-empty objective, an evidence JSON object,
// and a deadline within (0, MaxDeadlineSeconds]; errors are *Error.
// The returned brief's canonical bytes (RFC 8785) and digest are fixed.
func Build(r Request, schema OutputSchema, lim Limits) (*Brief, error) {
	lim = lim.withDefaults()
	obj := strings.TrimSpace(r.Objective)
	switch {
	case obj == "":
		return nil, &Error{"/objective", "required"}
	case len(obj) > lim.MaxObjectiveBytes:
		return nil, &Error{"/objective", fmt.Sprintf("longer than %d bytes", lim.MaxObjectiveBytes)}
	case !utf8.ValidString(obj):
		return nil, &Error{"/objective", "not valid UTF-8"}
	}
	ev := bytes.TrimSpace(r.Evidence)
	if len(ev) == 0 || ev[0] != '{' {
		return nil, &Error{"/evidence", "must be a JSON object"}
	}
	if len(ev) > lim.MaxEvidenceBytes {
		return nil, &Error{"/evidence", fmt.Sprintf("larger than %d bytes", lim.MaxEvidenceBytes)}
	}
	evc, err := jcs.Transform(ev)
	if err != nil {
		return nil, &Error{"/evidence", "not valid JSON"}
	}
	if len(r.Constraints) > lim.MaxConstraints {
		return nil, &Error{"/constraints", fmt.Sprintf("more than %d constraints", lim.MaxConstraints)}
	}
	cons := make([]string, 0, len(r.Constraints))
	for i, c := range r.Constraints {
		if len(c) > lim.MaxConstraintBytes || !utf8.ValidString(c) {
			return nil, &Error{fmt.Sprintf("/constraints/%d", i), fmt.Sprintf("longer than %d bytes or not UTF-8", lim.MaxConstraintBytes)}
		}
		cons = append(cons, c)
	}
	d := r.Budget.DeadlineSeconds
	if d == 0 {
		d = lim.DefaultDeadlineSecs
	}
	if d < 0 || d > lim.MaxDeadlineSeconds {
		return nil, &Error{"/budget/deadline_seconds", fmt.Sprintf("must be between 1 and %d", lim.MaxDeadlineSeconds)}
	}
	if schema.Name == "" || len(schema.Document) == 0 {
		return nil, &Error{"/output_schema", "required"}
	}
	b := &Brief{Objective: obj, Evidence: evc, Constraints: cons, OutputSchema: schema, Budget: Budget{DeadlineSeconds: d}}
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("brief: marshal: %w", err)
	}
	if b.canonical, err = jcs.Transform(raw); err != nil {
		return nil, fmt.Errorf("brief: canonicalize: %w", err)
	}
	sum := sha256.Sum256(b.canonical)
	b.digest = "sha256:" + hex.EncodeToString(sum[:])
	return b, nil
}

// Bytes returns the RFC 8785 canonical JSON of the brief: the exact bytes of
// the data part the agent receives. The caller must not modify them.
func (b *Brief) Bytes() []byte { return b.canonical }

// Digest returns "sha256:" + hex SHA-256 of [Brief.Bytes].
func (b *Brief) Digest() string { return b.digest }

// Message maps the brief to the A2A 1.0 user message of SendMessage: a text
// part with the objective, then a data part with the brief.
// Metadata is passed through as the message's metadata (may be nil).
func (b *Brief) Message(messageID, contextID string, metadata json.RawMessage) a2a.Message {
	return a2a.Message{
		MessageID: messageID,
		ContextID: contextID,
		Role:      a2a.RoleUser,
		Parts:     []a2a.Part{a2a.TextPart(b.Objective), a2a.DataPart(b.canonical)},
		Metadata:  metadata,
	}
}

// FromMessage extracts the brief from a SendMessage message, as an agent
// does: the first data part, strictly decoded. Errors are *Error.
func FromMessage(m a2a.Message) (*Brief, error) {
	for _, p := range m.Parts {
		if p.Data == nil {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(p.Data))
		dec.DisallowUnknownFields()
		var b Brief
		if err := dec.Decode(&b); err != nil {
			return nil, &Error{"/parts/data", err.Error()}
		}
		b.canonical = p.Data
		sum := sha256.Sum256(p.Data)
		b.digest = "sha256:" + hex.EncodeToString(sum[:])
		return &b, nil
	}
	return nil, &Error{"/parts", "no data part carrying a brief"}
}
