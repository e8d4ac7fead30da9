package brief

import (
	"bytes"
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
	f.Add("Check.", []byte(`{"a/b":[{"~k":"Bearer `+fakeBearer+`"}]}`), "", 60)
	f.Add("Check.", []byte(`{"n":[4111111111111111],"`+fakeNPM+`":{}}`), "", 60)
	f.Add("Check "+fakeJWT, []byte(`{"s":"\u0067hp_`+fakeGitHub[4:]+`"}`), "-----BEGIN EC PRIVATE KEY-----", 60)
	f.Add("x", []byte(`{"a":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`), "", 1)
	f.Add("x", []byte(`{"`+fakeGitHub+`":{"a":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}}`), "", 1)
	f.Fuzz(func(t *testing.T, objective string, evidence []byte, constraint string, deadline int) {
		b, err := Build(Request{Objective: objective, Evidence: evidence, Constraints: []string{constraint},
			OutputSchema: "s", Budget: Budget{DeadlineSeconds: deadline}}, schema, Limits{})
		if err != nil {
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("untyped error %v", err)
			}
			if !validPointer(be.Field) {
				t.Fatalf("field %q is not a JSON pointer", be.Field)
			}
			// Member names are the only input an error quotes, in pointers;
			// one that is a secret never reaches it.
			var v any
			if json.Unmarshal(evidence, &v) == nil {
				for _, name := range memberNames(v, nil) {
					if _, bad := FindSecretInText(name); bad && strings.Contains(err.Error(), name) {
						t.Fatalf("error %q quotes a secret member name", err)
					}
				}
			}
			if be.Secret == "" {
				return
			}
			// A refusal for a secret says which detector, in fixed words.
			if be.Reason != "looks like "+be.Secret.phrase() && be.Reason != "member name looks like "+be.Secret.phrase() {
				t.Fatalf("secret reason %q", be.Reason)
			}
			if rest, ok := strings.CutPrefix(be.Field, "/evidence"); ok {
				s, found, err := FindSecret(bytes.TrimSpace(evidence))
				if err != nil || !found || s.Pointer != rest || s.Kind != be.Secret {
					t.Fatalf("Build refused %s (%s), FindSecret = %+v %v %v", be.Field, be.Secret, s, found, err)
				}
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

// memberNames appends every object member name in the decoded value v.
func memberNames(v any, names []string) []string {
	switch c := v.(type) {
	case map[string]any:
		for name, m := range c {
			names = memberNames(m, append(names, name))
		}
	case []any:
		for _, e := range c {
			names = memberNames(e, names)
		}
	}
	return names
}

// validPointer reports whether p is a non-empty RFC 6901 JSON pointer.
func validPointer(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return false
		}
	}
	return true
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
