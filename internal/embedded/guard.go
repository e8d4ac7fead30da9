package embedded

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrBarred is wrapped by the refusal of an agent barred for publishing
// faster than its limit.
var ErrBarred = errors.New("agent barred for publishing faster than its limit")

// Bars are the agent ids the embedded server refuses at connect until a
// time: agents [GuardPublishes] disconnected. The zero value is ready.
type Bars struct {
	mu    sync.Mutex
	until map[string]bar
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

// Publish guard timing: rates are measured every guardEvery, and a
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

// GuardPublishes measures, every half second until ctx ends, the messages
// each agent connection of s publishes per second (events, replies,
// registrations, refused publishes alike), and disconnects one that
// published more than limit(agent id) a second for a second; its agent
// is refused at connect for a while (see [Bars.Bar]), then may come back.
// onBar (may be nil) is told of each, with the rate and the bar. The NATS server has no rate
// limit of its own, and every message costs it, and so a2ad, CPU whether
// JetStream stores or refuses it: this bounds what one agent can cost.
// limit ≤ 0 means no limit for that agent.
func GuardPublishes(ctx context.Context, s *server.Server, bars *Bars, limit func(agentID string) float64, onBar func(agentID string, rate float64, barred time.Duration)) {
	type seen struct {
		msgs    int64
		at      time.Time
		strikes int
	}
	last := map[uint64]seen{}
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cz, err := s.Connz(&server.ConnzOptions{Username: true, Limit: 1 << 20})
		if err != nil {
			continue
		}
		now := time.Now()
		next := make(map[uint64]seen, len(cz.Conns))
		for _, c := range cz.Conns {
			agent := c.AuthorizedUser
			if agent == "" || agent == DaemonUser || agent == AuditAdminUser {
				continue
			}
			cur := seen{msgs: c.InMsgs, at: now}
			if prev, ok := last[c.Cid]; ok {
				rate := float64(c.InMsgs-prev.msgs) / now.Sub(prev.at).Seconds()
				if l := limit(agent); l > 0 && rate > l {
					cur.strikes = prev.strikes + 1
				}
				if cur.strikes >= guardStrikes {
					d := bars.Bar(agent)
					_ = s.DisconnectClientByID(c.Cid)
					if onBar != nil {
						onBar(agent, rate, d)
					}
					continue
				}
			}
			next[c.Cid] = cur
		}
		last = next
	}
}
