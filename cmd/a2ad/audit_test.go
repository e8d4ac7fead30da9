package main

import (
	"testing"

	"github.com/a2ad/a2ad/internal/audit"
)

// A record standing for others says how many.
func TestAuditDetailsCountRecordsNotWritten(t *testing.T) {
	for _, c := range []struct {
		r    audit.Record
		want string
	}{
		{audit.Record{Kind: audit.KindAgentCardRefused, Code: "card_invalid"}, "code=card_invalid"},
		{audit.Record{Kind: audit.KindAgentCardRefused, Code: "card_invalid", Suppressed: 41}, "code=card_invalid suppressed=41"},
	} {
		if got := details(c.r); got != c.want {
			t.Errorf("details(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}
