package mcpedge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/a2ad/a2ad/internal/suggest"
)

// KnownScopes are the scopes a2ad gives a meaning to (see [ScopeRead],
// [ScopeDelegate], [ScopeAdmin]). A token from another issuer may carry
// others, which a2ad ignores; a2ad's own configuration and the tokens it
// mints name only these.
var KnownScopes = []string{ScopeRead, ScopeDelegate, ScopeAdmin}

// ScopeError is a scope name a2ad does not know, with the known one it most
// likely stands for (Suggestion, "" when none is close).
type ScopeError struct {
	Scope      string
	Suggestion string
}

func (e *ScopeError) Error() string {
	msg := fmt.Sprintf("unknown scope %q", e.Scope)
	if e.Suggestion != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", e.Suggestion)
	}
	return msg + "; a2ad knows " + strings.Join(KnownScopes, ", ")
}

// CheckScopes returns a [*ScopeError] for the first of scopes that is not
// in [KnownScopes], nil when all are known (or there are none).
func CheckScopes(scopes []string) error {
	for _, s := range scopes {
		if !slices.Contains(KnownScopes, s) {
			sug := suggest.Closest(s, KnownScopes)
			if sug == "" && slices.Contains(KnownScopes, "a2a:"+s) {
				sug = "a2a:" + s // "read" for a2a:read: too far by edit distance, plainly meant
			}
			return &ScopeError{Scope: s, Suggestion: sug}
		}
	}
	return nil
}
