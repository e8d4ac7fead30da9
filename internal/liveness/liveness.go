// Package liveness probes the agents a2ad delegates to, so that it knows
// within seconds whether each is reachable (issue 17, docs/operations.md
// "Agent liveness"): every [DefaultPeriod], one probe per approved agent
// over its binding — on NATS a GetTask of natsbind.ProbeTaskID on its RPC
// subject (docs/nats-binding.md §5.7), over HTTP the same request through
// the agent's hardened client (docs/http-binding.md) — whose outcome is
// recorded in the registry (agentcard.Registry.Observe), which makes an
// offline agent not delegable and tells its subscribers.
//
// An agent not reachable (offline, or unknown) is probed every fifth of a
// period, so that one that reconnects is delegable again within about a
// second, and at once when its record changes (it registered again).
//
// Agents are kept apart (docs/isolation.md): at most one probe per agent
// is in flight, each bounded by [DefaultTimeout], and at most
// [DefaultConcurrency] at once, so a slow or hostile agent holds one slot
// for one timeout and never delays another's probe; probes run on their
// own goroutines, never on a delegation's path.
package liveness

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/a2a"
)

// Probe timing and bounds.
const (
	// DefaultPeriod is the time between two probes of one agent.
	DefaultPeriod = 5 * time.Second
	// DefaultTimeout bounds one probe.
	DefaultTimeout = 2 * time.Second
	// DefaultConcurrency bounds the probes in flight per instance.
	DefaultConcurrency = 16
)

// Pinger is one binding's probe (natsbind.Client.Probe,
// httpbind.Binding.Probe): nil when the agent answered anything; an
// error wrapping a2a.ErrAgentUnreachable, in a2ad's words, when it did
// not; any other error when nothing was learnt of the agent (a2ad's own
// NATS connection is down), which changes nothing.
type Pinger interface {
	Probe(ctx context.Context, agentID string) error
}

// Prober probes every agent the registry approves, over its binding. Set
// the fields, then call Run.
type Prober struct {
	Registry *agentcard.Registry
	// Pingers by record Binding: agentcard.BindingNATS, BindingJSONRPC,
	// BindingHTTPJSON. An agent whose binding has none is not probed.
	Pingers map[string]Pinger
	// Period, Timeout and Concurrency: zero is the Default* value.
	Period      time.Duration
	Timeout     time.Duration
	Concurrency int
	// OnProbe, if set, is called after each probe with its outcome and
	// duration (for metrics). It must not block.
	OnProbe func(agentID string, answered bool, took time.Duration)
	Log     *slog.Logger

	mu       sync.Mutex
	inFlight map[string]bool      // agent ids with a probe running
	next     map[string]time.Time // when each known agent is probed next
	slots    chan struct{}
	wake     chan struct{}
	wg       sync.WaitGroup
}

// Run probes until ctx ends, then waits for the probes in flight. A new
// approval (any change the registry announces for an agent not probed
// yet) is probed at once.
func (p *Prober) Run(ctx context.Context) {
	period, _, conc := p.timing()
	p.mu.Lock()
	p.inFlight, p.next = map[string]bool{}, map[string]time.Time{}
	p.slots, p.wake = make(chan struct{}, conc), make(chan struct{}, 1)
	p.mu.Unlock()
	cancel := p.Registry.Subscribe(func(agentID string) {
		// A change to an agent not reachable is most often the agent
		// registering again after its connection came back: probed at
		// once, not at its next fifth of a period, so that it is
		// delegable again within milliseconds of its registration. The
		// change a failed probe itself announces makes one more probe,
		// no loop: an unchanged outcome announces nothing.
		reprobe := p.Registry.Liveness(agentID).Reachability != agentcard.ReachabilityReachable
		p.mu.Lock()
		_, known := p.next[agentID]
		if known && reprobe && !p.inFlight[agentID] {
			delete(p.next, agentID)
		}
		p.mu.Unlock()
		if !known || reprobe {
			p.poke()
		}
	})
	defer cancel()
	defer p.wg.Wait()
	tick := time.NewTicker(period / 10) // the schedule's resolution
	defer tick.Stop()
	for {
		p.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.wake:
		}
	}
}

