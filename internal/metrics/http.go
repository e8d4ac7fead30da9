package metrics

import "github.com/prometheus/client_golang/prometheus"

// HTTP holds the metrics of the HTTP listener's bounds (docs/operations.md,
// "HTTP limits"). Build it with [Metrics.NewHTTP], once per registry.
type HTTP struct {
	// ConnectionsOpen is the number of HTTP connections open now
	// (a2ad_http_connections_open), TLS handshakes included.
	ConnectionsOpen prometheus.Gauge
	// ConnectionsRefused counts connections closed as soon as accepted
	// because http_limits.max_connections were open
	// (a2ad_http_connections_refused_total).
	ConnectionsRefused prometheus.Counter
	// RateLimited counts requests refused for going over a rate limit
	// (a2ad_rate_limited_total), by edge (mcp, admin), class (read,
	// write) and scope (principal, tenant): which bucket was empty.
	RateLimited *prometheus.CounterVec
}

// NewHTTP registers the HTTP listener's metrics on m's registry, every
// a2ad_rate_limited_total series at 0.
func (m *Metrics) NewHTTP() *HTTP {
	h := &HTTP{
		ConnectionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "a2ad_http_connections_open",
			Help: "HTTP connections open now (TLS handshakes included)."}),
		ConnectionsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "a2ad_http_connections_refused_total",
			Help: "HTTP connections closed as soon as accepted because http_limits.max_connections were open."}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_rate_limited_total",
			Help: "Requests refused over a rate limit, by edge (mcp, admin), class (read, write) and scope (principal, tenant)."},
			[]string{"edge", "class", "scope"}),
	}
	m.Registry.MustRegister(h.ConnectionsOpen, h.ConnectionsRefused, h.RateLimited)
	for _, edge := range []string{"mcp", "admin"} {
		for _, class := range []string{"read", "write"} {
			for _, scope := range []string{"principal", "tenant"} {
				h.RateLimited.WithLabelValues(edge, class, scope)
			}
		}
	}
	return h
}
