package refagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/a2ad/a2ad/internal/a2a"
)

// PolicyVersion is the policy_version of every risk assessment this agent
// produces.
const PolicyVersion = "fraud-policy-2026.11"

// Misbehaviour modes accepted by [ParseMisbehave] and [Config.Misbehave].
const (
	// ModeInvalidArtifact returns an artifact that violates the
	// risk_assessment schema (unknown risk_level, score out of range, an
	// extra property), then completes.
	ModeInvalidArtifact = "invalid-artifact"
	// ModeSilent answers SendMessage and then never publishes an event.
	ModeSilent = "silent"
	// ModeIllegalTransition completes normally, then publishes one more
	// statusUpdate TASK_STATE_WORKING: a transition out of a terminal state.
	ModeIllegalTransition = "illegal-transition"
	// ModeSlow behaves normally but stays WORKING for [Config.SlowFor]
	// (default 3 s) before it completes: crash tests kill a2ad meanwhile.
	ModeSlow = "slow"
	// ModeAuthRequired reports TASK_STATE_AUTH_REQUIRED with a sign-in
	// message for 1 s (as if the user authorized out of band), then goes on.
	ModeAuthRequired = "auth-required"
	// ModeReplaceAfterLast sends its artifact with lastChunk, then the same
	// artifactId again, whole, with a different (still valid) assessment —
	// risk_level "low", score 0 — then completes.
	ModeReplaceAfterLast = "replace-after-last"
	// ModeEndlessChunks sends its artifact as a first chunk, then appends
	// [EndlessChunks] more chunks of it without ever saying lastChunk, then
	// completes.
	ModeEndlessChunks = "endless-chunks"
)

// ModeStructuredQuestion asks, whatever the amount, for the
// reviewer's decision as a form: an input-required status message with
// the question as text and [ApprovalForm] as a data part of mediaType
// application/schema+json (docs/nats-binding.md §6.7). Only an answer
// with a data part {"approve": bool, "note"?: string} resumes it (else
// JSON-RPC -32602); approve true counts as identity verified.
const ModeStructuredQuestion = "structured-question"

// ModeUnformableQuestion asks as [ModeStructuredQuestion] does, but with
// [NestedForm], a schema outside MCP elicitation's subset (a nested
// object), which a2ad does not take: the question is asked as free text,
// and a text answer resumes it.
const ModeUnformableQuestion = "unformable-question"

// ApprovalForm is the answer schema [ModeStructuredQuestion] sends.
const ApprovalForm = `{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve the refund","description":"true if a human reviewer verified the customer's identity"},` +
	`"note":{"type":"string","title":"Note","description":"why, for the case file","maxLength":200}},"required":["approve"]}`

// NestedForm is the answer schema [ModeUnformableQuestion] sends.
const NestedForm = `{"type":"object","properties":{"reviewer":{"type":"object","properties":{"name":{"type":"string"}}},"approve":{"type":"boolean"}},"required":["approve"]}`

// EndlessChunks is how many chunks [ModeEndlessChunks] appends.
const EndlessChunks = 100

// ParseMisbehave parses misbehaviour specs of the form "<mode>:<caseId>";
// each spec may hold several, comma-separated. It returns caseId -> mode.
// An unknown mode, a spec without a case id, or one case given two modes is
// an error.
func ParseMisbehave(specs []string) (map[string]string, error) {
	out := make(map[string]string)
	for _, spec := range specs {
		for item := range strings.SplitSeq(spec, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			mode, caseID, ok := strings.Cut(item, ":")
			mode, caseID = strings.TrimSpace(mode), strings.TrimSpace(caseID)
			if !ok || caseID == "" {
				return nil, fmt.Errorf("refagent: misbehave %q: want <mode>:<caseId>", item)
			}
			if !knownMode(mode) && !httpMode(mode) {
				return nil, fmt.Errorf("refagent: misbehave %q: unknown mode %q (want %s, %s, %s, %s, %s, %s, %s, %s or %s; over HTTP also %s or %s)",
					item, mode, ModeInvalidArtifact, ModeSilent, ModeIllegalTransition, ModeSlow, ModeAuthRequired,
					ModeReplaceAfterLast, ModeEndlessChunks, ModeStructuredQuestion, ModeUnformableQuestion, ModeUnresponsive, ModeCancelHangs)
			}
			if prev, dup := out[caseID]; dup && prev != mode {
				return nil, fmt.Errorf("refagent: misbehave: case %q given two modes, %q and %q", caseID, prev, mode)
			}
			out[caseID] = mode
		}
	}
	return out, nil
}

