// Package brief builds the minimal task brief a2ad sends to a remote agent:
// objective, evidence, constraints, output schema and budget — and nothing
// else. No conversation, memory, host token or unknown field can reach it:
// [Decode] refuses unknown fields, and [Build] copies only the named ones and
// refuses any credential it recognises in them (see [SecretKind]).
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
	MaxObjectiveBytes   int // default 4 KiB, after trimming blanks
	MaxEvidenceBytes    int // default 64 KiB, after trimming blanks
	MaxEvidenceDepth    int // default 32 levels, the evidence object being level 1; at most 10000
	MaxEvidenceKeys     int // default 4096 object members plus array elements, counted over the whole evidence
	MaxConstraints      int // default 32
	MaxConstraintBytes  int // default 1 KiB each
	MaxDeadlineSeconds  int // default 86400 (operator-set maximum)
	DefaultDeadlineSecs int // default 600
}

// WithDefaults returns l with each zero or negative limit at its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxObjectiveBytes, 4<<10)
	def(&l.MaxEvidenceBytes, 64<<10)
	def(&l.MaxEvidenceDepth, 32)
	l.MaxEvidenceDepth = min(l.MaxEvidenceDepth, maxScanDepth)
	def(&l.MaxEvidenceKeys, 4096)
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
// pointer (RFC 6901) into the delegate arguments ("/evidence",
// "/objective", "/evidence/customer/notes/2"). Reason never quotes the
// refused content.
type Error struct {
	Field  string
	Reason string
	// Secret is the detector that refused the field, if one did; see
	// [FindSecret].
	Secret SecretKind
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
// sizes, evidence depth and member count against lim, requires a non-empty
// objective, an evidence JSON object, and a deadline within
// (0, MaxDeadlineSeconds]; errors are *Error.
//
// It refuses any credential: the objective, each constraint, and every
// member name, string and card-shaped integer of the evidence are scanned
// (see [SecretKind] for the detectors). The *Error's Field points at the
// offending string — or at the object, when a member name is the secret —
// and its Secret names the detector; the value is never echoed.
//
// The evidence is read in one pass that validates it, enforces the limits
// and scans it, without decoding numbers; invalid JSON or an exceeded limit
// is reported before any secret, and of several secrets the first in
// document order. The returned brief's canonical bytes (RFC 8785) and digest
// are fixed.
func Build(r Request, schema OutputSchema, lim Limits) (*Brief, error) {
	lim = lim.WithDefaults()
	obj := strings.TrimSpace(r.Objective)
	switch {
	case obj == "":
		return nil, &Error{Field: "/objective", Reason: "required"}
	case len(obj) > lim.MaxObjectiveBytes:
		return nil, &Error{Field: "/objective", Reason: fmt.Sprintf("longer than %d bytes", lim.MaxObjectiveBytes)}
	case !utf8.ValidString(obj):
		return nil, &Error{Field: "/objective", Reason: "not valid UTF-8"}
	}
	if k, ok := FindSecretInText(obj); ok {
		return nil, secretError("/objective", Secret{Kind: k})
	}
	ev := bytes.TrimSpace(r.Evidence)
	if len(ev) == 0 || ev[0] != '{' {
		return nil, &Error{Field: "/evidence", Reason: "must be a JSON object"}
	}
	if len(ev) > lim.MaxEvidenceBytes {
		return nil, &Error{Field: "/evidence", Reason: fmt.Sprintf("larger than %d bytes", lim.MaxEvidenceBytes)}
	}
	if err := checkEvidence(ev, lim); err != nil {
		return nil, err
	}
	evc, err := jcs.Transform(ev)
	if err != nil {
		return nil, &Error{Field: "/evidence", Reason: "not valid JSON"}
	}
	if len(r.Constraints) > lim.MaxConstraints {
		return nil, &Error{Field: "/constraints", Reason: fmt.Sprintf("more than %d constraints", lim.MaxConstraints)}
	}
	cons := make([]string, 0, len(r.Constraints))
	for i, c := range r.Constraints {
		if len(c) > lim.MaxConstraintBytes || !utf8.ValidString(c) {
			return nil, &Error{Field: fmt.Sprintf("/constraints/%d", i), Reason: fmt.Sprintf("longer than %d bytes or not UTF-8", lim.MaxConstraintBytes)}
		}
		if k, ok := FindSecretInText(c); ok {
			return nil, secretError(fmt.Sprintf("/constraints/%d", i), Secret{Kind: k})
		}
		cons = append(cons, c)
	}
	d := r.Budget.DeadlineSeconds
	if d == 0 {
		d = lim.DefaultDeadlineSecs
	}
	if d < 0 || d > lim.MaxDeadlineSeconds {
		return nil, &Error{Field: "/budget/deadline_seconds", Reason: fmt.Sprintf("must be between 1 and %d", lim.MaxDeadlineSeconds)}
	}
	if schema.Name == "" || len(schema.Document) == 0 {
		return nil, &Error{Field: "/output_schema", Reason: "required"}
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

// checkEvidence walks the evidence once for syntax, MaxEvidenceDepth,
// MaxEvidenceKeys and secrets.
func checkEvidence(ev []byte, lim Limits) *Error {
	w := walk{doc: ev, maxDepth: lim.MaxEvidenceDepth, maxItems: lim.MaxEvidenceKeys}
	f := w.run()
	if f == nil {
		return nil
	}
	switch f.what {
	case faultDepth:
		return &Error{Field: "/evidence" + f.pointer, Reason: fmt.Sprintf("evidence nests deeper than %d levels", lim.MaxEvidenceDepth)}
	case faultItems:
		return &Error{Field: "/evidence", Reason: fmt.Sprintf("evidence has more than %d object members and array elements", lim.MaxEvidenceKeys)}
	case faultSecret:
		return secretError("/evidence", f.secret())
	}
	return &Error{Field: "/evidence", Reason: "not valid JSON"}
}

// secretError refuses the field at prefix+s.Pointer.
func secretError(prefix string, s Secret) *Error {
	return &Error{Field: prefix + s.Pointer, Reason: s.reason(), Secret: s.Kind}
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
			return nil, &Error{Field: "/parts/data", Reason: err.Error()}
		}
		b.canonical = p.Data
		sum := sha256.Sum256(p.Data)
		b.digest = "sha256:" + hex.EncodeToString(sum[:])
		return &b, nil
	}
	return nil, &Error{Field: "/parts", Reason: "no data part carrying a brief"}
}
