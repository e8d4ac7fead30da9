package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/metrics"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"go.opentelemetry.io/otel/trace"
)

// observer turns what the domain packages report (task writes, Delegate
// outcomes, refused credentials, agent registrations) into audit records
// and metrics. Every hook queues or counts and returns: nothing here is on
// the path a host waits for beyond a channel send and a few atomic adds.
type observer struct {
	audit     *audit.Log
	aggregate *aggregator
	m         *metrics.Metrics

	mu   sync.Mutex
	open map[string]task.State // non-terminal tasks, for the a2ad_tasks gauge
}

func newObserver(a *audit.Log, m *metrics.Metrics) *observer {
	return &observer{audit: a, m: m, open: map[string]task.State{}}
}

// track keeps a2ad_tasks{state} from the task store's watcher.
func (o *observer) track(sn task.Snapshot) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if prev, ok := o.open[sn.ID]; ok {
		if !sn.Deleted && prev == sn.State {
			return
		}
		o.m.Tasks.WithLabelValues(string(prev)).Dec()
		delete(o.open, sn.ID)
	}
	if !sn.Deleted && !sn.State.Terminal() {
		o.open[sn.ID] = sn.State
		o.m.Tasks.WithLabelValues(string(sn.State)).Inc()
	}
}

// actor is who caused a transition.
func actor(r *task.Record, t task.Transition) audit.Actor {
	switch t.Source {
	case task.SourceAgent:
		return audit.Actor{Type: audit.ActorAgent, Subject: r.AgentID}
	case task.SourceOperator:
		return audit.Actor{Type: audit.ActorOperator, Subject: t.By}
	case task.SourceHost:
		// Before canceled_by_operator, an operator's cancel was a host
		// one by "admin:<subject>".
		if sub, ok := strings.CutPrefix(t.By, "admin:"); ok || t.By == "admin" {
			return audit.Actor{Type: audit.ActorOperator, Subject: sub}
		}
		return audit.Actor{Type: audit.ActorHost, Subject: t.By}
	}
	return audit.Actor{Type: audit.ActorDaemon}
}

// reasonCode is the code part of a transition's reason ("artifact_rejected:
// host schema … no longer known" → "artifact_rejected"), for metric labels.
func reasonCode(reason string) string {
	code, _, _ := strings.Cut(reason, ":")
	switch code {
	case "", task.ReasonArtifactRejected, task.ReasonArtifactMissing, task.ReasonArtifactTooLarge, task.ReasonDeadlineExceeded,
		task.ReasonCanceledByHost, task.ReasonCanceledByOperator, task.ReasonAgentFailed, task.ReasonAgentRejected:
		return code
	}
	return "other"
}