// httpMode reports the modes only [HTTPAgent] has.
func httpMode(m string) bool { return m == ModeUnresponsive || m == ModeCancelHangs }

func knownMode(m string) bool {
	return m == ModeInvalidArtifact || m == ModeSilent || m == ModeIllegalTransition || m == ModeSlow || m == ModeAuthRequired ||
		m == ModeReplaceAfterLast || m == ModeEndlessChunks || m == ModeStructuredQuestion || m == ModeUnformableQuestion
}

// asksForm reports the modes whose question carries a form.
func asksForm(m string) bool { return m == ModeStructuredQuestion || m == ModeUnformableQuestion }

// approval is the answer [ModeStructuredQuestion] takes.
type approval struct {
	Approve *bool  `json:"approve"`
	Note    string `json:"note,omitempty"`
}

// parseApproval reads the approval from an answer's first data part,
// strictly: approve is required, no other member than note is allowed. It
// returns the part's bytes too.
func parseApproval(parts []a2a.Part) (bool, []byte, error) {
	for _, p := range parts {
		if p.Kind() != "data" {
			continue
		}
		var a approval
		if err := strictDecode(p.Data, &a); err != nil || a.Approve == nil {
			return false, nil, errors.New(`the answer's data part must be {"approve": true|false, "note"?: string}`)
		}
		return *a.Approve, slices.Clone([]byte(p.Data)), nil
	}
	return false, nil, errors.New(`the answer must carry a data part {"approve": true|false, "note"?: string}`)
}

// evidence is the part of a brief's evidence the fraud-review skill reads.
// Other keys (currency, order_id, notes, …) are accepted and ignored.
type evidence struct {
	CaseID                 string `json:"case_id"`
	AmountCents            *int64 `json:"amount_cents"`
	ManualReviewAboveCents *int64 `json:"manual_review_above_cents"`
	CustomerTenureDays     *int64 `json:"customer_tenure_days"`
	PriorRefunds90d        *int64 `json:"prior_refunds_90d"`
}

var errEvidence = errors.New("evidence")

// parseEvidence decodes the brief's evidence object. case_id (a non-empty
// string) and amount_cents (a non-negative integer) are required; the other
// fields it reads are optional integers.
func parseEvidence(raw json.RawMessage) (evidence, error) {
	var ev evidence
	if err := json.Unmarshal(raw, &ev); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return ev, fmt.Errorf("%w: %s must be %s", errEvidence, te.Field, te.Type)
		}
		return ev, fmt.Errorf("%w: not a JSON object", errEvidence)
	}
	switch {
	case ev.CaseID == "":
		return ev, fmt.Errorf("%w: case_id is required (a non-empty string)", errEvidence)
	case ev.AmountCents == nil:
		return ev, fmt.Errorf("%w: amount_cents is required (an integer)", errEvidence)
	case *ev.AmountCents < 0:
		return ev, fmt.Errorf("%w: amount_cents must not be negative", errEvidence)
	}
	return ev, nil
}

// needsReview reports whether the amount is above the manual review
// threshold the evidence names.
func (ev evidence) needsReview() bool {
	return ev.ManualReviewAboveCents != nil && *ev.AmountCents > *ev.ManualReviewAboveCents
}

