package admin

import (
	"context"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// DashboardWindow is the span of the dashboard's "last hour" figures, and
// DashboardEvery how often it samples the counters.
const (
	DashboardWindow = time.Hour
	DashboardEvery  = time.Minute
)

// Dashboard serves GET /v1/dashboard from the same figures /metrics
// exports (the daemon's Prometheus registry, this instance only):
//
//	{"at": time, "since": time (the first sample),
//	 "open_tasks": {"submitted": n, "working": n, …}          gauge a2ad_tasks now
//	 "last_hour": {
//	   "from": time, "window_seconds": s,                    the span the figures cover
//	   "delegations": n, "accepted": n, "refused": n,        a2ad_delegations_total by outcome (replayed counts in delegations only)
//	   "tasks_failed": n, "failures": n (refused + tasks_failed),
//	   "ended": {"completed": n, …},                          a2ad_tasks_ended_total by state
//	   "delegate_p50_seconds": x|null, "delegate_p99_seconds": x|null}}
//
// The counters are sampled every DashboardEvery (Run), in memory (at most DashboardWindow/DashboardEvery+2 samples); "last hour"
// is the difference between now and the oldest sample at most
// DashboardWindow old, so it covers less than an hour for a daemon started
// less than an hour ago (window_seconds says how much). The quantiles are
// interpolated within the buckets of a2ad_delegate_duration_seconds
// {outcome="accepted"}, as Prometheus's histogram_quantile does; null when
// no delegation was accepted in the window.
type Dashboard struct {
	g       prometheus.Gatherer
	mu      sync.Mutex
	samples []sample // oldest first
}

type sample struct {
	at          time.Time
	delegations map[string]float64 // by outcome
	ended       map[string]float64 // by state
	open        map[string]float64 // by state (gauge)
	bounds      []float64          // the histogram's upper bounds, +Inf last
	cumulative  []float64          // cumulative counts per bound
}

// NewDashboard takes its first sample of g.
func NewDashboard(g prometheus.Gatherer) *Dashboard {
	d := &Dashboard{g: g}
	d.Sample(time.Now())
	return d
}

// Run samples every DashboardEvery until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(DashboardEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.Sample(now)
		}
	}
}

// Sample records the counters now and forgets samples no longer needed.
func (d *Dashboard) Sample(now time.Time) {
	s := d.gather(now)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.samples = append(d.samples, s)
	// Keep the oldest sample within the window, and nothing older.
	for len(d.samples) > 1 && now.Sub(d.samples[1].at) >= DashboardWindow {
		d.samples = d.samples[1:]
	}
}

func (d *Dashboard) gather(now time.Time) sample {
	s := sample{at: now, delegations: map[string]float64{}, ended: map[string]float64{}, open: map[string]float64{}}
	mfs, _ := d.g.Gather() // a collector's error leaves its figures out; the rest are still good
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "a2ad_tasks":
				s.open[label(m, "state")] += m.GetGauge().GetValue()
			case "a2ad_delegations_total":
				s.delegations[label(m, "outcome")] += m.GetCounter().GetValue()
			case "a2ad_tasks_ended_total":
				s.ended[label(m, "state")] += m.GetCounter().GetValue()
			case "a2ad_delegate_duration_seconds":
				if label(m, "outcome") != "accepted" {
					continue
				}
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					s.bounds = append(s.bounds, b.GetUpperBound())
					s.cumulative = append(s.cumulative, float64(b.GetCumulativeCount()))
				}
				s.bounds = append(s.bounds, math.Inf(1))
				s.cumulative = append(s.cumulative, float64(h.GetSampleCount()))
			}
		}
	}
	return s
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// DashboardFigures is the answer of GET /v1/dashboard.
type DashboardFigures struct {
	At        time.Time          `json:"at"`
	Since     time.Time          `json:"since"`
	OpenTasks map[string]float64 `json:"open_tasks"`
	LastHour  WindowFigures      `json:"last_hour"`
}

// WindowFigures are the counters' increase over a window.
type WindowFigures struct {
	From          time.Time          `json:"from"`
	WindowSeconds float64            `json:"window_seconds"`
	Delegations   float64            `json:"delegations"`
	Accepted      float64            `json:"accepted"`
	Refused       float64            `json:"refused"`
	TasksFailed   float64            `json:"tasks_failed"`
	Failures      float64            `json:"failures"`
	Ended         map[string]float64 `json:"ended"`
	P50           *float64           `json:"delegate_p50_seconds"`
	P99           *float64           `json:"delegate_p99_seconds"`
}

// Figures reads the counters now (without keeping them) and compares
// them with the oldest sample in the window.
func (d *Dashboard) Figures(now time.Time) DashboardFigures {
	cur := d.gather(now)
	d.mu.Lock()
	base, first := d.samples[0], d.samples[0]
	for _, s := range d.samples {
		if now.Sub(s.at) <= DashboardWindow {
			base = s
			break
		}
	}
	d.mu.Unlock()
	w := WindowFigures{From: base.at.UTC(), WindowSeconds: math.Round(now.Sub(base.at).Seconds()), Ended: map[string]float64{}}
	for outcome, n := range cur.delegations {
		dn := n - base.delegations[outcome]
		w.Delegations += dn
		switch outcome {
		case "accepted":
			w.Accepted += dn
		case "replayed":
		default:
			w.Refused += dn
		}
	}
	for st, n := range cur.ended {
		if dn := n - base.ended[st]; dn > 0 {
			w.Ended[st] = dn
		}
	}
	w.TasksFailed = w.Ended["failed"]
	w.Failures = w.Refused + w.TasksFailed
	if len(cur.bounds) > 0 {
		counts := make([]float64, len(cur.cumulative))
		for i, c := range cur.cumulative {
			counts[i] = c
			if len(base.cumulative) == len(counts) {
				counts[i] -= base.cumulative[i]
			}
		}
		w.P50, w.P99 = quantile(0.5, cur.bounds, counts), quantile(0.99, cur.bounds, counts)
	}
	return DashboardFigures{At: now.UTC(), Since: first.at.UTC(), OpenTasks: cur.open, LastHour: w}
}

// quantile is histogram_quantile's estimate of the q-quantile from
// cumulative bucket counts (bounds ascending, +Inf last); nil without
// observations. A quantile in the +Inf bucket is the highest finite bound.
func quantile(q float64, bounds, cumulative []float64) *float64 {
	total := cumulative[len(cumulative)-1]
	if total <= 0 {
		return nil
	}
	rank := q * total
	i := sort.Search(len(cumulative), func(i int) bool { return cumulative[i] >= rank })
	var v float64
	switch {
	case math.IsInf(bounds[i], 1):
		v = bounds[max(i-1, 0)]
		if i == 0 {
			v = 0
		}
	default:
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = bounds[i-1], cumulative[i-1]
		}
		in := cumulative[i] - below
		v = lo
		if in > 0 {
			v = lo + (bounds[i]-lo)*(rank-below)/in
		}
	}
	return &v
}

// Handler answers GET /v1/dashboard.
func (d *Dashboard) Handler(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, d.Figures(time.Now()))
}
