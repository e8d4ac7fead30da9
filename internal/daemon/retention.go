package daemon

import (
	"context"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/metrics"
	"github.com/a2ad/a2ad/task"
)

// startRetention runs the removal of ended tasks past retention.ended_tasks
// on store until ctx ends, and shows it, with the audit stream's age, in
// /metrics.
func (d *Daemon) startRetention(ctx context.Context, r *task.Retention, store *task.Store) {
	r.Store = store
	keep := r.Keep
	if keep == 0 {
		keep = task.DefaultRetention
	}
	d.Metrics.WatchRetention(metrics.Retention{Tasks: keep, AuditMaxAge: d.Audit.MaxAge(),
		Ended: store.Ended, Lag: func() time.Duration { return r.Lag(time.Now()) }, Removed: r.Removed, Unindexed: r.Unindexed})
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		r.Run(ctx)
	}()
}

// RetentionConfig is how long a2ad keeps ended tasks (docs/operations.md
// "Retention").
type RetentionConfig struct {
	// EndedTasks is how long a task that ended (completed, failed,
	// canceled or rejected) is kept after it ended, as a Go duration
	// ("720h", "90s"); then whichever instance gets there first removes
	// it, record and history, from the task bucket, and task_get answers
	// task_not_found; for one more such period, delegate with its
	// idempotency key answers idempotency_key_expired. Open tasks are
	// never removed, however old. 0 (absent) means 720h (30 days); a
	// negative value ("-1s") keeps ended tasks for ever.
	EndedTasks audit.Duration `yaml:"ended_tasks"`
	// RemovalsPerSecond paces each instance's removals of tasks past
	// their retention. Negative is a configuration error. Default 1000.
	RemovalsPerSecond float64 `yaml:"removals_per_second"`
}
