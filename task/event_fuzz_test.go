package task

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/a2ad/a2ad/artifact"
)

// FuzzEvent feeds whole events — subject, Nats-Msg-Id header and body —
// through what a2ad does before and while storing one: nothing panics, a
// refused event leaves only a2ad's own words, and whatever an event leaves
// in the record is within the documented bounds.
func FuzzEvent(f *testing.F) {
	long := strings.Repeat("x", MaxAgentIDBytes+1)
	for _, s := range []struct {
		subject, msgID, body string
	}{
		{"a2a.events.fraud-review.t1", "t1.1", working},
		{"a2a.events.fraud-review.t1", "t1.2", good},
		{"a2a.events.fraud-review.t1", "t1.3", completed},
		{"a2a.events.fraud-review.t1", strings.Repeat("m", 60_000), working},
		{"a2a.events.fraud-review.t1", "t1.1\r\nX: y", working},
		{"a2a.events.mallory.t1", "t1.1", completed},
		{"a2a.events.fraud-review.t1.x", "t1.1", working},
		{"a2a.events..t1", "", working},
		{"a2a.events.fraud-review.t1", "t1.1", `{"statusUpdate":{"taskId":"` + long + `","status":{"state":"TASK_STATE_WORKING"}}}`},
		{"a2a.events.fraud-review.t1", "unsequenced", `{"statusUpdate":{"taskId":"` + long + `","status":{"state":"TASK_STATE_WORKING"}}}`},
		{"a2a.events.fraud-review.t1", "t1.1", `{"task":{"id":"a","status":{"state":"TASK_STATE_INPUT_REQUIRED","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"` + strings.Repeat("é", 5000) + `"}]}}}}`},
		{"a2a.events.fraud-review.t1", "t1.1", `{"statusUpdate":{"taskId":"a","status":{"state":"TASK_STATE_INPUT_REQUIRED","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"Approve?"},` +
			`{"data":{"type":"object","properties":{"ok":{"type":"boolean","title":"Approve"},"n":{"type":"string","enum":["a","b"]}},"required":["ok"]},"mediaType":"application/schema+json"}]}}}}`},
	} {
		f.Add(s.subject, s.msgID, []byte(s.body), uint8(0))
	}
	schemas := builtinSchemas(f)
	tr := &Tracker{Schemas: schemas, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	states := []State{Submitted, Working, InputRequired, AuthRequired, Completed, Failed}
	f.Fuzz(func(t *testing.T, subject, msgID string, body []byte, from uint8) {
		ev, err := parseEvent(subject, msgID, body)
		if err != nil {
			if DropReason(err) != DropBadSubject {
				t.Fatalf("parse error %v, want a bad_subject drop", err)
			}
			return
		}
		// Written just now: within the minute after which an ended task's
		// record is final to its agent (from's high bit: ended an hour ago).
		now := time.Now()
		r := &Record{ID: "t1", AgentID: "fraud-review", State: states[int(from)%len(states)], OutputSchema: "risk_assessment", UpdatedAt: now}
		if r.State.Terminal() {
			r.EndedAt = now
			if from&0x80 != 0 {
				r.EndedAt, r.UpdatedAt = now.Add(-time.Hour), now.Add(-time.Hour)
			}
		}
		final := r.State.Terminal() && from&0x80 != 0
		drop, err := tr.applyTo(r, ev, applyOpts{sequenced: true}, time.Now())
		if errors.Is(err, errUnsequenced) {
			// As the tracker does: an id without the task's sequence is
			// ordered by the stream instead, and then applied.
			drop, err = tr.applyTo(r, ev, applyOpts{}, time.Now())
		}
		if ev.agentID != "fraud-review" && (drop == nil || drop.reason != DropForeignTask || len(r.History) != 0) {
			t.Fatalf("foreign event: drop %v, history %v", drop, r.History)
		}
		if final && ev.agentID == "fraud-review" && !ev.teaches(r) {
			if drop == nil || drop.reason != DropTaskEnded || len(r.History) != 0 || !errors.Is(err, errNoChange) {
				t.Fatalf("event on a task ended an hour ago: drop %v err %v history %v; want task_ended, nothing written", drop, err, r.History)
			}
			return
		}
		if (ev.badID || ev.bound.what != "") && ev.agentID == "fraud-review" && (drop == nil || drop.reason != DropOutOfBounds) {
			t.Fatalf("event over the bounds (%q, bad id %v): drop %v err %v", ev.bound.what, ev.badID, drop, err)
		}
		kept := []string{r.AgentTaskID, r.ContextID}
		kept = append(kept, r.Applied...)
		for _, h := range r.History {
			kept = append(kept, h.MsgID)
			if h.Refused && !utf8.ValidString(h.Reason) {
				t.Fatalf("refusal reason is not a2ad's text: %q", h.Reason)
			}
		}
		for _, a := range r.Pending {
			kept = append(kept, a.ArtifactID, a.Name)
		}
		for _, k := range kept {
			if len(k) > MaxEventIDBytes || len(k) > MaxAgentIDBytes {
				t.Fatalf("kept %d bytes of an agent id", len(k))
			}
		}
		if len(r.Question) > MaxAgentTextBytes+len("…") || len(r.StatusMessage) > MaxAgentTextBytes+len("…") {
			t.Fatalf("kept %d and %d bytes of agent text", len(r.Question), len(r.StatusMessage))
		}
		if (r.QuestionSchema != nil && r.State != InputRequired) || len(r.QuestionSchema) > 2*artifact.MaxFormBytes {
			t.Fatalf("kept a question schema of %d bytes in state %s", len(r.QuestionSchema), r.State)
		}
		if b, _ := json.Marshal(r); len(b) > MaxRecordBytes {
			t.Fatalf("one event grew the record to %d bytes", len(b))
		}
	})
}