func (p *Prober) timing() (period, timeout time.Duration, conc int) {
	period, timeout, conc = p.Period, p.Timeout, p.Concurrency
	if period <= 0 {
		period = DefaultPeriod
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	return period, min(timeout, period), conc
}

func (p *Prober) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// round starts the probes that are due.
func (p *Prober) round(ctx context.Context) {
	period, timeout, _ := p.timing()
	lctx, cancel := context.WithTimeout(ctx, timeout)
	targets, err := p.Registry.Probes(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil && p.Log != nil {
			p.Log.Warn("agent liveness: cannot list the agents to probe", "err", err)
		}
		return
	}
	now := time.Now()
	p.mu.Lock()
	seen := make(map[string]bool, len(targets))
	var due []agentcard.Probe
	for _, t := range targets {
		seen[t.AgentID] = true
		if p.Pingers[t.Binding] == nil {
			continue
		}
		n, known := p.next[t.AgentID]
		if p.inFlight[t.AgentID] || (known && now.Before(n)) {
			continue
		}
		// Jittered by ±10% so that agents approved together spread apart.
		// An agent that is not reachable is asked five times as often: one
		// that reconnects (a NATS node lost, a restart) is delegable again
		// within a second, not a period.
		every := period
		if p.Registry.Liveness(t.AgentID).Reachability != agentcard.ReachabilityReachable {
			every = period / 5
		}
		p.next[t.AgentID] = now.Add(every - every/10 + rand.N(every/5+1))
		p.inFlight[t.AgentID] = true
		due = append(due, t)
	}
	for id := range p.next {
		if !seen[id] {
			delete(p.next, id) // no longer approved: probed at once if it comes back
		}
	}
	p.mu.Unlock()
	for _, t := range due {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.done(t.AgentID)
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.slots }()
			defer p.done(t.AgentID)
			p.probe(ctx, t, timeout)
		}()
	}
}

func (p *Prober) done(agentID string) {
	p.mu.Lock()
	delete(p.inFlight, agentID)
	p.mu.Unlock()
}

func (p *Prober) probe(ctx context.Context, t agentcard.Probe, timeout time.Duration) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := p.Pingers[t.Binding].Probe(pctx, t.AgentID)
	cancel()
	if ctx.Err() != nil {
		return // a2ad stops: nothing was learnt of the agent
	}
	took := time.Since(start)
	if err != nil && !errors.Is(err, a2a.ErrAgentUnreachable) {
		if p.Log != nil {
			p.Log.Debug("agent liveness: probe taught nothing", "agent", t.AgentID, "err", err)
		}
		return
	}
	if p.OnProbe != nil {
		p.OnProbe(t.AgentID, err == nil, took)
	}
	if p.Registry.Observe(t.AgentID, err == nil, Reason(err), time.Now().UTC()) && p.Log != nil {
		l := p.Registry.Liveness(t.AgentID)
		p.Log.Info("agent liveness changed", "agent", t.AgentID, "binding", t.Binding, "reachability", l.Reachability, "reason", l.Reason)
	}
}

// Reason is err as a liveness reason: a2ad's words without the "agent
// offline: " its unreachable errors begin with (the NotDelegableReason
// says "offline: " itself); "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	s := strings.TrimSuffix(strings.TrimPrefix(err.Error(), "agent offline: "), ": agent offline")
	if errors.Is(err, context.DeadlineExceeded) && !strings.Contains(s, "deadline") {
		s += " (no answer before the probe's deadline)"
	}
	return s
}

// Reachable returns, for each agent this prober probes whose reachability
// is known, whether it is reachable (for a2ad_agent_reachable).
func (p *Prober) Reachable() map[string]bool {
	p.mu.Lock()
	ids := make([]string, 0, len(p.next))
	for id := range p.next {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		switch p.Registry.Liveness(id).Reachability {
		case agentcard.ReachabilityReachable:
			out[id] = true
		case agentcard.ReachabilityOffline:
			out[id] = false
		}
	}
	return out
}
