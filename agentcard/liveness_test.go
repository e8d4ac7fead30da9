package agentcard

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// An approved agent's liveness as a registry reads it: unknown (delegable)
// until observed; never reached since start, it stays unknown through
// failures for UnreachedGrace, then is offline (not delegable, with the
// reason, as NotDelegableError.Offline); reached once, it is offline at
// the first failure and reachable at the next answer. Each change of
// reachability, and only those, is announced to subscribers; an
// observation older than one applied is ignored; nothing of it is stored.
func TestLivenessOverlay(t *testing.T) {
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true})
	register(t, r, agent, fixture(t))
	var mu sync.Mutex
	changes := 0
	cancel := r.Subscribe(func(id string) {
		if id == agent {
			mu.Lock()
			changes++
			mu.Unlock()
		}
	})
	defer cancel()
	// Subscribing starts the bucket's watcher, which announces the stored
	// record: count from here on.
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	changes = 0
	mu.Unlock()
	changesNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return changes
	}
	view := func() *Record {
		t.Helper()
		rec, err := r.Get(t.Context(), agent)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if rec := view(); !rec.Delegable || rec.Liveness.Reachability != ReachabilityUnknown || !rec.Liveness.CheckedAt.IsZero() {
		t.Fatalf("before any probe: delegable %v liveness %+v; want delegable, unknown", rec.Delegable, rec.Liveness)
	}

	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const reason = "no responder on its NATS subject (fraud-review)"
	if r.Observe(agent, false, reason, t0) || r.Observe(agent, false, reason, t0.Add(UnreachedGrace-time.Millisecond)) {
		t.Error("an agent never reached is offline before UnreachedGrace")
	}
	if rec := view(); !rec.Delegable || rec.Liveness.Reachability != ReachabilityUnknown || rec.Liveness.Reason != reason {
		t.Errorf("failing within the grace: delegable %v liveness %+v; want delegable, unknown with the reason", rec.Delegable, rec.Liveness)
	}
	if !r.Observe(agent, false, reason, t0.Add(UnreachedGrace)) {
		t.Error("still not offline after failing for UnreachedGrace")
	}
	rec := view()
	if want := (Liveness{Reachability: ReachabilityOffline, Since: t0, CheckedAt: t0.Add(UnreachedGrace), Reason: reason}); rec.Liveness != want {
		t.Errorf("liveness %+v, want %+v", rec.Liveness, want)
	}
	if rec.Delegable || rec.NotDelegableReason != "offline: "+reason || rec.Binding != BindingNATS {
		t.Errorf("offline: delegable %v reason %q binding %q; want not delegable, offline: …, binding kept", rec.Delegable, rec.NotDelegableReason, rec.Binding)
	}
	_, _, err := r.ForDelegation(t.Context(), "default", agent, skill)
	var nd *NotDelegableError
	if !errors.As(err, &nd) || !nd.Offline || err.Error() != "agent fraud-review is not delegable: offline: "+reason {
		t.Errorf("ForDelegation of an offline agent = %v, want an offline NotDelegableError", err)
	}
	if p, err := r.Probes(t.Context()); err != nil || len(p) != 1 || p[0] != (Probe{AgentID: agent, Binding: BindingNATS}) {
		t.Errorf("Probes = %+v, %v; want the offline agent still probed", p, err)
	}

	t1 := t0.Add(10 * time.Second)
	if !r.Observe(agent, true, "", t1) {
		t.Error("an answer did not make it reachable")
	}
	if r.Observe(agent, false, reason, t1.Add(-time.Second)) {
		t.Error("an observation older than the last applied one changed it")
	}
	if rec := view(); !rec.Delegable || rec.Liveness != (Liveness{Reachability: ReachabilityReachable, Since: t1, CheckedAt: t1}) {
		t.Errorf("reachable: delegable %v liveness %+v", rec.Delegable, rec.Liveness)
	}
	if r.Observe(agent, true, "", t1.Add(time.Second)) {
		t.Error("a second answer reported a change")
	}
	if !r.Observe(agent, false, reason, t1.Add(2*time.Second)) {
		t.Error("an agent reached before is not offline at its first failure")
	}
	if _, _, err := r.ForDelegation(t.Context(), "default", agent, skill); !errors.As(err, &nd) || !nd.Offline {
		t.Errorf("ForDelegation after the first failure = %v", err)
	}
	waitUntil(t, func() bool { return changesNow() == 3 })
	if n := changesNow(); n != 3 {
		t.Errorf("%d changes announced, want 3 (offline, reachable, offline)", n)
	}

	// Stored records carry none of it: a write keeps the stored record
	// free of this instance's memory.
	if _, err := r.Quarantine(t.Context(), agent, ""); err != nil {
		t.Fatal(err)
	}
	e, err := r.kv.Get(t.Context(), agent)
	if err != nil {
		t.Fatal(err)
	}
	if b := e.Value(); strings.Contains(string(b), `"liveness"`) {
		t.Errorf("stored record holds liveness: %s", b)
	}
	if p, err := r.Probes(t.Context()); err != nil || len(p) != 0 {
		t.Errorf("Probes of a quarantined agent = %+v, %v; want none", p, err)
	}
}

// An HTTP agent that is only offline keeps its target, so that its tasks
// are delivered and it is probed; a quarantined one has none.
func TestHTTPTargetOfOfflineAgent(t *testing.T) {
	raw, err := os.ReadFile("../testdata/cards/a2a-js-1.3-mixed.json")
	if err != nil {
		t.Fatal(err)
	}
	const id, url = "movie-agent", "http://localhost:41241/.well-known/agent-card.json"
	r, _ := newRegistry(t, AgentConfig{ID: id, Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: url})
	if _, _, err := r.RegisterFetched(t.Context(), id, raw, url); err != nil {
		t.Fatal(err)
	}
	r.Observe(id, true, "", time.Now())
	r.Observe(id, false, "connection refused", time.Now())
	if rec, _ := r.Get(t.Context(), id); rec.Delegable || rec.NotDelegableReason != "offline: connection refused" {
		t.Fatalf("offline HTTP agent: %s", summary(rec))
	}
	if target, err := r.HTTPTarget(t.Context(), id); err != nil || target.Binding != BindingJSONRPC {
		t.Errorf("HTTPTarget of an offline agent = %+v, %v; want its JSONRPC target", target, err)
	}
	if _, err := r.Quarantine(t.Context(), id, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.HTTPTarget(t.Context(), id); !errors.As(err, new(*NotDelegableError)) {
		t.Errorf("HTTPTarget of a quarantined, offline agent = %v, want *NotDelegableError", err)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}
