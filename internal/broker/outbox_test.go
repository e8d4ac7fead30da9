package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestSchedulerActsInDueOrderAndForgets(t *testing.T) {
	sc := newScheduler()
	now := time.Now()
	sc.set("a", now.Add(90*time.Millisecond))
	sc.set("b", now.Add(30*time.Millisecond))
	sc.set("c", now.Add(60*time.Millisecond))
	sc.set("d", now.Add(40*time.Millisecond))
	sc.set("d", time.Time{}) // ended: forgotten
	sc.set("c", now.Add(70*time.Millisecond))
	if n := sc.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	var mu sync.Mutex
	var order []string
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		sc.run(ctx, func(_ context.Context, id string) time.Time {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, id)
			if len(order) == 3 {
				close(done)
			}
			return time.Time{} // nothing more to do for it
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("scheduler did not act on all three")
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{"b", "c", "a"}) {
		t.Errorf("acted in order %v, want [b c a]", order)
	}
	if n := sc.Len(); n != 0 {
		t.Errorf("Len after acting = %d, want 0", n)
	}
}

func TestSetEarlierKeepsTheWatchersEarlierTime(t *testing.T) {
	sc := newScheduler()
	now := time.Now()
	sc.set("x", now.Add(time.Second))      // the watcher saw a change while acting
	sc.setEarlier("x", now.Add(time.Hour)) // the action's own, older view
	if got := sc.byID["x"].due; !got.Equal(now.Add(time.Second)) {
		t.Errorf("due = %v, want the earlier %v", got, now.Add(time.Second))
	}
	sc.setEarlier("y", now.Add(time.Minute))
	if got := sc.byID["y"].due; !got.Equal(now.Add(time.Minute)) {
		t.Errorf("new id due = %v", got)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 40: 30 * time.Second} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

// A task that falls due again while its action runs (a change the action's
// own read did not see) is acted on once more, not forgotten.
func TestSchedulerActsAgainWhenDueDuringAction(t *testing.T) {
	sc := newScheduler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	calls := make(chan int, 4)
	n := 0
	go sc.run(ctx, func(_ context.Context, id string) time.Time {
		n++
		calls <- n
		if n == 1 {
			<-release // the first action is slow
		}
		return time.Time{} // its view: nothing more to do
	})
	sc.set("x", time.Now())
	if got := <-calls; got != 1 {
		t.Fatalf("call %d", got)
	}
	sc.set("x", time.Now()) // the watcher saw a change that is due now
	time.Sleep(50 * time.Millisecond)
	close(release)
	select {
	case got := <-calls:
		if got != 2 {
			t.Fatalf("call %d, want 2", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change that fell due during the action was forgotten")
	}
}

// An agent slow to answer holds at most perAgent of the scheduler's
// workers: another agent's due task is acted on at once while the slow
// agent's many tasks wait their turn.
func TestSlowAgentDoesNotDelayAnotherAgentsTasks(t *testing.T) {
	sc := newScheduler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	fast := make(chan struct{})
	go sc.run(ctx, func(_ context.Context, id string) time.Time {
		if id == "fast" {
			close(fast)
			return time.Time{}
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-release // every one of the slow agent's actions waits out a timeout
		mu.Lock()
		running--
		mu.Unlock()
		return time.Time{}
	})
	now := time.Now()
	for i := range 3 * workers {
		sc.track(fmt.Sprintf("slow-%d", i), "slow-agent", now, now.Add(time.Hour))
	}
	time.Sleep(50 * time.Millisecond)
	sc.track("fast", "fast-agent", time.Now(), time.Now().Add(time.Hour))
	select {
	case <-fast:
	case <-time.After(5 * time.Second):
		t.Fatal("the other agent's task waited behind the slow agent's")
	}
	close(release)
	mu.Lock()
	defer mu.Unlock()
	if most != perAgent {
		t.Fatalf("the slow agent had %d actions running at once, want %d", most, perAgent)
	}
}

// An agent slow to answer keeps its slots busy (every action waits out a
// timeout), but one of its own tasks past its deadline is acted on at
// once: a hanging agent cannot postpone its tasks' deadlines.
func TestDeadlineIsNotHeldBehindTheAgentsSlots(t *testing.T) {
	sc := newScheduler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	expired := make(chan struct{})
	go sc.run(ctx, func(_ context.Context, id string) time.Time {
		if id == "expired" {
			close(expired)
			return time.Time{}
		}
		<-release
		return time.Time{}
	})
	now := time.Now()
	for i := range 3 * perAgent {
		sc.track(fmt.Sprintf("busy-%d", i), "hanging-agent", now, now.Add(time.Hour))
	}
	time.Sleep(50 * time.Millisecond)
	sc.track("expired", "hanging-agent", time.Now(), time.Now().Add(-time.Millisecond))
	select {
	case <-expired:
	case <-time.After(5 * time.Second):
		t.Fatal("a task past its deadline waited behind its agent's busy slots")
	}
}
