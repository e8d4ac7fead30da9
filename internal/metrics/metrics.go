// Package metrics defines a2ad's Prometheus metrics (prometheus/client_golang)
// and serves them at /metrics. Names follow the Prometheus conventions:
// the a2ad_ prefix, _total for counters, _seconds for durations. Labels hold
// only bounded sets: agent ids (configured or registered), task states, a2ad's
// own outcome and reason codes — never tenants, subjects or task ids.
//
// Counters count what this instance did; across instances sharing a NATS
// cluster, sum them. Gauges of tasks by state are each instance's view of
// the shared task bucket, so every instance reports the same values.
package metrics

import (
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds a2ad's collectors on their own registry (with the Go
// runtime and process collectors).
type Metrics struct {
	Registry *prometheus.Registry

	// Delegations counts Delegate calls by agent and outcome: "accepted",
	// "replayed" (an idempotent retry) or the refusal's code
	// (agent_offline, invalid_argument, …).
	Delegations *prometheus.CounterVec
	// DelegateSeconds is the time of a Delegate call (agent lookup, brief,
	// task record, SendMessage and the agent's reply), by outcome.
	DelegateSeconds *prometheus.HistogramVec
	// Transitions counts applied task transitions by agent, target state
	// and source (host, agent, daemon).
	Transitions *prometheus.CounterVec
	// TransitionsRefused counts events the lifecycle refused, by agent,
	// event and source.
	TransitionsRefused *prometheus.CounterVec
	// TasksEnded counts tasks reaching a terminal state, by agent, state
	// and reason code.
	TasksEnded *prometheus.CounterVec
	// FirstResponseSeconds is the time from a task's submission to its
	// first transition caused by the agent, by agent.
	FirstResponseSeconds *prometheus.HistogramVec
	// CompletionSeconds is the time from submission to a terminal state,
	// by agent and state.
	CompletionSeconds *prometheus.HistogramVec
	// ArtifactVerdicts counts artifact verdicts by agent and verdict
	// (valid, invalid).
	ArtifactVerdicts *prometheus.CounterVec
	// AuthFailures counts refused credentials by edge (http: hosts' bearer
	// tokens; nats: agents' NATS credentials) and reason.
	AuthFailures *prometheus.CounterVec
	// Tasks is the number of tasks in each non-terminal state, as this
	// instance's watcher of the task bucket sees them.
	Tasks *prometheus.GaugeVec
	// EventsTerminated counts agent events removed from their stream
	// without being applied, by agent and reason (task.Drop… codes:
	// unknown_task, foreign_task, malformed, out_of_bounds, record_full,
	// undeliverable, bad_subject, task_ended).
	EventsTerminated *prometheus.CounterVec
	// AgentsDisconnected counts agent connections the embedded server
	// closed for going over their agent_limits, by agent and reason
	// (publish_rate, subscriptions, connections) or a revoked credential (revoked).
	AgentsDisconnected *prometheus.CounterVec
	// Registrations counts agents' registrations (a2a.registry.register)
	// by the agent id of their verified credential ("" without one) and
	// outcome: the resulting status (approved, pending, quarantined), the
	// refusal code (unauthenticated, forbidden, invalid, rate_limited) or
	// ignored (a reply subject outside the agent's inbox).
	Registrations *prometheus.CounterVec
}

// latencyBuckets span 250 µs to 1 min: delegations take milliseconds, an
// agent's first answer up to its budget.
var latencyBuckets = []float64{0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// taskBuckets span 1 ms to 1 day: tasks may wait for a person.
var taskBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}

// New registers every metric on a new registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	m.Delegations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_delegations_total",
		Help: "Delegate calls by agent and outcome: accepted, replayed (idempotent retry) or the refusal code."}, []string{"agent", "outcome"})
	m.DelegateSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2ad_delegate_duration_seconds",
		Help:    "Time of a Delegate call until the host has its task: agent lookup, brief, task record, SendMessage and the agent's reply.",
		Buckets: latencyBuckets}, []string{"outcome"})
	m.Transitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_task_transitions_total",
		Help: "Applied task transitions by agent, target state and source (host, agent, daemon)."}, []string{"agent", "to", "source"})
	m.TransitionsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_task_transitions_refused_total",
		Help: "Events refused by the task lifecycle, by agent, event and source."}, []string{"agent", "event", "source"})
	m.TasksEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_tasks_ended_total",
		Help: "Tasks reaching a terminal state, by agent, state and reason code."}, []string{"agent", "state", "reason"})
	m.FirstResponseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2ad_task_first_response_seconds",
		Help:    "Time from a task's submission to the agent's first state change.",
		Buckets: taskBuckets}, []string{"agent"})
	m.CompletionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2ad_task_duration_seconds",
		Help:    "Time from a task's submission to its terminal state, by agent and state.",
		Buckets: taskBuckets}, []string{"agent", "state"})
	m.ArtifactVerdicts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_artifact_verdicts_total",
		Help: "Artifacts checked against their host schema and policy, by agent and verdict (valid, invalid)."}, []string{"agent", "verdict"})
	m.AuthFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_auth_failures_total",
		Help: "Refused credentials by edge (http: host bearer tokens, nats: agent credentials) and reason."}, []string{"edge", "reason"})
	m.Tasks = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "a2ad_tasks",
		Help: "Tasks in each non-terminal state, as this instance's watcher of the task bucket sees them."}, []string{"state"})
	m.AgentsDisconnected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_agent_disconnects_total",
		Help: "Agent connections the embedded NATS server closed, by agent and reason: over their agent_limits (publish_rate, subscriptions, connections) or a revoked credential (revoked)."}, []string{"agent", "reason"})
	m.EventsTerminated = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_events_terminated_total",
		Help: "Agent events removed from their stream without being applied (they never can be), by agent and reason."}, []string{"agent", "reason"})
	m.Registrations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2ad_registrations_total",
		Help: "Agent registrations by the agent id of their verified credential (empty without one) and outcome: the resulting status or the refusal code."},
		[]string{"agent", "outcome"})
	for _, c := range []prometheus.Collector{m.Delegations, m.DelegateSeconds, m.Transitions, m.TransitionsRefused, m.TasksEnded,
		m.FirstResponseSeconds, m.CompletionSeconds, m.ArtifactVerdicts, m.AuthFailures, m.Tasks, m.EventsTerminated, m.AgentsDisconnected, m.Registrations} {
		f(c)
	}
	for _, st := range []string{"submitted", "working", "input-required", "auth-required"} {
		m.Tasks.WithLabelValues(st) // every state is a series from the start, at 0
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// natsStates are the connection states a2ad_nats_connection_state reports.
var natsStates = []nats.Status{nats.CONNECTED, nats.CONNECTING, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED, nats.DRAINING_SUBS, nats.DRAINING_PUBS}

// WatchNATS adds metrics of a2ad's NATS connection, read at scrape time:
// a2ad_nats_connection_state{state} (1 for the current state, 0 for the
// others) and a2ad_nats_reconnects_total.
func (m *Metrics) WatchNATS(nc *nats.Conn) {
	for _, st := range natsStates {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_nats_connection_state",
			Help:        "State of a2ad's NATS connection: 1 for the current state.",
			ConstLabels: prometheus.Labels{"state": strings.ToLower(st.String())}},
			func() float64 {
				if nc.Status() == st {
					return 1
				}
				return 0
			}))
	}
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "a2ad_nats_reconnects_total",
		Help: "Reconnections of a2ad's NATS connection."}, func() float64 { return float64(nc.Stats().Reconnects) }))
}

