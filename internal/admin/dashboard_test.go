package admin

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/metrics"
)

// The dashboard's figures are the registry's (what /metrics exports),
// differenced over the window: counts by outcome and state, and the
// quantiles histogram_quantile would give from the accepted delegations'
// buckets.
func TestDashboardFigures(t *testing.T) {
	m := metrics.New()
	d := NewDashboard(m.Registry)
	t0 := d.samples[0].at
	for _, s := range []float64{0.003, 0.004, 0.02, 0.7} {
		m.Delegations.WithLabelValues("fraud-review", "accepted").Inc()
		m.DelegateSeconds.WithLabelValues("accepted").Observe(s)
	}
	m.Delegations.WithLabelValues("fraud-review", "agent_offline").Inc()
	m.DelegateSeconds.WithLabelValues("agent_offline").Observe(0.0001) // a refusal's time is no delegation's latency
	m.Delegations.WithLabelValues("fraud-review", "replayed").Inc()
	m.TasksEnded.WithLabelValues("fraud-review", "completed", "").Add(2)
	m.TasksEnded.WithLabelValues("fraud-review", "failed", "deadline_exceeded").Inc()
	m.Tasks.WithLabelValues("working").Add(3)

	rec := httptest.NewRecorder()
	d.Handler(rec, httptest.NewRequest("GET", "/v1/dashboard", nil))
	var f DashboardFigures
	if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	h := f.LastHour
	if h.Delegations != 6 || h.Accepted != 4 || h.Refused != 1 || h.TasksFailed != 1 || h.Failures != 2 ||
		h.Ended["completed"] != 2 || h.Ended["failed"] != 1 || len(h.Ended) != 2 {
		t.Errorf("counts: %+v", h)
	}
	if f.OpenTasks["working"] != 3 || f.OpenTasks["submitted"] != 0 || len(f.OpenTasks) != 4 {
		t.Errorf("open tasks: %v", f.OpenTasks)
	}
	// Buckets ≤0.005: 2, ≤0.025: 3, ≤1: 4. p50: rank 2 in (0.0025, 0.005];
	// p99: rank 3.96 in (0.5, 1].
	if h.P50 == nil || h.P99 == nil || math.Abs(*h.P50-0.005) > 1e-12 || math.Abs(*h.P99-0.98) > 1e-12 {
		t.Errorf("p50 %v p99 %v, want 0.005 and 0.98", deref(h.P50), deref(h.P99))
	}

	// An hour and more later, the window starts at the oldest sample at
	// most an hour old.
	d.Sample(t0.Add(61 * time.Minute))
	m.Delegations.WithLabelValues("fraud-review", "accepted").Inc()
	m.DelegateSeconds.WithLabelValues("accepted").Observe(0.04)
	f = d.Figures(t0.Add(61*time.Minute + time.Second))
	h = f.LastHour
	if h.Delegations != 1 || h.Accepted != 1 || h.Failures != 0 || len(h.Ended) != 0 || h.WindowSeconds != 1 ||
		!h.From.Equal(t0.Add(61*time.Minute).UTC()) || !f.Since.Equal(t0.UTC()) {
		t.Errorf("window after an hour: %+v since %v", h, f.Since)
	}
	if h.P50 == nil || math.Abs(*h.P50-0.0375) > 1e-12 {
		t.Errorf("p50 of the window's one delegation (0.04 s, bucket (0.025, 0.05]): %v", deref(h.P50))
	}
	// Samples older than needed are forgotten.
	d.Sample(t0.Add(125 * time.Minute))
	if len(d.samples) != 2 || !d.samples[0].at.Equal(t0.Add(61*time.Minute)) {
		t.Errorf("kept %d samples, oldest at %v", len(d.samples), d.samples[0].at.Sub(t0))
	}
	// No delegation in the window: no quantiles.
	f = d.Figures(t0.Add(125 * time.Minute))
	if f.LastHour.P50 != nil || f.LastHour.P99 != nil {
		t.Errorf("quantiles without delegations: %v %v", deref(f.LastHour.P50), deref(f.LastHour.P99))
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
