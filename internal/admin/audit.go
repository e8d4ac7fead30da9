package admin

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/nats-io/nats.go/jetstream"
)

// Options are the admin API's links to the audit trail.
type Options struct {
	// Audit records operators' actions (nil: not recorded).
	Audit *audit.Log
	// JS reads the audit stream for GET /v1/audit (nil: 503).
	JS jetstream.JetStream
	// Stopping is closed when a2ad begins to shut down: open watches end
	// with an "event: shutdown" at once rather than hold the shutdown up.
	Stopping <-chan struct{}
	// Revoke revokes agent credentials on every instance (POST
	// /v1/agents/{id}/revoke; nil: 503): the one with jti, or with jti ""
	// every one issued until now, whose revocation time it returns.
	Revoke func(ctx context.Context, agentID, jti string) (revokedBefore time.Time, err error)
	// QuarantineOnRevokeAll quarantines an agent whose credentials are
	// all revoked, asked or not: on an external NATS a2ad cannot close the
	// agent's connections (its NATS user is the server's), so without it
	// new delegations would still reach the agent.
	QuarantineOnRevokeAll bool
	// Dashboard serves GET /v1/dashboard (nil: 404).
	Dashboard *Dashboard
}

// operatorRecord starts an audit record of kind by the request's operator.
func operatorRecord(r *http.Request, kind string) audit.Record {
	rec := audit.Record{Kind: kind, Actor: audit.Actor{Type: audit.ActorOperator}}
	if p, ok := mcpedge.PrincipalFromContext(r.Context()); ok {
		rec.Actor.Subject, rec.Tenant = p.Subject, p.Tenant
	}
	return rec
}

// agentRecord is the audit record of an operator's action on an agent.
func agentRecord(r *http.Request, kind string, a *agentcard.Record, reason string) audit.Record {
	rec := operatorRecord(r, kind)
	rec.Reason = reason
	if a != nil {
		rec.AgentID, rec.Status, rec.Fingerprint = a.AgentID, string(a.Status), a.Fingerprint
	}
	return rec
}

// MaxAuditLimit caps GET /v1/audit's limit.
const MaxAuditLimit = 1000

func auditQuery(js jetstream.JetStream) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if js == nil {
			writeErr(w, http.StatusServiceUnavailable, "audit_unavailable", "this a2ad keeps no audit trail")
			return
		}
		q := r.URL.Query()
		f := audit.Filter{Limit: 100}
		for k, vs := range q {
			v := vs[0]
			switch k {
			case "kind":
				if !audit.ValidKind(v) {
					writeErr(w, http.StatusBadRequest, "invalid_argument", "kind: want one of "+strings.Join(audit.Kinds, ", ")+", or a family such as agent.>")
					return
				}
				f.Kind = v
			case "task":
				if !natsbind.ValidToken(v) {
					writeErr(w, http.StatusBadRequest, "invalid_argument", "task: not a task id")
					return
				}
				f.TaskID = v
			case "agent":
				if !natsbind.ValidToken(v) {
					writeErr(w, http.StatusBadRequest, "invalid_argument", "agent: not an agent id")
					return
				}
				f.Agent = v
			case "tenant":
				f.Tenant = v
			case "since":
				if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
					f.Since = t
				} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
					f.Since = time.Now().Add(-d)
				} else {
					writeErr(w, http.StatusBadRequest, "invalid_argument", "since: want an RFC 3339 time or a positive Go duration (1h, 30m)")
					return
				}
			case "limit":
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > MaxAuditLimit {
					writeErr(w, http.StatusBadRequest, "invalid_argument", "limit: want 1 to "+strconv.Itoa(MaxAuditLimit))
					return
				}
				f.Limit = n
			default:
				writeErr(w, http.StatusBadRequest, "invalid_argument", "unknown parameter "+strconv.Quote(k))
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		page, err := audit.Query(ctx, js, f)
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, page)
	}
}