// question is the text of the input-required status message. It names the
// threshold only when the amount is above it: the form modes ask whatever
// the amount, and the evidence need not carry a threshold at all.
func (ev evidence) question() string {
	if !ev.needsReview() {
		return fmt.Sprintf("Case %s: a human review of the refund of %d cents is requested. "+
			"Has a human reviewer verified the customer's identity? Answer yes or no.",
			ev.CaseID, *ev.AmountCents)
	}
	return fmt.Sprintf("Case %s: the refund of %d cents is above the manual review threshold of %d cents. "+
		"Has a human reviewer verified the customer's identity? Answer yes or no.",
		ev.CaseID, *ev.AmountCents, *ev.ManualReviewAboveCents)
}

// formQuestion is the text of a [ModeStructuredQuestion] question.
func (ev evidence) formQuestion() string {
	return fmt.Sprintf("Case %s: approve the refund of %d cents? Say whether a human reviewer verified the customer's identity (approve), with an optional note.",
		ev.CaseID, *ev.AmountCents)
}

// assessment is the risk_assessment artifact (testdata/schemas/risk_assessment.json).
type assessment struct {
	CaseID        string   `json:"case_id"`
	RiskLevel     string   `json:"risk_level"`
	Score         float64  `json:"score"`
	Reasons       []string `json:"reasons"`
	PolicyVersion string   `json:"policy_version"`
}

// assess scores the evidence. verified is nil when no human was asked.
// The score is computed in hundredths so that it is exact: start 0.10;
// +0.30 if amount_cents > 50000; +0.20 if prior_refunds_90d >= 3; +0.20 if
// customer_tenure_days < 30; -0.20 if a reviewer verified the identity,
// +0.30 if not; clamped to [0, 1]. Level: low < 0.34 <= medium < 0.67 <= high.
func assess(ev evidence, verified *bool) assessment {
	score := 10
	var reasons []string
	if *ev.AmountCents > 50000 {
		score += 30
		reasons = append(reasons, fmt.Sprintf("amount %d cents above 50000", *ev.AmountCents))
	}
	if ev.PriorRefunds90d != nil && *ev.PriorRefunds90d >= 3 {
		score += 20
		reasons = append(reasons, fmt.Sprintf("%d prior refunds in the last 90 days (3 or more)", *ev.PriorRefunds90d))
	}
	if ev.CustomerTenureDays != nil && *ev.CustomerTenureDays < 30 {
		score += 20
		reasons = append(reasons, fmt.Sprintf("customer tenure of %d days (under 30)", *ev.CustomerTenureDays))
	}
	if verified != nil {
		if *verified {
			score -= 20
			reasons = append(reasons, "identity verified by a human reviewer")
		} else {
			score += 30
			reasons = append(reasons, "identity not verified by a human reviewer")
		}
	}
	score = min(max(score, 0), 100)
	if len(reasons) == 0 {
		reasons = []string{"no risk signals in the evidence"}
	}
	level := "low"
	switch {
	case score >= 67:
		level = "high"
	case score >= 34:
		level = "medium"
	}
	return assessment{
		CaseID:        ev.CaseID,
		RiskLevel:     level,
		Score:         float64(score) / 100,
		Reasons:       reasons,
		PolicyVersion: PolicyVersion,
	}
}

// invalidAssessment is what [ModeInvalidArtifact] sends: an unknown
// risk_level, a score above 1 and a property the schema does not allow.
func invalidAssessment(ev evidence) map[string]any {
	return map[string]any{
		"case_id":        ev.CaseID,
		"risk_level":     "extreme",
		"score":          7,
		"reasons":        []string{"misbehaviour: invalid-artifact"},
		"policy_version": PolicyVersion,
		"debug_trace":    "this property is not in the schema",
	}
}

// affirmative reports whether a reviewer's answer means "identity
// verified": its first word, case-insensitively, is yes, y, verified,
// confirmed or true. Anything else (no, not verified, unsure) is a no.
func affirmative(answer string) bool {
	words := strings.FieldsFunc(strings.ToLower(answer), func(r rune) bool { return !unicode.IsLetter(r) })
	if len(words) == 0 {
		return false
	}
	switch words[0] {
	case "yes", "y", "verified", "confirmed", "true":
		return true
	}
	return false
}
