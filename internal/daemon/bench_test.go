package daemon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
)

// BenchmarkDelegateToCompletion measures one whole delegation through the
// broker service — brief, KV create, NATS SendMessage to the reference agent,
// its events through JetStream, the tracker, artifact validation — until the
// waiting caller sees completed.
//
// It also reports the two halves: delegate-µs, the Delegate call itself (what
// a host with wait_seconds 0 waits: agent lookup, brief, the record with its
// outbox, SendMessage, the outbox cleared), and events-µs, from then until
// the waiter sees completed.
//
// Sub-benchmarks: three-events, the agent reports working, the artifact and
// completed, each once JetStream acknowledged the previous one; one-event,
// it reports the completed Task with its artifact in one event.
func BenchmarkDelegateToCompletion(b *testing.B) {
	for _, atOnce := range []bool{false, true} {
		name := "three-events"
		if atOnce {
			name = "one-event"
		}
		b.Run(name, func(b *testing.B) { benchDelegateToCompletion(b, atOnce) })
	}
}

func benchDelegateToCompletion(b *testing.B, atOnce bool) {
	s := start(b, nil)
	s.agent.SetReportAtOnce(atOnce)
	var delegate, events time.Duration
	benchDelegate(b, func(ctx context.Context, req broker.DelegateRequest) string {
		t0 := time.Now()
		r, err := s.d.Service.Delegate(ctx, broker.Principal{Tenant: "default", Subject: "bench"}, req)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		r, err = s.d.Service.Wait(ctx, broker.Principal{Tenant: "default"}, r.ID, broker.MaxWait, nil)
		if err != nil {
			b.Fatal(err)
		}
		delegate += t1.Sub(t0)
		events += time.Since(t1)
		return string(r.State)
	})
	b.ReportMetric(float64(delegate.Microseconds())/float64(b.N), "delegate-µs/op")
	b.ReportMetric(float64(events.Microseconds())/float64(b.N), "events-µs/op")
}

// BenchmarkDelegateOverMCPHTTP is the same delegation as a host makes it:
// a tools/call delegate through the go-sdk client and Streamable HTTP, to
// an agent that answers in one event.
//
// The host's rate limits are raised out of the way: the defaults (50
// delegations a second per principal) would refuse the loop with 429.
func BenchmarkDelegateOverMCPHTTP(b *testing.B) {
	s := startConfigured(b, nil, func(cfg *daemon.Config) {
		unlimited := mcpedge.Rate{PerSecond: 1e6, Burst: 1e6}
		cfg.RateLimits = mcpedge.RateLimits{PerPrincipal: mcpedge.RateClasses{Reads: unlimited, Writes: unlimited},
			PerTenant: mcpedge.RateClasses{Reads: unlimited, Writes: unlimited}}
	})
	s.agent.SetReportAtOnce(true)
	benchDelegate(b, func(ctx context.Context, req broker.DelegateRequest) string {
		var ev map[string]any
		_ = json.Unmarshal(req.Brief.Evidence, &ev)
		got, errText := s.call(b, "delegate", delegateArgs(ev), nil)
		if errText != "" {
			b.Fatal(errText)
		}
		return got.State
	})
}

func benchDelegate(b *testing.B, run func(context.Context, broker.DelegateRequest) string) {
	ev, _ := json.Marshal(evidence("C-7", 1999))
	req := broker.DelegateRequest{Agent: "fraud-review", Skill: "assess_refund_risk",
		Brief: brief.Request{Objective: "Assess this refund.", Evidence: ev, OutputSchema: "risk_assessment"}}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if st := run(ctx, req); st != "completed" {
			b.Fatalf("state %s", st)
		}
	}
}
