package embedded

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrBarred is wrapped by the refusal of an agent's connection while the
// agent is barred ([GuardAgents]).
var ErrBarred = errors.New("agent refused for a while: it went over its agent_limits")

// Bars are the agent ids the embedded server refuses at connect until a
// time: agents [GuardAgents] disconnected. The zero value is ready.
type Bars struct {
	mu    sync.Mutex
	until map[string]bar
	full  map[string]bool // agents at their connection limit, as last seen
}

type bar struct {
	until time.Time
	for_  time.Duration // the length of this bar: the next one, soon after, is twice as long
}

// Bar refuses agentID's connections for BarFor from now, or, when its
// last bar ended less than BarForget ago, for twice as long as that one,
// at most BarMax: an agent that floods again as soon as it is let back is
// kept out longer each time. It returns how long.
func (b *Bars) Bar(agentID string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.until == nil {
		b.until = map[string]bar{}
	}
	now := time.Now()
	for id, x := range b.until { // bounded by the agents barred lately
		if now.Sub(x.until) > BarForget {
			delete(b.until, id)
		}
	}
	d := BarFor
	if prev, ok := b.until[agentID]; ok {
		d = min(2*prev.for_, BarMax)
	}
	b.until[agentID] = bar{until: now.Add(d), for_: d}
	return d
}

// setConnections notes which agents are at their connection limit.
func (b *Bars) setConnections(conns map[string]int, limits func(string) AgentLimits) {
	full := map[string]bool{}
	for agent, n := range conns {
		if l := limits(agent).Connections; l > 0 && n >= l {
			full[agent] = true
		}
	}
	b.mu.Lock()
	b.full = full
	b.mu.Unlock()
}

// atConnectionLimit reports whether agentID had as many connections as it
// may at the guard's last look.
func (b *Bars) atConnectionLimit(agentID string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.full[agentID]
}

// barred reports whether agentID is refused now, and until when.
func (b *Bars) barred(agentID string) (time.Time, bool) {
	if b == nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	x, ok := b.until[agentID]
	return x.until, ok && time.Now().Before(x.until)
}

// Guard timing: rates are measured every guardEvery, and a
// connection over its limit in guardStrikes measurements in a row (a
// second) is disconnected; its agent is then refused for BarFor, doubling
// up to BarMax while it floods again within BarForget of its last bar.
const (
	guardEvery   = 500 * time.Millisecond
	guardStrikes = 2
	BarFor       = 30 * time.Second
	BarMax       = 10 * time.Minute
	BarForget    = 10 * time.Minute
)

// AgentLimits are what [GuardAgents] holds one agent's connections to,
// all of them together; a zero field is no limit.
type AgentLimits struct {
	// PublishesPerSecond bounds the messages the agent's connections
	// publish a second (events, replies, registrations, refused ones
	// alike).
	PublishesPerSecond float64
	// Connections bounds the agent's connections at once.
	Connections int
	// Subscriptions bounds the agent's subscriptions: every one that
	// matches a subject a2ad publishes to (its RPC subject, its inbox) is
	// one more copy the server makes of each message.
	Subscriptions int
}

// Reasons of a disconnection by [GuardAgents].
const (
	DisconnectPublishRate   = "publish_rate"
	DisconnectSubscriptions = "subscriptions"
	DisconnectConnections   = "connections"
)

// GuardAgents holds every agent's connections to s to the agent's limits
// until ctx ends, looking every half second. The NATS server has no rate
// or per-user limits of its own for configured users, and every message,
// subscription and connection costs it — and so a2ad's process — CPU and
// memory whether JetStream stores the message or refuses it: this bounds
// what one agent can cost, and so what it can take from the others.
//
//   - an agent whose connections together published more than
//     PublishesPerSecond a second for a second, or hold more than
//     Subscriptions subscriptions, has all its connections closed and is
//     refused at connect for a while ([Bars.Bar]);
//   - beyond Connections connections of one agent, the newest are closed
//     (and, until the next look, more are refused at connect).
//
// onDisconnect (may be nil) is told once per agent and look: the agent,
// the reason (Disconnect…), the measured rate or count, and how long the
// agent is barred (0: not barred).
func GuardAgents(ctx context.Context, s *server.Server, bars *Bars, limits func(agentID string) AgentLimits,
	onDisconnect func(agentID, reason string, measured float64, barred time.Duration)) {
	lastMsgs := map[uint64]int64{} // per connection, at the last look
	lastAt := time.Now()
	strikes := map[string]int{}
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cz, err := s.Connz(&server.ConnzOptions{Username: true, Limit: 1 << 20, Sort: server.ByStart})
		if err != nil {
			continue
		}
		now := time.Now()
		elapsed := now.Sub(lastAt).Seconds()
		lastAt = now
		type agentConns struct {
			cids      []uint64 // oldest first
			published int64    // since the last look
			subs      int
		}
		agents := map[string]*agentConns{}
		msgs := make(map[uint64]int64, len(cz.Conns))
		for _, c := range cz.Conns {
			agent := c.AuthorizedUser
			if agent == "" || agent == DaemonUser || agent == AuditAdminUser {
				continue
			}
			a := agents[agent]
			if a == nil {
				a = &agentConns{}
				agents[agent] = a
			}
			a.cids = append(a.cids, c.Cid)
			a.published += c.InMsgs - lastMsgs[c.Cid] // a new connection: all it published
			a.subs += int(c.NumSubs)
			msgs[c.Cid] = c.InMsgs
		}
		lastMsgs = msgs
		conns := map[string]int{}
		for agent, a := range agents {
			l := limits(agent)
			rate := float64(a.published) / elapsed
			if l.PublishesPerSecond > 0 && rate > l.PublishesPerSecond {
				strikes[agent]++
			} else {
				delete(strikes, agent)
			}
			reason, measured := "", 0.0
			switch {
			case strikes[agent] >= guardStrikes:
				reason, measured = DisconnectPublishRate, rate
			case l.Subscriptions > 0 && a.subs > l.Subscriptions:
				reason, measured = DisconnectSubscriptions, float64(a.subs)
			}
			if reason != "" {
				d := bars.Bar(agent)
				for _, cid := range a.cids {
					_ = s.DisconnectClientByID(cid)
				}
				delete(strikes, agent)
				if onDisconnect != nil {
					onDisconnect(agent, reason, measured, d)
				}
				continue
			}
			conns[agent] = len(a.cids)
			if l.Connections > 0 && len(a.cids) > l.Connections {
				for _, cid := range a.cids[l.Connections:] {
					_ = s.DisconnectClientByID(cid)
				}
				conns[agent] = l.Connections
				if onDisconnect != nil {
					onDisconnect(agent, DisconnectConnections, float64(len(a.cids)), 0)
				}
			}
		}
		for agent := range strikes {
			if agents[agent] == nil {
				delete(strikes, agent) // gone
			}
		}
		bars.setConnections(conns, limits)
	}
}
