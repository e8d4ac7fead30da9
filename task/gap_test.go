package task

import (
	"context"
	"fmt"
	"strings"
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
// as a delivery does. An agent parks 200 events that all claim the same
// sequence (2, spelt 2, 02, 002…: distinct ids, so the stream keeps each);
// the change that fills their gap wakes them all, and a2ad applies them
// again (two record reads each) no faster than the agent may send events.
// Only one is applied; the rest are duplicates.
func TestParkedEventsComeBackAtTheAgentsRate(t *testing.T) {
	_, _, js := natstest.Start(t)
	const perSecond, burst = 100, 10
	tr, _ := runTrackerOn(t, js, func(tr *Tracker) {
		noPatience(tr)
		tr.Agents["mallory"] = EventLimits{PerSecond: perSecond, Burst: burst}
	}, "mallory")
	now := time.Now().UTC()
	if err := tr.Store.Create(t.Context(), &Record{ID: "m1", Tenant: "default", AgentID: "mallory", State: Submitted,
		OutputSchema: "risk_assessment", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	const parked = 200
	for i := range parked {
		publish(t, js, "a2a.events.mallory.m1", "m1."+strings.Repeat("0", i)+"2", working)
	}
	followers := func() int {
		tr.Store.mu.Lock()
		defer tr.Store.mu.Unlock()
		return len(tr.Store.waiters["m1"])
	}
	waitUntil(t, "every gapped event parked", func() bool { return followers() == parked })
	start, before := time.Now(), tr.handled.Load()
	publish(t, js, "a2a.events.mallory.m1", "m1.1", working)
	deadline := time.Now().Add(3 * parked / perSecond * time.Second)
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
	if handled < parked+1 {
		t.Errorf("%d deliveries handled, want every parked event again and m1.1: %d", handled, parked+1)
	}
	if r := get(t, tr, "m1"); r.State != Working || r.EventSeq != 2 {
		t.Errorf("m1: %s seq %d, want working at seq 2", r.State, r.EventSeq)
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
