package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// waitUntil polls cond until it holds, failing after a generous deadline
// (the outcome is asserted, not how soon it comes).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A follower gets each change with its value: the newest record and its
// revision, as a read would find them, and ErrNotFound once it is deleted.
func TestFollowerHasTheChangedRecord(t *testing.T) {
	tr := newTracker(t)
	ctx := context.Background()
	create(t, tr, "f1")
	f := tr.Store.Follow("f1")
	defer f.Stop()
	if r, rev, err := f.Latest(); r != nil || rev != 0 || err != nil {
		t.Fatalf("Latest before any change = %v, %d, %v", r, rev, err)
	}
	if _, err := tr.Store.Update(ctx, "f1", func(r *Record) error { r.Question = "which?"; r.Turns = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	_, want, err := tr.Store.Get(ctx, "f1")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the follower to see the update", func() bool {
		select {
		case <-f.C():
		case <-time.After(10 * time.Millisecond):
		}
		_, rev, _ := f.Latest()
		return rev >= want
	})
	r, rev, err := f.Latest()
	if err != nil || rev != want || r.Question != "which?" || r.Turns != 7 {
		t.Fatalf("Latest = %+v, %d, %v; want the update at revision %d", r, rev, err, want)
	}
	if err := tr.Store.Delete(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the follower to see the deletion", func() bool {
		_, _, err := f.Latest()
		return errors.Is(err, ErrNotFound)
	})
}

// storeOn opens a second store on the same bucket (another instance); its
// watcher runs until stop is called.
func storeOn(t *testing.T, js jetstream.JetStream) (s *Store, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, cancel
}

// The tracker's reads may come from the record this instance last wrote;
// when another instance wrote since, and this one's watcher never shows it
// (stopped here), the compare-and-swap still keeps both changes.
func TestCachedReadNeverLosesAnotherInstancesWrite(t *testing.T) {
	_, _, js := natstest.Start(t)
	a, stopA := storeOn(t, js)
	b, _ := storeOn(t, js)
	ctx := context.Background()
	now := time.Now().UTC()
	if err := a.Create(ctx, &Record{ID: "c1", Tenant: "default", AgentID: "fraud-review", State: Submitted, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	stopA() // a's cache now only knows its own write
	if _, err := b.Update(ctx, "c1", func(r *Record) error { r.Question = "from b"; return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := a.Update(withCachedReads(ctx), "c1", func(r *Record) error { r.StatusMessage = "from a"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.Question != "from b" || got.StatusMessage != "from a" {
		t.Fatalf("a's write = question %q, status %q; want both changes", got.Question, got.StatusMessage)
	}
	if r, _, _ := b.Get(ctx, "c1"); r.Question != "from b" || r.StatusMessage != "from a" {
		t.Fatalf("stored = question %q, status %q; want both changes", r.Question, r.StatusMessage)
	}
}

// Events of one task applied by two instances in turn, one of which never
// sees the other's write through its watcher: a gap its stale cached read
// shows is looked at again in the store, and the event applies.
func TestCachedReadGapIsCheckedInTheStore(t *testing.T) {
	_, _, js := natstest.Start(t)
	sa, stopA := storeOn(t, js)
	sb, _ := storeOn(t, js)
	ta, tb := trackerOn(t, sa), trackerOn(t, sb)
	create(t, ta, "g1")
	ctx := context.Background()
	subj := "a2a.events.fraud-review.g1"
	inOrder := applyOpts{sequenced: true, waitGap: true}
	if err := ta.apply(ctx, subj, "g1.1", []byte(working), inOrder); err != nil {
		t.Fatal(err)
	}
	stopA()
	if err := tb.apply(ctx, subj, "g1.2", []byte(good), inOrder); err != nil {
		t.Fatal(err)
	}
	if err := ta.apply(ctx, subj, "g1.3", []byte(completed), inOrder); err != nil {
		t.Fatalf("event 3 on the instance that did not see event 2: %v", err)
	}
	if r := get(t, tb, "g1"); r.State != Completed || r.EventSeq != 3 || len(r.Artifacts) != 1 {
		t.Fatalf("state %s seq %d artifacts %d, want completed 3 1", r.State, r.EventSeq, len(r.Artifacts))
	}
}

func trackerOn(t *testing.T, s *Store) *Tracker {
	t.Helper()
	schemas := builtinSchemas(t)
	return &Tracker{Store: s, Schemas: schemas, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// Run applies the events of many tasks at once, each task's in order: all
// complete with their artifact, whatever the number of workers.
func TestRunAppliesEachTasksEventsInOrder(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			_, _, js := natstest.Start(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := NewStore(ctx, js, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			tr := trackerOn(t, s)
			tr.Workers = workers
			tr.Agents = map[string]EventLimits{"fraud-review": {}}
			if err := tr.EnsureStreams(ctx, js); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tr.Run(ctx, js) }()
			const tasks = 40
			for i := range tasks {
				create(t, tr, fmt.Sprintf("r%d", i))
			}
			// Interleaved: every task's first event, then every second, ...
			for n, body := range []string{working, good, completed} {
				for i := range tasks {
					id := fmt.Sprintf("r%d", i)
					m := nats.NewMsg("a2a.events.fraud-review." + id)
					m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s.%d", id, n+1))
					m.Data = []byte(body)
					if _, err := js.PublishMsg(ctx, m); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitUntil(t, "every task completed", func() bool {
				for i := range tasks {
					r, _, err := s.Get(ctx, fmt.Sprintf("r%d", i))
					if err != nil || r.State != Completed {
						return false
					}
				}
				return true
			})
			for i := range tasks {
				r, _, _ := s.Get(ctx, fmt.Sprintf("r%d", i))
				if r.EventSeq != 3 || len(r.Artifacts) != 1 || len(r.Skipped) != 0 {
					t.Errorf("r%d: seq %d, %d artifacts, skipped %v", i, r.EventSeq, len(r.Artifacts), r.Skipped)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The cache keeps the newest revision it was told of, forgets an ended or
// deleted task, and stays bounded.
func TestRevCacheRules(t *testing.T) {
	var c revCache
	c.wrote("a", 5, []byte("five"))
	c.wrote("a", 4, []byte("four")) // an older write's answer, late
	c.observe("a", 3, []byte("three"), false)
	if rev, val, ok := c.get("a"); !ok || rev != 5 || string(val) != "five" {
		t.Fatalf("get = %d %q %v, want 5 five", rev, val, ok)
	}
	c.observe("a", 6, []byte("six"), false) // another instance's write
	if rev, _, _ := c.get("a"); rev != 6 {
		t.Fatalf("after a newer watched value: revision %d, want 6", rev)
	}
	c.observe("b", 9, []byte("nine"), false) // not written here: not cached
	if _, _, ok := c.get("b"); ok {
		t.Fatal("a task this process never wrote is cached")
	}
	c.observe("a", 7, nil, true)
	if _, _, ok := c.get("a"); ok {
		t.Fatal("an ended task is still cached")
	}
	for i := range maxCached + 10 {
		c.wrote(fmt.Sprint(i), 1, nil)
	}
	if len(c.m) > maxCached {
		t.Fatalf("cache holds %d, more than %d", len(c.m), maxCached)
	}
	if _, _, ok := c.get(fmt.Sprint(maxCached + 9)); !ok {
		t.Fatal("the newest write was not cached")
	}
}
