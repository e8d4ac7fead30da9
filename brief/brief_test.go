package brief

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/a2a"
)

var schema = OutputSchema{Name: "risk_assessment", Digest: "sha256:00", Document: json.RawMessage(`{"type":"object"}`)}

func req() Request {
	return Request{Objective: "Assess this refund.", Evidence: json.RawMessage(`{"case_id":"C-1", "amount_cents":10}`),
		Constraints: []string{"Be brief."}, OutputSchema: "risk_assessment", Budget: Budget{DeadlineSeconds: 60}}
}

func TestBuildProducesCanonicalBriefAndDigest(t *testing.T) {
	b, err := Build(req(), schema, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"budget":{"deadline_seconds":60},"constraints":["Be brief."],"evidence":{"amount_cents":10,"case_id":"C-1"},"objective":"Assess this refund.","output_schema":{"digest":"sha256:00","document":{"type":"object"},"name":"risk_assessment"}}`
	if string(b.Bytes()) != want {
		t.Fatalf("bytes = %s\nwant  %s", b.Bytes(), want)
	}
	// Key order and whitespace in the evidence do not change the digest.
	r := req()
	r.Evidence = json.RawMessage("{ \"amount_cents\" : 10 ,\n\"case_id\":\"C-1\"}")
	b2, _ := Build(r, schema, Limits{})
	if b2.Digest() != b.Digest() || !strings.HasPrefix(b.Digest(), "sha256:") || len(b.Digest()) != 71 {
		t.Fatalf("digests %s %s", b.Digest(), b2.Digest())
	}
}

func TestBuildDefaultsDeadline(t *testing.T) {
	r := req()
	r.Budget.DeadlineSeconds = 0
	b, err := Build(r, schema, Limits{})
	if err != nil || b.Budget.DeadlineSeconds != 600 {
		t.Fatalf("deadline %d, %v; want the 600 s default", b.Budget.DeadlineSeconds, err)
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Request)
		field  string
	}{
		{"empty objective", func(r *Request) { r.Objective = "  " }, "/objective"},
		{"huge objective", func(r *Request) { r.Objective = strings.Repeat("x", 5000) }, "/objective"},
		{"evidence array", func(r *Request) { r.Evidence = json.RawMessage(`[1]`) }, "/evidence"},
		{"evidence missing", func(r *Request) { r.Evidence = nil }, "/evidence"},
		{"evidence malformed", func(r *Request) { r.Evidence = json.RawMessage(`{"a":`) }, "/evidence"},
		{"evidence too big", func(r *Request) { r.Evidence = json.RawMessage(`{"a":"` + strings.Repeat("x", 70000) + `"}`) }, "/evidence"},
		{"too many constraints", func(r *Request) { r.Constraints = make([]string, 33) }, "/constraints"},
		{"long constraint", func(r *Request) { r.Constraints = []string{strings.Repeat("x", 2000)} }, "/constraints/0"},
		{"negative deadline", func(r *Request) { r.Budget.DeadlineSeconds = -1 }, "/budget/deadline_seconds"},
		{"deadline above max", func(r *Request) { r.Budget.DeadlineSeconds = 86401 }, "/budget/deadline_seconds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := req()
			c.mutate(&r)
			_, err := Build(r, schema, Limits{})
			var be *Error
			if !errors.As(err, &be) || be.Field != c.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want *Error at %s", err, c.field)
			}
		})
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	_, err := Decode([]byte(`{"objective":"x","evidence":{},"output_schema":"s","budget":{},"conversation":"secret chat"}`))
	if err == nil || !strings.Contains(err.Error(), `unknown field "conversation"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := Decode([]byte(`{"objective":"x","evidence":{},"output_schema":"s","budget":{"deadline_seconds":5}}`)); err != nil {
		t.Fatal(err)
	}
}

func TestMessageCarriesObjectiveAndExactBrief(t *testing.T) {
	b, _ := Build(req(), schema, Limits{})
	m := b.Message("tsk-1-m1", "", json.RawMessage(`{"a2ad/taskId":"tsk-1"}`))
	if m.Role != a2a.RoleUser || len(m.Parts) != 2 || *m.Parts[0].Text != "Assess this refund." || string(m.Parts[1].Data) != string(b.Bytes()) {
		t.Fatalf("message = %+v", m)
	}
	got, err := FromMessage(m)
	if err != nil || got.Digest() != b.Digest() || got.Objective != b.Objective {
		t.Fatalf("FromMessage = %+v, %v", got, err)
	}
}

func FuzzBuild(f *testing.F) {
	f.Add("Assess.", []byte(`{"case_id":"C-1"}`), "c", 60)
	f.Add("", []byte(`[]`), "", -1)
	f.Add("x", []byte(`{"a":{"b":[1,2,{"c":null}]},"d":1e308}`), "", 0)
	f.Fuzz(func(t *testing.T, objective string, evidence []byte, constraint string, deadline int) {
		b, err := Build(Request{Objective: objective, Evidence: evidence, Constraints: []string{constraint},
			OutputSchema: "s", Budget: Budget{DeadlineSeconds: deadline}}, schema, Limits{})
		if err != nil {
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		var back Brief
		if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Objective != b.Objective {
			t.Fatalf("brief bytes do not round-trip: %v", err)
		}
		again, _ := Build(Request{Objective: objective, Evidence: evidence, Constraints: []string{constraint},
			OutputSchema: "s", Budget: Budget{DeadlineSeconds: deadline}}, schema, Limits{})
		if again.Digest() != b.Digest() {
			t.Fatal("digest not stable")
		}
	})
}

func BenchmarkBuild(b *testing.B) {
	r := req()
	r.Evidence = json.RawMessage(`{"case_id":"C-41","amount_cents":125000,"currency":"EUR","manual_review_above_cents":50000,"customer_tenure_days":400,"prior_refunds_90d":1}`)
	for b.Loop() {
		if _, err := Build(r, schema, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