// taskWritten is the task store's OnWrite hook.
func (o *observer) taskWritten(r *task.Record, w task.Write) {
	start := len(r.History) - len(w.Transitions)
	agentBefore := false
	for _, t := range r.History[:max(0, start)] {
		if t.Source == task.SourceAgent && !t.Refused {
			agentBefore = true
			break
		}
	}
	// Verdicts first: a completion or failure follows from them.
	for _, v := range w.Verdicts {
		av := &audit.Verdict{ArtifactID: v.ArtifactID, Valid: v.Valid, Warnings: len(v.Warnings)}
		for _, x := range v.Violations {
			av.Violations = append(av.Violations, x.Pointer+" ("+x.Keyword+")")
		}
		o.audit.Append(audit.Record{Kind: audit.KindArtifactVerdict, At: r.UpdatedAt, Actor: audit.Actor{Type: audit.ActorDaemon},
			Tenant: r.Tenant, TaskID: r.ID, AgentID: r.AgentID, Skill: r.Skill, OutputSchema: r.OutputSchema,
			SchemaDigest: r.SchemaDigest, Verdict: av, TraceID: traceID(r.TraceParent)})
		verdict := "invalid"
		if v.Valid {
			verdict = "valid"
		}
		o.m.ArtifactVerdicts.WithLabelValues(r.AgentID, verdict).Inc()
	}
	for _, t := range w.Transitions {
		rec := audit.Record{At: t.At, Actor: actor(r, t), Tenant: r.Tenant, TaskID: r.ID, AgentID: r.AgentID, Skill: r.Skill,
			From: string(t.From), To: string(t.To), Event: t.Event, Reason: t.Reason, Note: t.Note, MsgID: t.MsgID, TraceID: traceID(r.TraceParent)}
		source := t.Source
		if rec.Actor.Type == audit.ActorOperator {
			source = audit.ActorOperator // a host transition an operator made (admin API)
		}
		if t.Refused {
			rec.Kind, rec.Reason = audit.KindTransitionRefused, "illegal_transition"
			o.m.TransitionsRefused.WithLabelValues(r.AgentID, t.Event, source).Inc()
			o.audit.Append(rec)
			continue
		}
		rec.Kind = audit.KindTransition
		if t.Event == "submit" {
			rec.BriefDigest, rec.OutputSchema, rec.SchemaDigest = r.BriefDigest, r.OutputSchema, r.SchemaDigest
		}
		o.audit.Append(rec)
		o.m.Transitions.WithLabelValues(r.AgentID, string(t.To), source).Inc()
		if t.Source == task.SourceAgent && !agentBefore {
			agentBefore = true
			o.m.FirstResponseSeconds.WithLabelValues(r.AgentID).Observe(t.At.Sub(r.CreatedAt).Seconds())
		}
		if t.To.Terminal() {
			o.m.TasksEnded.WithLabelValues(r.AgentID, string(t.To), reasonCode(t.Reason)).Inc()
			o.m.CompletionSeconds.WithLabelValues(r.AgentID, string(t.To)).Observe(t.At.Sub(r.CreatedAt).Seconds())
		}
	}
	if w.RefusedUnrecorded > 0 {
		o.m.TransitionsRefused.WithLabelValues(r.AgentID, "unrecorded", task.SourceAgent).Add(float64(w.RefusedUnrecorded))
	}
}

// traceID is the trace-id field of a W3C traceparent ("" if malformed).
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// delegated is the broker's OnDelegate hook. What the host sent is
// recorded only once a2ad has checked it: the agent id once the agent was
// found, the skill once it was found in the agent's card, a refused brief
// field only as a pointer of plain member names.
func (o *observer) delegated(ctx context.Context, d broker.Delegation) {
	took := time.Since(d.Start)
	req, r, err := d.Request, d.Task, d.Err
	rec := audit.Record{Actor: audit.Actor{Type: audit.ActorHost, Subject: d.Principal.Subject}, Tenant: d.Principal.Tenant}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		rec.TraceID = sc.TraceID().String()
	}
	outcome := "accepted"
	switch {
	case err != nil:
		outcome = mcpedge.ErrorCode(err)
		rec.Kind, rec.Code, rec.TaskID = audit.KindDelegationRefused, outcome, d.Withdrawn
		switch outcome {
		case "agent_not_found":
		case "agent_not_delegable", "skill_not_found":
			rec.AgentID = req.Agent
		default:
			rec.AgentID, rec.Skill = req.Agent, req.Skill
		}
		var be *brief.Error
		if errors.As(err, &be) {
			rec.Field, rec.SecretKind = plainPointer(be.Field), string(be.Secret)
		}
	case r.CreatedAt.Before(d.Start.Round(0)):
		outcome = "replayed"
		rec.Kind = audit.KindDelegationReplayed
	default:
		rec.Kind = audit.KindDelegationAccepted
	}
	if r != nil && err == nil {
		rec.TaskID, rec.AgentID, rec.Skill = r.ID, r.AgentID, r.Skill
		rec.BriefDigest, rec.OutputSchema, rec.SchemaDigest = r.BriefDigest, r.OutputSchema, r.SchemaDigest
		rec.DroppedEvidence = len(r.DroppedEvidence)
	}
	o.audit.Append(rec)
	o.m.Delegations.WithLabelValues(rec.AgentID, outcome).Inc()
	o.m.DelegateSeconds.WithLabelValues(outcome).Observe(took.Seconds())
}

