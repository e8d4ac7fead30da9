package daemon

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// registrationLimits rate-limit registrations (docs/nats-binding.md §9)
// before a2ad reads anything of them but their credential: a token bucket
// (golang.org/x/time/rate) of AgentLimits.RegistrationsPerMinute a minute,
// with a burst of as many, per agent id of a verified credential, and one
// bucket shared by every registration without a verified credential. An
// agent id comes only from a credential a2ad verified, so a forged
// credential naming another agent spends the shared bucket, never that
// agent's. Buckets are per instance.
type registrationLimits struct {
	perMinute map[string]int // configured agents' limits
	fallback  int            // unconfigured agents' limit, and the shared bucket's

	mu     sync.Mutex
	shared *rate.Limiter
	agents map[string]*rate.Limiter
	swept  time.Time
	// answered is when each bucket's last rate_limited answer went out
	// (at most one a second: the rest go unanswered, so a flood beyond
	// the rate costs a2ad no publish, whatever the agent subscribed).
	answered map[*rate.Limiter]time.Time
}

// answerEvery is how often a bucket beyond its rate gets a rate_limited
// answer; the other registrations beyond it get none (the agent's request
// times out, and it retries).
const answerEvery = time.Second

// mayAnswer reports whether a registration of agentID beyond its rate is
// answered now.
func (l *registrationLimits) mayAnswer(agentID string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.bucket(agentID, now)
	if l.answered == nil || len(l.answered) > maxRegistrationBuckets {
		l.answered = map[*rate.Limiter]time.Time{}
	}
	if now.Sub(l.answered[lim]) < answerEvery {
		return false
	}
	l.answered[lim] = now
	return true
}

// maxRegistrationBuckets bounds the agents' buckets kept in memory. Agent
// ids come from credentials a2ad minted, so there are few; should more be
// busy at once, registrations of agents without a bucket share the bucket
// of registrations without a credential.
const maxRegistrationBuckets = 10_000

// newRegistrationLimits takes each configured agent's limits over
// cfg.AgentLimits, and those over DefaultAgentLimits.
func newRegistrationLimits(cfg Config) *registrationLimits {
	defaults := cfg.AgentLimits.Or(DefaultAgentLimits)
	l := &registrationLimits{perMinute: map[string]int{}, fallback: defaults.RegistrationsPerMinute,
		agents: map[string]*rate.Limiter{}}
	for _, a := range cfg.Agents {
		l.perMinute[a.ID] = a.Limits.Or(defaults).RegistrationsPerMinute
	}
	l.shared = perMinute(l.fallback)
	return l
}

func perMinute(n int) *rate.Limiter {
	return rate.NewLimiter(rate.Every(time.Minute/time.Duration(n)), n)
}

// take spends one registration of agentID ("": without a verified
// credential) at now. When none is left it spends nothing and returns
// false, how long until one is, and the bucket's registrations a minute.
func (l *registrationLimits) take(agentID string, now time.Time) (ok bool, wait time.Duration, limit int) {
	l.mu.Lock()
	lim := l.bucket(agentID, now)
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return false, wait, lim.Burst()
	}
	return true, 0, lim.Burst()
}

// bucket is agentID's bucket, made on first use; l.mu is held.
func (l *registrationLimits) bucket(agentID string, now time.Time) *rate.Limiter {
	if agentID == "" {
		return l.shared
	}
	if lim := l.agents[agentID]; lim != nil {
		return lim
	}
	if len(l.agents) >= maxRegistrationBuckets && now.Sub(l.swept) >= time.Second {
		l.swept = now
		for id, lim := range l.agents {
			// A full bucket is what a new one would be.
			if lim.TokensAt(now) >= float64(lim.Burst()) {
				delete(l.agents, id)
			}
		}
	}
	if len(l.agents) >= maxRegistrationBuckets {
		return l.shared
	}
	n, ok := l.perMinute[agentID]
	if !ok {
		n = l.fallback
	}
	lim := perMinute(n)
	l.agents[agentID] = lim
	return lim
}
