package agentcard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// RefusalSource says where a refused card came from.
type RefusalSource string

const (
	// RefusalFetch: a2ad fetched the card from the agent's card_url, or
	// failed to.
	RefusalFetch RefusalSource = "fetch"
	// RefusalRegistration: the card was given to [Registry.Register], by
	// the agent over NATS unless the caller says otherwise.
	RefusalRegistration RefusalSource = "registration"
)

// Refusal is the last card of a configured agent that a2ad refused or could
// not fetch, for the operator: the card itself is never stored, and the
// record keeps the card last accepted.
type Refusal struct {
	At     time.Time     `json:"at"`
	Source RefusalSource `json:"source"`
	// Reason is in a2ad's own words, with at most a JSON pointer (RFC 6901)
	// into the card whose member names are shown only when they are plain
	// identifiers: never text of the card, nor of the server it came from.
	Reason string `json:"reason"`
}

// NoteRefusal keeps err as the agent's [Record].LastRefusal, in this
// Registry's memory: a card a2ad could not fetch (a *[FetchError]), or one
// it refused (a *[ValidationError], an error wrapping [ErrSignature]).
// Other errors, a store that failed or a cancelled context, are no refusal
// of the card and are ignored, as are agents that are not configured.
//
// [Registry.Register] notes its own refusals as [RefusalRegistration]; a
// caller that registers a card it fetched notes the refusal again as
// [RefusalFetch].
//
// Refusals are kept per instance and not in [Bucket]: a refusal changes
// nothing of the agent's standing; writing one would spend a revision of
// the record's short history (where approvals and quarantines are) on
// every failed fetch of every instance, and create records without a card.
// So each instance shows the refusals it saw itself, since it started; its
// log keeps them too.
func (r *Registry) NoteRefusal(agentID string, source RefusalSource, err error) {
	if _, ok := r.agents[agentID]; !ok {
		return
	}
	reason, ok := refusalReason(err)
	if !ok {
		return
	}
	r.mu.Lock()
	r.refusals[agentID] = Refusal{At: time.Now().UTC(), Source: source, Reason: reason}
	r.mu.Unlock()
}

func (r *Registry) lastRefusal(agentID string) *Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.refusals[agentID]; ok {
		return &f
	}
	return nil
}

// RefusalReason is the [Refusal].Reason a2ad gives err, in its own words,
// and whether err is a refusal of the card at all (see
// [Registry.NoteRefusal]): what a card's refresh compares to log and audit
// a refusal once per change of reason.
func RefusalReason(err error) (string, bool) { return refusalReason(err) }

// maxReasonFaults bounds the faults a Refusal's reason names.
const maxReasonFaults = 10

// refusalReason words err for a Refusal, and reports whether it is one.
func refusalReason(err error) (string, bool) {
	var fe *FetchError
	var ce *CardError
	var ve *ValidationError
	switch {
	case err == nil || errors.Is(err, context.Canceled):
		return "", false
	case errors.As(err, &fe):
		return fe.Reason, true
	case errors.Is(err, ErrSignature):
		return signatureRequired, true
	case errors.As(err, &ce):
		parts := []string{}
		for i, f := range ce.Faults {
			if i == maxReasonFaults {
				parts = append(parts, fmt.Sprintf("and %d more", len(ce.Faults)-i))
				break
			}
			if w := faultWords(f); w != "" {
				parts = append(parts, w)
			}
		}
		return strings.TrimSpace("the card is invalid " + strings.Join(parts, "; ")), true
	case errors.As(err, &ve):
		return strings.TrimSpace("the card is invalid " + faultWords(ve)), true
	}
	return "", false
}

// faultWords is "at <pointer>: <reason>", the reason only when it is a2ad's
// own words.
func faultWords(ve *ValidationError) string {
	s := ""
	if ve.Pointer != "" {
		s = "at " + plainPointer(ve.Pointer)
	}
	if ownWords(ve.Reason) {
		if s != "" {
			s += ": "
		}
		s += ve.Reason
	}
	return s
}

// ownWords reports whether a ValidationError reason is a2ad's words only:
// reasons quote the card inside quotes or after a colon (see invalid).
func ownWords(reason string) bool {
	return reason != "" && !strings.ContainsAny(reason, "\"'`:\\")
}

// plainPointer is a JSON pointer with every member name that is not a
// plain identifier (1 to 64 of A-Z a-z 0-9 _ - . $) replaced by "*".
func plainPointer(p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs[1:] {
		if !plainName(seg) {
			segs[i+1] = "*"
		}
	}
	return strings.Join(segs, "/")
}

func plainName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '$') {
			return false
		}
	}
	return true
}
