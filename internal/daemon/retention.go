package daemon

import (
	"context"
	"time"

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
		Ended: r.Ended, Due: func() int { return r.Due(time.Now()) }, Removed: r.Removed})
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		r.Run(ctx)
	}()
}
