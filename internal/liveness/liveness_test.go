package liveness_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/liveness"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
)

// Four agents over the NATS binding: one that answers TaskNotFound, one
// whose answer is not JSON (a process is there: reachable), one that
// never answers (hostile: each probe waits out its timeout) and one that
// is not there (no responders). The first two are reachable within a
// period; the last two offline once they have failed for
// agentcard.UnreachedGrace (never reached since start), with a2ad's
// reason; and the silent agent never delays the others' probes: the
// answering agent is probed every period throughout.
func TestProberKeepsAgentsApart(t *testing.T) {
	srv, nc, js := natstest.Start(t)
	ids := []string{"answers", "garbled", "silent", "gone"}
	var cfg []agentcard.AgentConfig
	for _, id := range ids {
		cfg = append(cfg, agentcard.AgentConfig{ID: id, Tenants: []string{"default"}, TrustOnFirstUse: true})
	}
	reg, err := agentcard.NewRegistry(t.Context(), js, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		card := bytes.ReplaceAll(a2ad.FraudReviewCard(), []byte("a2a.agent.fraud-review"), []byte("a2a.agent."+id))
		if rec, err := reg.Register(t.Context(), id, card); err != nil || !rec.Delegable {
			t.Fatalf("register %s: %v %+v", id, err, rec)
		}
	}
	agentConn, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer agentConn.Close()
	var probed atomic.Int64
	subs := map[string]func(m *nats.Msg){
		"answers": func(m *nats.Msg) {
			probed.Add(1)
			_ = m.Respond([]byte(`{"jsonrpc":"2.0","id":"` + jsonRPCID(m.Data) + `","error":{"code":-32001,"message":"task not found"}}`))
		},
		"garbled": func(m *nats.Msg) { _ = m.Respond([]byte("not json")) },
		"silent":  func(*nats.Msg) {},
	}
	for id, fn := range subs {
		if _, err := agentConn.Subscribe(natsbind.RPCSubject(id), fn); err != nil {
			t.Fatal(err)
		}
	}
	_ = agentConn.Flush()

	const period, timeout = 300 * time.Millisecond, 250 * time.Millisecond
	p := &liveness.Prober{Registry: reg, Period: period, Timeout: timeout, Concurrency: 2,
		Pingers: map[string]liveness.Pinger{agentcard.BindingNATS: natsbind.NewClient(nc)}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	wait := func(id string, want agentcard.Reachability, within time.Duration) agentcard.Liveness {
		t.Helper()
		for {
			l := reg.Liveness(id)
			if l.Reachability == want {
				return l
			}
			if time.Since(start) > within {
				t.Fatalf("%s: %+v after %v, want %s", id, l, within, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("answers", agentcard.ReachabilityReachable, period)
	wait("garbled", agentcard.ReachabilityReachable, period)
	grace := agentcard.UnreachedGrace + period + timeout
	if l := wait("gone", agentcard.ReachabilityOffline, grace); l.Reason != "no responder on its NATS subject (gone)" {
		t.Errorf("gone: reason %q", l.Reason)
	}
	if l := wait("silent", agentcard.ReachabilityOffline, grace); l.Reason != "no answer before the probe's deadline (silent)" {
		t.Errorf("silent: reason %q", l.Reason)
	}
	elapsed := time.Since(start)
	// Jittered periods are at most 10% longer; the schedule's resolution
	// is a tenth of the period.
	if n, least := probed.Load(), int64(elapsed/(period+period/10+period/10)); n < least {
		t.Errorf("the answering agent was probed %d times in %v, want at least %d: another agent delayed its probes", n, elapsed.Round(time.Millisecond), least)
	}
	if got := p.Reachable(); len(got) != 4 || !got["answers"] || !got["garbled"] || got["silent"] || got["gone"] {
		t.Errorf("Reachable() = %v", got)
	}
}

// jsonRPCID is the request's id (a2ad's are decimal strings).
func jsonRPCID(body []byte) string {
	i := bytes.Index(body, []byte(`"id":"`))
	if i < 0 {
		return ""
	}
	rest := body[i+6:]
	return string(rest[:bytes.IndexByte(rest, '"')])
}

// An offline agent that registers again (its connection came back) is
// probed at once and delegable again, not at its next scheduled probe: with
// a period of an hour an offline agent is next probed 12 minutes on, and
// it is reachable again here within seconds of its registration (issue 18
// CI: a delegate 60 ms after the agent's re-registration was refused as
// offline).
func TestRegistrationReprobesAnOfflineAgent(t *testing.T) {
	srv, nc, js := natstest.Start(t)
	reg, err := agentcard.NewRegistry(t.Context(), js, []agentcard.AgentConfig{{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	card := a2ad.FraudReviewCard()
	if _, err := reg.Register(t.Context(), "fraud-review", card); err != nil {
		t.Fatal(err)
	}
	agentConn, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer agentConn.Close()
	answer := func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"jsonrpc":"2.0","id":"` + jsonRPCID(m.Data) + `","error":{"code":-32001,"message":"task not found"}}`))
	}
	sub, err := agentConn.Subscribe(natsbind.RPCSubject("fraud-review"), answer)
	if err != nil {
		t.Fatal(err)
	}
	_ = agentConn.Flush()

	p := &liveness.Prober{Registry: reg, Period: time.Hour, Timeout: 250 * time.Millisecond,
		Pingers: map[string]liveness.Pinger{agentcard.BindingNATS: natsbind.NewClient(nc)}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	wait := func(want agentcard.Reachability, why string) {
		t.Helper()
		until := time.Now().Add(10 * time.Second)
		for reg.Liveness("fraud-review").Reachability != want {
			if time.Now().After(until) {
				t.Fatalf("%s: %+v, want %s", why, reg.Liveness("fraud-review"), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(agentcard.ReachabilityReachable, "first probe")

	// The agent's connection is cut: a delivery finds no responder.
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_ = agentConn.Flush()
	reg.Observe("fraud-review", false, "no responder on its NATS subject (fraud-review)", time.Now().UTC())
	wait(agentcard.ReachabilityOffline, "after the cut")
	time.Sleep(500 * time.Millisecond) // the probe the change triggers finds no one: still offline
	if l := reg.Liveness("fraud-review"); l.Reachability != agentcard.ReachabilityOffline {
		t.Fatalf("with no responder: %+v, want offline", l)
	}

	// It comes back: subscribes, then registers its card again.
	if _, err := agentConn.Subscribe(natsbind.RPCSubject("fraud-review"), answer); err != nil {
		t.Fatal(err)
	}
	_ = agentConn.Flush()
	if _, err := reg.Register(t.Context(), "fraud-review", card); err != nil {
		t.Fatal(err)
	}
	wait(agentcard.ReachabilityReachable, "after the agent registered again")
}