// plainPointer is p up to its first member name that is not a plain
// identifier (letters, digits, _ and -, at most 64 bytes), then "/…":
// member names are the host's evidence, and only a2ad's own words and
// plain field names go into the audit trail.
func plainPointer(p string) string {
	if p == "" {
		return ""
	}
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, seg := range segs {
		if !natsbind.ValidToken(seg) || len(seg) > 64 {
			return "/" + strings.Join(append(segs[:i:i], "…"), "/")
		}
	}
	return p
}

// eventDropped counts an agent's event terminated for good (the tracker's
// OnDrop): a2ad_events_terminated_total{agent, reason}.
func (o *observer) eventDropped(agentID, reason string) {
	o.m.EventsTerminated.WithLabelValues(agentID, reason).Inc()
}

// agentDisconnected counts an agent connection the embedded server's
// guard closed.
func (o *observer) agentDisconnected(agentID, reason string) {
	o.m.AgentsDisconnected.WithLabelValues(agentID, reason).Inc()
}

// httpRefused counts a refused host token.
func (o *observer) httpRefused(reason string) {
	o.m.AuthFailures.WithLabelValues("http", reason).Inc()
}

// natsRefusalCode classifies a refused NATS connection for the metric.
func natsRefusalCode(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, agentcred.ErrRevoked):
		return "revoked"
	case errors.Is(err, agentcred.ErrInvalid) && strings.Contains(msg, "expired"):
		return "expired"
	case errors.Is(err, agentcred.ErrInvalid):
		return "invalid_credential"
	case strings.HasPrefix(msg, "no agent credential"):
		return "missing_credential"
	case strings.HasPrefix(msg, "wrong password"):
		return "wrong_password"
	case strings.Contains(msg, "a2ad is starting"):
		return "starting"
	case errors.Is(err, embedded.ErrBarred):
		return "barred"
	}
	return "refused"
}

// natsRefused counts a refused NATS connection.
func (o *observer) natsRefused(err error) {
	o.m.AuthFailures.WithLabelValues("nats", natsRefusalCode(err)).Inc()
}

// registered counts a registration by the agent id of its verified
// credential ("" without one) and outcome (status or refusal code).
func (o *observer) registered(cred, outcome string) {
	o.m.Registrations.WithLabelValues(cred, outcome).Inc()
}

// agentCard records a registration or fetch of agentID's card: its outcome
// (rec; changed if it changed the agent's status or fingerprint) or its
// refusal (code). A change is always recorded; the others are aggregated
// per source (see [PerAgentRecordsPerMinute]): the agent id a credential
// proved or whose card a2ad fetched, "" for a registration without a
// verified credential.
func (o *observer) agentCard(source string, by audit.Actor, agentID string, rec *agentcard.Record, changed bool, code string) {
	ar := audit.Record{Actor: by, AgentID: agentID}
	if !natsbind.ValidToken(agentID) {
		ar.AgentID = ""
	}
	if rec != nil {
		ar.Kind, ar.Status, ar.Fingerprint = audit.KindAgentRegistered, string(rec.Status), rec.Fingerprint
	} else {
		ar.Kind, ar.Code = audit.KindAgentCardRefused, code
	}
	if changed {
		o.audit.Append(ar)
		return
	}
	o.aggregate.record(source, ar)
}

// cardRefusalCode classifies a refused card (registration or fetch).
func cardRefusalCode(err error) string {
	var ve *agentcard.ValidationError
	switch {
	case errors.As(err, &ve):
		return "card_invalid"
	case errors.Is(err, agentcard.ErrSignature):
		return "signature_required"
	case errors.Is(err, natsbind.ErrBadSubject):
		return "invalid_agent_id"
	}
	return "refused"
}
