package task

import (
	"testing"
)

// The tracker keeps the form an agent gives with its question (a data part
// of mediaType application/schema+json), as a2ad re-encodes it; a schema
// outside the subset is not kept, with a note, and the question stays;
// the next turn clears both.
func TestQuestionSchemaSetAndCleared(t *testing.T) {
	ask := func(parts string) string {
		return `{"statusUpdate":{"taskId":"a1","contextId":"c1","status":{"state":"TASK_STATE_INPUT_REQUIRED","message":{"messageId":"q1","role":"ROLE_AGENT","parts":[` + parts + `]}}}}`
	}
	const form = `{"data":{"required":["approve"],"type":"object","properties":{"approve":{"type":"boolean","title":"Approve"}}},"mediaType":"application/schema+json"}`
	for name, tc := range map[string]struct {
		parts, schema, note string
	}{
		"form": {`{"text":"Approve?"},` + form,
			`{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve"}},"required":["approve"]}`, ""},
		"media type with parameters": {`{"text":"Approve?"},{"data":{"type":"object","properties":{"n":{"type":"integer"}}},"mediaType":"Application/Schema+JSON; charset=utf-8"}`,
			`{"type":"object","properties":{"n":{"type":"integer"}}}`, ""},
		"other data part": {`{"text":"Approve?"},{"data":{"type":"object","properties":{"n":{"type":"integer"}}},"mediaType":"application/json"}`, "", ""},
		"outside the subset": {`{"text":"Approve?"},{"data":{"type":"object","properties":{"who":{"type":"object"}}},"mediaType":"application/schema+json"}`, "",
			"question schema not taken, the question is free text: question schema at /properties/who/type: must be string, number, integer or boolean"},
		"no text": {form, "", "question schema not taken: the status message has no text part with the question"},
	} {
		t.Run(name, func(t *testing.T) {
			tr := newTracker(t)
			create(t, tr, "t1")
			subj := "a2a.events.fraud-review.t1"
			if err := apply(t, tr, subj, "t1.1", working); err != nil {
				t.Fatal(err)
			}
			if err := apply(t, tr, subj, "t1.2", ask(tc.parts)); err != nil {
				t.Fatal(err)
			}
			r := get(t, tr, "t1")
			if r.State != InputRequired || string(r.QuestionSchema) != tc.schema || r.QuestionSchemaNote != tc.note {
				t.Fatalf("state %s, schema %s, note %q; want input-required, %s, %q", r.State, r.QuestionSchema, r.QuestionSchemaNote, tc.schema, tc.note)
			}
			if tc.parts != form && r.Question != "Approve?" {
				t.Errorf("question %q, want it kept", r.Question)
			}
			if err := apply(t, tr, subj, "t1.3", working); err != nil {
				t.Fatal(err)
			}
			if r := get(t, tr, "t1"); r.QuestionSchema != nil || r.QuestionSchemaNote != "" || r.Question != "" {
				t.Errorf("after working: schema %s, note %q, question %q; want all cleared", r.QuestionSchema, r.QuestionSchemaNote, r.Question)
			}
		})
	}
}
