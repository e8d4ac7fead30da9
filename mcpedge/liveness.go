package mcpedge

import (
	"time"

	"github.com/a2ad/a2ad/agentcard"
)

// livenessView is an agent's liveness as [AgentView] has it: reachable,
// offline or unknown, and the time of the last check (RFC 3339, "" if
// none).
func livenessView(l agentcard.Liveness) (reachability, checkedAt string) {
	reachability = string(l.Reachability)
	if reachability == "" {
		reachability = string(agentcard.ReachabilityUnknown)
	}
	if !l.CheckedAt.IsZero() {
		checkedAt = l.CheckedAt.UTC().Format(time.RFC3339)
	}
	return reachability, checkedAt
}
