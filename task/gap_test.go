package task

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// noPatience makes an event after a gap wait an hour in the stream once
// it is put back there: a test that passes applied it without that.
func noPatience(tr *Tracker) { tr.pauseGap = func(uint64) time.Duration { return time.Hour } }

// An event that comes before an earlier one of its task waits for it and
// is applied as soon as it is, not after a redelivery pause: the task's
// events were published last first, and the task still completes, its
// history in the agent's order.
func TestEventAheadOfItsPredecessorAppliesOnceItIs(t *testing.T) {
	_, _, js := natstest.Start(t)
	tr, _ := runTrackerOn(t, js, noPatience, "fraud-review")
	create(t, tr, "t1")
	publish(t, js, "a2a.events.fraud-review.t1", "t1.3", completed)
	publish(t, js, "a2a.events.fraud-review.t1", "t1.2", good)
	waitUntil(t, "t1.3 and t1.2 waiting", func() bool { return natstest.Messages(t, js, EventsStream("fraud-review")) == 2 })
	publish(t, js, "a2a.events.fraud-review.t1", "t1.1", working)
	waitUntil(t, "t1 completed", func() bool { return get(t, tr, "t1").State == Completed })
	r := get(t, tr, "t1")
	var events []string
	for _, h := range r.History {
		events = append(events, h.MsgID)
	}
	if r.EventSeq != 3 || len(r.Artifacts) != 1 || fmt.Sprint(events) != "[t1.1 t1.3]" {
		t.Errorf("t1: seq %d, %d artifacts, history msg ids %q; want seq 3, 1 artifact, [t1.1 t1.3] (working, completed)", r.EventSeq, len(r.Artifacts), events)
	}
}

// Two instances share one agent's consumer, so a task's events are split
// between them: an event one instance gets before the other has applied
// its predecessor is applied once the watcher shows the predecessor, not
// after a pause. Every task completes, though a pause would last an hour.
func TestInstancesApplyEachOthersPredecessorsAtOnce(t *testing.T) {
	_, _, js := natstest.Start(t)
	a, _ := runTrackerOn(t, js, noPatience, "fraud-review")
	b, _ := runTrackerOn(t, js, noPatience, "fraud-review")
	const tasks = 40
	for i := range tasks {
		create(t, a, fmt.Sprint("t", i))
	}
	for i := range tasks {
		id := fmt.Sprint("t", i)
		for seq, ev := range []string{working, good, completed} {
			publish(t, js, "a2a.events.fraud-review."+id, fmt.Sprintf("%s.%d", id, seq+1), ev)
		}
	}
	waitUntil(t, "every task completed", func() bool {
		for i := range tasks {
			if get(t, b, fmt.Sprint("t", i)).State != Completed {
				return false
			}
		}
		return true
	})
}

