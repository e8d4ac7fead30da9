package agentcard

import (
	"context"
	"time"
)

// Reachability is whether this a2ad instance can reach an agent over its
// binding now, as its probes and deliveries found ([Registry.Observe]).
type Reachability string

const (
	// ReachabilityUnknown: not probed yet, or never reached since this
	// instance started and failing for less than [UnreachedGrace]. An
	// unknown agent is not offline: it stays delegable.
	ReachabilityUnknown Reachability = "unknown"
	// ReachabilityReachable: the last probe or delivery got an answer.
	ReachabilityReachable Reachability = "reachable"
	// ReachabilityOffline: the last probe or delivery got none (no
	// responder, a refused connection, a timeout). The agent is not
	// delegable, with the NotDelegableReason "offline: <reason>".
	ReachabilityOffline Reachability = "offline"
)

// UnreachedGrace is how long an agent this instance has not reached since
// it started may fail its probes and deliveries before it counts as
// offline: an agent connected to an earlier run (of a2ad with its
// embedded NATS, say) reconnects about a second after a restart, and
// until then it is unknown, not offline. Once reached, an agent is
// offline at the first failure.
const UnreachedGrace = 3 * time.Second

// Liveness is what this a2ad instance knows of an agent's reachability.
// It is per instance and in memory: each instance probes for itself, and
// none of it is stored in [Bucket].
type Liveness struct {
	Reachability Reachability `json:"reachability"`
	// Since is when the agent became Reachability (for offline: its
	// first failure in a row); zero while unknown.
	Since time.Time `json:"since,omitzero"`
	// CheckedAt is the time of the last probe or delivery that said
	// anything of it; zero if none yet.
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// Reason says, in a2ad's words, why the agent is not reachable (the
	// last failure); "" when reachable.
	Reason string `json:"reason,omitempty"`
}

// liveness is one agent's [Liveness] with what decides the next one.
type liveness struct {
	Liveness
	reached      bool      // reached since this instance started
	failingSince time.Time // first failure in a row; zero after an answer
}

// Observe records what a probe or a delivery to agentID learned at at:
// whether the agent answered and, if not, why not (reason, in a2ad's
// words). An answer makes it reachable; a failure makes an agent reached
// before offline at once, and one never reached since this instance
// started offline once it has failed for [UnreachedGrace]. Each change of
// Reachability is announced to the subscribers ([Registry.Changed]).
// Observe reports whether Reachability changed.
func (r *Registry) Observe(agentID string, answered bool, reason string, at time.Time) bool {
	r.liveMu.Lock()
	if r.liveness == nil {
		r.liveness = map[string]*liveness{}
	}
	l := r.liveness[agentID]
	if l == nil {
		l = &liveness{Liveness: Liveness{Reachability: ReachabilityUnknown}}
		r.liveness[agentID] = l
	}
	if at.Before(l.CheckedAt) {
		r.liveMu.Unlock()
		return false // an older observation than one applied already
	}
	was := l.Reachability
	l.CheckedAt = at
	switch {
	case answered:
		l.reached, l.failingSince, l.Reason = true, time.Time{}, ""
		if was != ReachabilityReachable {
			l.Reachability, l.Since = ReachabilityReachable, at
		}
	default:
		if l.failingSince.IsZero() {
			l.failingSince = at
		}
		l.Reason = reason
		if was != ReachabilityOffline && (l.reached || at.Sub(l.failingSince) >= UnreachedGrace) {
			l.Reachability, l.Since = ReachabilityOffline, l.failingSince
		}
	}
	changed := l.Reachability != was
	r.liveMu.Unlock()
	if changed {
		r.Changed(agentID)
	}
	return changed
}

// Liveness returns what this instance knows of agentID's reachability:
// ReachabilityUnknown for an agent it never probed nor delivered to.
func (r *Registry) Liveness(agentID string) Liveness {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	if l := r.liveness[agentID]; l != nil {
		return l.Liveness
	}
	return Liveness{Reachability: ReachabilityUnknown}
}

// Probe is an agent a2ad probes: approved, with an interface it delegates
// over (delegable, or only offline).
type Probe struct {
	AgentID string
	// Binding is the record's Binding: [BindingNATS], [BindingJSONRPC]
	// or [BindingHTTPJSON].
	Binding string
}

// Probes returns the agents to probe, from the records in memory (or, while
// the bucket's watcher is not running, read from the bucket), in no
// particular order.
func (r *Registry) Probes(ctx context.Context) ([]Probe, error) {
	r.watchOnce.Do(r.startWatch)
	var recs []Record
	if r.live.Load() {
		r.viewMu.Lock()
		recs = make([]Record, 0, len(r.views))
		for _, v := range r.views {
			recs = append(recs, v.rec)
		}
		r.viewMu.Unlock()
		for i := range recs {
			r.view(&recs[i])
		}
	} else {
		var err error
		if recs, err = r.List(ctx, ""); err != nil {
			return nil, err
		}
	}
	out := []Probe{}
	for _, rec := range recs {
		if rec.Delegable || rec.offline {
			out = append(out, Probe{AgentID: rec.AgentID, Binding: rec.Binding})
		}
	}
	return out, nil
}
