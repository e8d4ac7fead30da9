package daemon

import (
	"context"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/liveness"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// startLiveness probes the approved agents over their bindings until ctx
// ends (docs/operations.md, "Agent liveness"), with the metrics
// a2ad_agent_reachable, a2ad_agent_probe_seconds and
// a2ad_agent_probe_failures_total.
func (d *Daemon) startLiveness(ctx context.Context, agents *agentcard.Registry, nats *natsbind.Client) {
	p := &liveness.Prober{Registry: agents, Log: d.log,
		Period: time.Duration(d.Config.Liveness.Period), Timeout: time.Duration(d.Config.Liveness.Timeout),
		Pingers: map[string]liveness.Pinger{agentcard.BindingNATS: nats, agentcard.BindingJSONRPC: d.httpb.binding, agentcard.BindingHTTPJSON: d.httpb.binding}}
	m := d.Metrics.WatchLiveness(p.Reachable)
	p.OnProbe = func(agentID string, answered bool, took time.Duration) {
		outcome := "answered"
		if !answered {
			outcome = "unanswered"
			m.ProbeFailures.WithLabelValues(agentID).Inc()
		}
		m.ProbeSeconds.WithLabelValues(outcome).Observe(took.Seconds())
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		p.Run(ctx)
	}()
}

// LivenessConfig is the `liveness` key: how often a2ad probes each
// approved agent over its binding, and how long one probe may take.
type LivenessConfig struct {
	// Period is the time between two probes of one agent, as a Go
	// duration; 0 (absent) means 5s.
	Period audit.Duration `yaml:"period"`
	// Timeout bounds one probe (an agent that does not answer within it
	// is offline); 0 means 2s. At most Period.
	Timeout audit.Duration `yaml:"timeout"`
}