// An agent that sends events out of order for ever fills only its own
// parking: at most maxParked of them wait off its workers (each following
// its task's record), the rest wait
// in its stream, and its own other tasks and another agent's complete.
func TestOutOfOrderFloodParksOnlyWithinItsAgent(t *testing.T) {
	_, _, js := natstest.Start(t)
	tr, _ := runTrackerOn(t, js, noPatience, "fraud-review", "mallory")
	create(t, tr, "t1")
	for _, id := range []string{"m1", "m2"} {
		now := time.Now().UTC()
		if err := tr.Store.Create(t.Context(), &Record{ID: id, Tenant: "default", AgentID: "mallory", State: Submitted,
			OutputSchema: "risk_assessment", CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	const flood = 2 * maxParked
	for i := range flood {
		publish(t, js, "a2a.events.mallory.m1", fmt.Sprintf("m1.%d", i+2), working) // m1.1 never comes
	}
	followers := func() int {
		tr.Store.mu.Lock()
		defer tr.Store.mu.Unlock()
		return len(tr.Store.waiters["m1"])
	}
	waitUntil(t, "every flooding event delivered", func() bool {
		info, err := js.Consumer(t.Context(), EventsStream("mallory"), EventsConsumer)
		return err == nil && info.CachedInfo().NumPending == 0 && followers() > 0
	})
	for seq, ev := range []string{working, good, completed} {
		publish(t, js, "a2a.events.mallory.m2", fmt.Sprintf("m2.%d", seq+1), ev)
		publish(t, js, "a2a.events.fraud-review.t1", fmt.Sprintf("t1.%d", seq+1), ev)
	}
	waitUntil(t, "m2 and t1 completed", func() bool {
		return get(t, tr, "m2").State == Completed && get(t, tr, "t1").State == Completed
	})
	// Parked, and the one event its worker may be handling.
	if n := followers(); n == 0 || n > maxParked+1 {
		t.Errorf("%d of m1's events follow its record, want 1 to %d", n, maxParked+1)
	}
	if r := get(t, tr, "m1"); r.EventSeq != 0 || r.State != Submitted {
		t.Errorf("m1: seq %d %s; want 0 submitted (every event waits for m1.1)", r.EventSeq, r.State)
	}
}

// Each parked event handed back takes a token of its agent's event rate,
// as a delivery does: an agent that parks an event on each of 200 tasks
// and then sends what fills their gaps cannot make a2ad apply events
// (two record reads each) faster than it may send them — the parked ones
// handed back count against the same rate as the ones it sends.
func TestParkedEventsComeBackAtTheAgentsRate(t *testing.T) {
	_, _, js := natstest.Start(t)
	const perSecond, burst = 100, 10
	tr, _ := runTrackerOn(t, js, func(tr *Tracker) {
		noPatience(tr)
		tr.Agents["mallory"] = EventLimits{PerSecond: perSecond, Burst: burst}
	}, "mallory")
	const tasks = 200
	now := time.Now().UTC()
	for i := range tasks {
		if err := tr.Store.Create(t.Context(), &Record{ID: fmt.Sprint("m", i), Tenant: "default", AgentID: "mallory", State: Submitted,
			OutputSchema: "risk_assessment", CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range tasks {
		publish(t, js, fmt.Sprint("a2a.events.mallory.m", i), fmt.Sprintf("m%d.2", i), working)
	}
	followers := func() int {
		tr.Store.mu.Lock()
		defer tr.Store.mu.Unlock()
		n := 0
		for _, w := range tr.Store.waiters {
			n += len(w)
		}
		return n
	}
	waitUntil(t, "every gapped event parked", func() bool { return followers() == tasks })
	start, before := time.Now(), tr.handled.Load()
	for i := range tasks {
		publish(t, js, fmt.Sprint("a2a.events.mallory.m", i), fmt.Sprintf("m%d.1", i), working)
	}
	deadline := time.Now().Add(3 * 2 * tasks / perSecond * time.Second)
	for followers() > 0 || natstest.Messages(t, js, EventsStream("mallory")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d parked events and %d in the stream after %s", followers(), natstest.Messages(t, js, EventsStream("mallory")), time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
	handled, elapsed := tr.handled.Load()-before, time.Since(start)
	if most := int64(perSecond*elapsed.Seconds()) + burst; handled > most {
		t.Errorf("%d deliveries handled in %s, more than the agent's %d events a second allow (%d)", handled, elapsed.Round(time.Millisecond), perSecond, most)
	}
	if handled < 2*tasks {
		t.Errorf("%d deliveries handled, want every parked event again and every gap filler: %d", handled, 2*tasks)
	}
	for i := range tasks {
		if r := get(t, tr, fmt.Sprint("m", i)); r.State != Working || r.EventSeq != 2 {
			t.Fatalf("m%d: %s seq %d, want working at seq 2", i, r.State, r.EventSeq)
		}
	}
}

// An instance that stops puts its parked events back only once it has
// withdrawn its pull requests: none is redelivered into a request of its
// own and dropped with it, to wait out the ack wait (10 s); all are
// available to another instance at once, and it leaves no follower behind.
// Three instances stop in turn, each with 200 events parked.
func TestStoppingInstancePutsParkedEventsBackForOthers(t *testing.T) {
	_, _, js := natstest.Start(t)
	const parked = 200
	agents := []string{"agent-0", "agent-1", "agent-2"} // a stream each: what one round leaves is not the next's
	for round, agent := range agents {
		id := fmt.Sprint("t", round)
		ctx, cancel := context.WithCancel(t.Context())
		s, err := NewStore(ctx, js, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr := trackerOn(t, s)
		tr.Agents = map[string]EventLimits{agent: {}}
		noPatience(tr)
		if err := tr.EnsureStreams(ctx, js); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tr.Run(ctx, js) }()
		now := time.Now().UTC()
		if err := s.Create(t.Context(), &Record{ID: id, Tenant: "default", AgentID: agent, State: Submitted,
			OutputSchema: "risk_assessment", CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		for i := range parked {
			publish(t, js, "a2a.events."+agent+"."+id, fmt.Sprintf("%s.%d", id, i+2), working) // <id>.1 comes later
		}
		followers := func() int {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.waiters[id])
		}
		waitUntil(t, "every gapped event parked", func() bool { return followers() == parked })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := followers(); n != 0 {
			t.Errorf("round %d: %d followers left after Run returned, want 0", round, n)
		}
		// Put back, they are delivered again at once: well within the
		// ack wait that any dropped with a pull request of the stopped
		// instance would have to wait out.
		cons, err := js.Consumer(t.Context(), EventsStream(agent), EventsConsumer)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(parked, jetstream.FetchMaxWait(ackWait/2))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			_ = m.Nak()
		}
		if got != parked {
			t.Fatalf("round %d: %d of the %d parked events delivered again within %s of stopping, want all", round, got, parked, ackWait/2)
		}
	}
	other, _ := runTrackerOn(t, js, nil, agents...)
	for round, agent := range agents {
		id := fmt.Sprint("t", round)
		publish(t, js, "a2a.events."+agent+"."+id, id+".1", working)
		waitUntil(t, "every event applied by the other instance", func() bool { return get(t, other, id).EventSeq == parked+1 })
	}
}

// One number, one id: a sequence is decimal digits without a sign or a
// leading zero; any other spelling is no sequence (the event is ordered
// by the stream instead).
func TestEventSequenceIsCanonical(t *testing.T) {
	for id, want := range map[string]int{"t1.1": 1, "t1.2": 2, "t1.10": 10, "a.b.3": 3,
		"t1.02": 0, "t1.+2": 0, "t1.-2": 0, "t1.0": 0, "t1.": 0, "t1. 2": 0, "t1.2x": 0, ".2": 0, "t1.99999999999999999999": 0} {
		_, n, ok := eventSeq(id)
		if n != want || ok != (want > 0) {
			t.Errorf("eventSeq(%q) = %d, %v; want %d, %v", id, n, ok, want, want > 0)
		}
	}
}

// A tracker stopping while NATS is unreachable returns within about
// drainFor: withdrawing its pull requests is not waited for longer (the
// drain's flush alone would wait 10 s).
func TestStopWithNATSUnreachableIsBounded(t *testing.T) {
	ns, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := trackerOn(t, s)
	tr.Agents = map[string]EventLimits{"fraud-review": {}, "mallory": {}}
	if err := tr.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, js) }()
	create(t, tr, "t1")
	publish(t, js, "a2a.events.fraud-review.t1", "t1.1", working)
	waitUntil(t, "t1 working", func() bool { return get(t, tr, "t1").State == Working })
	ns.Shutdown()
	ns.WaitForShutdown()
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(3 * drainFor):
		t.Fatalf("Run still running %s after it was stopped with NATS down", 3*drainFor)
	}
	t.Logf("Run returned %s after it was stopped", time.Since(start).Round(time.Millisecond))
}