// AuditCounts is what the audit log reports of itself.
type AuditCounts interface {
	Written() uint64
	Dropped() uint64
	Retries() uint64
	Pending() int
}

// WatchAudit adds, read at scrape time: a2ad_audit_records_total{outcome}
// (written, dropped), a2ad_audit_publish_retries_total and
// a2ad_audit_queue_records.
func (m *Metrics) WatchAudit(a AuditCounts) {
	for outcome, get := range map[string]func() uint64{"written": a.Written, "dropped": a.Dropped} {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "a2ad_audit_records_total",
			Help:        "Audit records by outcome: written to the stream, dropped (a full queue, or unstorable).",
			ConstLabels: prometheus.Labels{"outcome": outcome}}, func() float64 { return float64(get()) }))
	}
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "a2ad_audit_publish_retries_total",
		Help: "Audit record publishes that failed and were retried."}, func() float64 { return float64(a.Retries()) }))
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_audit_queue_records",
		Help: "Audit records waiting for JetStream."}, func() float64 { return float64(a.Pending()) }))
}

// Handler serves the registry in the Prometheus text (or OpenMetrics)
// exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}

// StreamUsage is one JetStream stream's use of the store.
type StreamUsage struct {
	Name     string
	Bytes    uint64
	Messages uint64
	// MaxBytes is the stream's max_bytes (≤ 0: none).
	MaxBytes int64
}

