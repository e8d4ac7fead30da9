package refagent

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
)

func TestAssess(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name     string
		evidence string
		verified *bool
		level    string
		score    float64
		reasons  []string
	}{
		{"no signals", `{"case_id":"C-1","amount_cents":50000,"customer_tenure_days":30,"prior_refunds_90d":2}`, nil,
			"low", 0.1, []string{"no risk signals in the evidence"}},
		{"large amount", `{"case_id":"C-2","amount_cents":50001}`, nil,
			"medium", 0.4, []string{"amount 50001 cents above 50000"}},
		{"prior refunds", `{"case_id":"C-3","amount_cents":10,"prior_refunds_90d":3}`, nil,
			"low", 0.3, []string{"3 prior refunds in the last 90 days (3 or more)"}},
		{"new customer", `{"case_id":"C-4","amount_cents":10,"customer_tenure_days":29}`, nil,
			"low", 0.3, []string{"customer tenure of 29 days (under 30)"}},
		{"every signal", `{"case_id":"C-5","amount_cents":90000,"customer_tenure_days":2,"prior_refunds_90d":5}`, nil,
			"high", 0.8, []string{"amount 90000 cents above 50000", "5 prior refunds in the last 90 days (3 or more)", "customer tenure of 2 days (under 30)"}},
		{"every signal, not verified: clamped", `{"case_id":"C-6","amount_cents":90000,"customer_tenure_days":2,"prior_refunds_90d":5}`, &no,
			"high", 1, []string{"amount 90000 cents above 50000", "5 prior refunds in the last 90 days (3 or more)", "customer tenure of 2 days (under 30)", "identity not verified by a human reviewer"}},
		{"verified only: clamped at 0", `{"case_id":"C-7","amount_cents":10}`, &yes,
			"low", 0, []string{"identity verified by a human reviewer"}},
		{"two signals", `{"case_id":"C-8","amount_cents":60000,"prior_refunds_90d":4}`, nil,
			"medium", 0.6, []string{"amount 60000 cents above 50000", "4 prior refunds in the last 90 days (3 or more)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := parseEvidence(json.RawMessage(tc.evidence))
			if err != nil {
				t.Fatal(err)
			}
			got := assess(ev, tc.verified)
			if got.RiskLevel != tc.level || got.Score != tc.score || !slices.Equal(got.Reasons, tc.reasons) ||
				got.PolicyVersion != PolicyVersion || got.CaseID != ev.CaseID {
				t.Errorf("assess = %+v\nwant level %s score %v reasons %q", got, tc.level, tc.score, tc.reasons)
			}
		})
	}
}

func TestParseEvidenceErrors(t *testing.T) {
	for _, raw := range []string{
		`{"amount_cents":1}`,
		`{"case_id":"","amount_cents":1}`,
		`{"case_id":"C-1"}`,
		`{"case_id":"C-1","amount_cents":-1}`,
		`{"case_id":"C-1","amount_cents":"100"}`,
		`{"case_id":"C-1","amount_cents":1.5}`,
		`{"case_id":7,"amount_cents":1}`,
		`[1]`,
	} {
		if _, err := parseEvidence(json.RawMessage(raw)); !errors.Is(err, errEvidence) {
			t.Errorf("parseEvidence(%s) = %v, want an evidence error", raw, err)
		}
	}
}

func TestParseMisbehave(t *testing.T) {
	tests := []struct {
		name  string
		specs []string
		want  map[string]string
		ok    bool
	}{
		{"none", nil, map[string]string{}, true},
		{"repeated and comma-separated", []string{"invalid-artifact:C-13, silent:C-99", "illegal-transition:C-66"},
			map[string]string{"C-13": ModeInvalidArtifact, "C-99": ModeSilent, "C-66": ModeIllegalTransition}, true},
		{"same pair twice", []string{"silent:C-1", "silent:C-1"}, map[string]string{"C-1": ModeSilent}, true},
		{"artifact sequence modes", []string{"replace-after-last:C-1,endless-chunks:C-2"},
			map[string]string{"C-1": ModeReplaceAfterLast, "C-2": ModeEndlessChunks}, true},
		{"unknown mode", []string{"crash:C-1"}, nil, false},
		{"no case", []string{"silent:"}, nil, false},
		{"no colon", []string{"silent"}, nil, false},
		{"two modes for a case", []string{"silent:C-1,invalid-artifact:C-1"}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMisbehave(tc.specs)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAffirmative(t *testing.T) {
	for answer, want := range map[string]bool{
		"yes": true, "YES": true, " Yes, checked the passport.": true, "y": true, "Verified": true,
		"confirmed": true, "no": false, "not verified": false, "": false, "unsure": false, "yesterday": false,
	} {
		if got := affirmative(answer); got != want {
			t.Errorf("affirmative(%q) = %v, want %v", answer, got, want)
		}
	}
}
