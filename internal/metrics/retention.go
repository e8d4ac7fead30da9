package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Retention is what a2ad reports of how long it keeps ended tasks and
// audit records (docs/operations.md "Retention").
type Retention struct {
	// Tasks is how long an ended task is kept after it ended
	// (negative: for ever); AuditMaxAge the audit stream's max_age as the
	// stream has it (0: for ever).
	Tasks, AuditMaxAge time.Duration
	// Ended is the number of ended tasks in the bucket, as this instance's
	// watcher counts it; Lag how long the oldest removal this instance
	// knows to be due has waited past its time (0: none is due); Removed
	// the tasks this instance removed; Unindexed the tasks written long
	// after they ended that its full late index left to the walk.
	Ended     func() int
	Lag       func() time.Duration
	Removed   func() uint64
	Unindexed func() uint64
}

// WatchRetention adds, read at scrape time: a2ad_task_retention_seconds and
// a2ad_audit_max_age_seconds (+Inf when kept for ever), a2ad_tasks_ended,
// a2ad_tasks_removal_lag_seconds, a2ad_tasks_removed_total and
// a2ad_tasks_removal_unindexed_total.
func (m *Metrics) WatchRetention(r Retention) {
	seconds := func(d time.Duration) float64 {
		if d <= 0 {
			return math.Inf(1)
		}
		return d.Seconds()
	}
	tasks, audit := seconds(r.Tasks), seconds(r.AuditMaxAge)
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_task_retention_seconds",
			Help: "How long an ended task is kept after it ended before it is removed (retention.ended_tasks); +Inf: for ever."},
			func() float64 { return tasks }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_audit_max_age_seconds",
			Help: "The audit stream's max_age as the stream has it (audit.max_age); +Inf: for ever."},
			func() float64 { return audit }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_tasks_ended",
			Help: "Ended tasks in the task bucket, as this instance's watcher counts them."},
			func() float64 { return float64(r.Ended()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_tasks_removal_lag_seconds",
			Help: "How long the oldest removal this instance knows to be due has waited past its time (the retention and this instance's extra delay of up to a minute since the task ended); 0: none is due."},
			func() float64 { return r.Lag().Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "a2ad_tasks_removed_total",
			Help: "Ended tasks this instance removed from the task bucket after their retention."},
			func() float64 { return float64(r.Removed()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "a2ad_tasks_removal_unindexed_total",
			Help: "Ended tasks written more than a minute after they ended that this instance's full late index (4,096) left to the walk of the bucket: removed when the walk reaches their last write, later than their retention."},
			func() float64 {
				if r.Unindexed == nil {
					return 0
				}
				return float64(r.Unindexed())
			}))
}
