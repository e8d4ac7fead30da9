package task

import (
	"fmt"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
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
