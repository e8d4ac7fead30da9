package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Liveness holds the agent liveness metrics (internal/liveness).
type Liveness struct {
	// ProbeSeconds is the time of one liveness probe, by outcome
	// (answered, unanswered); an unanswered one lasts up to the probe
	// timeout unless the agent is refused at once (no responders).
	ProbeSeconds *prometheus.HistogramVec
	// ProbeFailures counts probes that got no answer, by agent.
	ProbeFailures *prometheus.CounterVec
}

var reachableDesc = prometheus.NewDesc("a2ad_agent_reachable",
	"1 while this instance reaches the agent over its binding (its last probe or delivery got an answer), 0 while it is offline; absent while unknown (not probed yet).",
	[]string{"agent"}, nil)

// WatchLiveness adds a2ad_agent_reachable{agent}, read at scrape time from
// read (agent id → reachable; agents whose reachability is unknown are
// left out), a2ad_agent_probe_seconds{outcome} and
// a2ad_agent_probe_failures_total{agent}. Agent labels are the agents
// a2ad probes: approved ones, a set the operator bounds.
func (m *Metrics) WatchLiveness(read func() map[string]bool) *Liveness {
	l := &Liveness{
		ProbeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2ad_agent_probe_seconds",
			Help:    "Time of one agent liveness probe over its binding, by outcome (answered, unanswered).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5}}, []string{"outcome"}),
		ProbeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_agent_probe_failures_total",
			Help: "Agent liveness probes that got no answer (no responder, connection refused, timeout), by agent."}, []string{"agent"}),
	}
	m.Registry.MustRegister(l.ProbeSeconds, l.ProbeFailures, reachableCollector(read))
	return l
}

type reachableCollector func() map[string]bool

func (c reachableCollector) Describe(ch chan<- *prometheus.Desc) { ch <- reachableDesc }

func (c reachableCollector) Collect(ch chan<- prometheus.Metric) {
	for agent, up := range c() {
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(reachableDesc, prometheus.GaugeValue, v, agent)
	}
}