// StorageReport is what a2ad knows of its JetStream store.
type StorageReport struct {
	// Streams are a2ad's streams and KV buckets.
	Streams []StreamUsage
	// Capacity is the store's size in bytes (0: unknown); Room what task
	// records can still use of it: the capacity less what every stream
	// holds, or has reserved with max_bytes.
	Capacity, Room int64
	// Accepting is false while new delegations are refused for lack of
	// room.
	Accepting bool
}

// WatchStorage adds, read at scrape time from read: per stream
// a2ad_jetstream_stream_bytes, a2ad_jetstream_stream_messages and
// a2ad_jetstream_stream_max_bytes (for streams with a limit);
// a2ad_jetstream_store_capacity_bytes and a2ad_jetstream_store_room_bytes
// (when the capacity is known); a2ad_delegations_accepted (1 while new
// delegations are accepted, 0 while storage refuses them).
func (m *Metrics) WatchStorage(read func() StorageReport) {
	m.Registry.MustRegister(storageCollector(read))
}

var (
	streamBytesDesc = prometheus.NewDesc("a2ad_jetstream_stream_bytes",
		"Bytes a JetStream stream or KV bucket of a2ad holds.", []string{"stream"}, nil)
	streamMsgsDesc = prometheus.NewDesc("a2ad_jetstream_stream_messages",
		"Messages a JetStream stream or KV bucket of a2ad holds.", []string{"stream"}, nil)
	streamMaxDesc = prometheus.NewDesc("a2ad_jetstream_stream_max_bytes",
		"The max_bytes limit of a JetStream stream of a2ad (reserved in the store).", []string{"stream"}, nil)
	capacityDesc = prometheus.NewDesc("a2ad_jetstream_store_capacity_bytes",
		"Size of the JetStream store a2ad writes to: the embedded server's max store or the account's limit.", nil, nil)
	roomDesc = prometheus.NewDesc("a2ad_jetstream_store_room_bytes",
		"Bytes of the JetStream store task records can still use: capacity less what streams hold or have reserved.", nil, nil)
	acceptingDesc = prometheus.NewDesc("a2ad_delegations_accepted",
		"1 while new delegations are accepted, 0 while the store has less room than storage.reserve_bytes.", nil, nil)
)

type storageCollector func() StorageReport

func (c storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{streamBytesDesc, streamMsgsDesc, streamMaxDesc, capacityDesc, roomDesc, acceptingDesc} {
		ch <- d
	}
}

func (c storageCollector) Collect(ch chan<- prometheus.Metric) {
	r := c()
	for _, s := range r.Streams {
		ch <- prometheus.MustNewConstMetric(streamBytesDesc, prometheus.GaugeValue, float64(s.Bytes), s.Name)
		ch <- prometheus.MustNewConstMetric(streamMsgsDesc, prometheus.GaugeValue, float64(s.Messages), s.Name)
		if s.MaxBytes > 0 {
			ch <- prometheus.MustNewConstMetric(streamMaxDesc, prometheus.GaugeValue, float64(s.MaxBytes), s.Name)
		}
	}
	if r.Capacity > 0 {
		ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(r.Capacity))
		ch <- prometheus.MustNewConstMetric(roomDesc, prometheus.GaugeValue, float64(r.Room))
	}
	accepting := 0.0
	if r.Accepting {
		accepting = 1
	}
	ch <- prometheus.MustNewConstMetric(acceptingDesc, prometheus.GaugeValue, accepting)
}
