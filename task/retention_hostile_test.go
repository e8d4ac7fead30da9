package task

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// endingTasks keeps ending fresh tasks of another agent every 100 ms until
// the test ends: the walk always has a not-yet-due task to wait at.
func endingTasks(t *testing.T, s *Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			now := time.Now().UTC()
			_ = s.Create(ctx, &Record{ID: fmt.Sprintf("f%05d", i), Tenant: "t", AgentID: "other", State: Completed, CreatedAt: now, UpdatedAt: now})
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// An agent that keeps sending events to a task that ended long ago (its
// end again, a refused transition) does not put off its removal: the
// record is final, nothing is written, and the task goes on time, while
// the walk waits at the tasks other agents end meanwhile.
func TestRetentionAgentCannotPutOffItsEndedTasks(t *testing.T) {
	_, _, js := natstest.Start(t)
	s, ret := retained(t, js, 3*time.Second)
	tr := &Tracker{Store: s, Schemas: builtinSchemas(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	endingTasks(t, s)
	ctx := context.Background()
	ended := time.Now().Add(-2 * time.Hour).UTC()
	time.Sleep(time.Second) // the walk waits at a fresh task
	v := &Record{ID: "victim", Tenant: "t", AgentID: "evil", State: Failed, AgentTaskID: "a1", ContextID: "c1",
		CreatedAt: ended, EndedAt: ended, UpdatedAt: ended}
	if err := s.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	failedAgain := `{"statusUpdate":{"taskId":"a1","contextId":"c1","status":{"state":"TASK_STATE_FAILED"}}}`
	start := time.Now()
	for i := 0; ; i++ {
		body := failedAgain
		if i%2 == 1 {
			body = working
		}
		err := tr.Apply(ctx, "a2a.events.evil.victim", fmt.Sprint("e-", i), []byte(body))
		if _, _, gerr := s.Get(ctx, "victim"); gerr != nil {
			break
		}
		if DropReason(err) != DropTaskEnded && !strings.Contains(fmt.Sprint(err), "not found") {
			t.Fatalf("event %d on a task ended 2 h ago: %v; want drop reason %s", i, err, DropTaskEnded)
		}
		if time.Since(start) > 8*time.Second {
			t.Fatalf("the task ended 2 h ago (Keep 3 s) is still stored after %v of its agent's events; removed %d, lag %v",
				time.Since(start).Round(time.Second), ret.Removed(), ret.Lag(time.Now()))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// An instance whose clock runs an hour ahead ends a task: its ended_at is
// in the future, but its end for retention is when the server stored it,
// so the walk does not wait an hour at it, and the tasks others end after
// it go on time. Absurd times (the year 2300, 9999) are no earlier.
func TestRetentionClockAheadDoesNotHoldTheWalk(t *testing.T) {
	_, _, js := natstest.Start(t)
	s, ret := retained(t, js, 2*time.Second)
	ctx := context.Background()
	put(t, s, "skewed", Completed, time.Now().Add(time.Hour).UTC())
	for _, y := range []string{"2300", "9999"} {
		v := `{"task_id":"y` + y + `","tenant":"t","agent_id":"a","state":"completed","created_at":"` + y + `-01-01T00:00:00Z","updated_at":"` + y + `-01-01T00:00:00Z","ended_at":"` + y + `-01-01T00:00:00Z"}`
		if _, err := s.kv.Put(ctx, "y"+y, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	for i := range 50 {
		put(t, s, fmt.Sprintf("normal%02d", i), Completed, now)
	}
	if _, _, err := s.Get(ctx, "y9999"); err != nil {
		t.Fatalf("a task of the year 9999 went before its retention (2 s) passed: %v", err)
	}
	waitUntil(t, "all 53 ended tasks to go, and Lag to say none is due", func() bool { return ret.Removed() == 53 && ret.Lag(time.Now()) == 0 })
}

// The server cuts a batched read short of its size in bytes: behind fifty
// open tasks of 700 kB, a batch comes back with 33 values, and the
// walk reads on rather than take it for the stream's end and wait for a
// new ended task.
func TestRetentionReadsOnPastLargeRecords(t *testing.T) {
	_, _, js := natstest.Start(t)
	w, stop := storeOn(t, js)
	defer stop()
	old := time.Now().Add(-time.Hour).UTC()
	big := strings.Repeat("0", 700_000)
	for i := range 50 { // open: the walk passes them
		if err := w.Create(context.Background(), &Record{ID: fmt.Sprintf("big%03d", i), Tenant: "t", AgentID: "evil", State: Working,
			CreatedAt: old, UpdatedAt: old, StatusMessage: big}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 { // ended as stored: the walk, not the late index, finds them
		put(t, w, fmt.Sprintf("small%03d", i), Completed, time.Now().UTC())
	}
	_, ret := retained(t, js, time.Second) // started after the writes: no new ended task wakes it
	waitUntil(t, "the 20 due tasks behind the large records to go", func() bool { return ret.Removed() == 20 })
}

// A walk waiting at a task whose time has not come does not read the
// stream again when woken (here by the late index's first task changing,
// 20 times a second): it reads again only when that task comes due.
func TestRetentionWakesDoNotReadTheStreamAgain(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ret := &Retention{Keep: 2 * time.Minute, startIn: time.Millisecond}
	s, err := NewStore(ctx, js, 1, ret.Track)
	if err != nil {
		t.Fatal(err)
	}
	ret.Store = s
	w, stop := storeOn(t, natsJSOn(t, srv))
	defer stop()
	now := time.Now().UTC()
	pad := strings.Repeat("x", 16<<10)
	for i := range 300 { // ended just now, 16 KiB each
		if err := w.Create(ctx, &Record{ID: fmt.Sprintf("o%03d", i), Tenant: "t", AgentID: "other", State: Completed, CreatedAt: now, UpdatedAt: now, StatusMessage: pad}); err != nil {
			t.Fatal(err)
		}
	}
	ended := now.Add(-90 * time.Second) // stored now, 90 s after its end: late, due in 30 s
	if err := w.Create(ctx, &Record{ID: "h", Tenant: "t", AgentID: "a", State: Failed, CreatedAt: ended, EndedAt: ended, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the late task in the late index", func() bool { return ret.Late() == 1 })
	done := make(chan struct{})
	go func() { defer close(done); ret.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(2 * time.Second) // the walk reads once and waits at o000
	var writes atomic.Int64
	go func() {
		for ctx.Err() == nil {
			if _, err := w.Update(ctx, "h", func(r *Record) error { r.RefusedUnrecorded++; return nil }); err == nil {
				writes.Add(1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	before := nc.Stats()
	time.Sleep(5 * time.Second)
	after := nc.Stats()
	read := after.InMsgs - before.InMsgs - uint64(writes.Load()) // less the watcher's
	if writes.Load() < 20 || read > 10 {
		t.Fatalf("in 5 s, %d writes of the late index's first task; the instance received %d messages (%.1f MB) besides its watcher's; want none to speak of",
			writes.Load(), read, float64(after.InBytes-before.InBytes)/1e6)
	}
}

func natsJSOn(t *testing.T, srv *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A canceled task whose agent task id is unknown still learns it from an
// event that names it, but events that teach no id (malformed, a bare
// message) are dropped like any other on a task ended over a minute
// before; a record of an earlier version (no ended_at) counts from its
// last write, which a refusal would otherwise move on and on.
func TestEndedTaskIsFinalWithoutAnIDToLearnOrAnEndedAt(t *testing.T) {
	tr := newTracker(t)
	ctx := context.Background()
	ended := time.Now().Add(-2 * time.Hour).UTC()
	for _, r := range []*Record{
		{ID: "cx", Tenant: "default", AgentID: "fraud-review", State: Canceled, OutputSchema: "risk_assessment", CreatedAt: ended.Add(-time.Minute), UpdatedAt: ended, EndedAt: ended},
		{ID: "legacy", Tenant: "default", AgentID: "fraud-review", State: Failed, OutputSchema: "risk_assessment", AgentTaskID: "a1", CreatedAt: ended.Add(-time.Minute), UpdatedAt: ended},
	} {
		if err := tr.Store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	_, before, _ := tr.Store.Get(ctx, "cx")
	for i, body := range []string{`{"nope":1}`, `{"message":{"messageId":"m1","role":"ROLE_AGENT","parts":[{"text":"hi"}]}}`} {
		if err := apply(t, tr, "a2a.events.fraud-review.cx", fmt.Sprintf("cx.%d", i+1), body); DropReason(err) != DropTaskEnded {
			t.Errorf("event %d teaching no id to a task canceled 2 h ago: %v; want drop reason %s", i+1, err, DropTaskEnded)
		}
	}
	if _, after, _ := tr.Store.Get(ctx, "cx"); after != before {
		t.Fatalf("revision %d -> %d: an event that teaches no id was written", before, after)
	}
	if err := apply(t, tr, "a2a.events.fraud-review.legacy", "legacy.1", working); DropReason(err) != DropTaskEnded {
		t.Fatalf("event on a record of an earlier version ended 2 h ago: %v; want drop reason %s", err, DropTaskEnded)
	}
	if r := get(t, tr, "legacy"); !r.UpdatedAt.Equal(ended) {
		t.Fatalf("legacy record's last write moved %v -> %v", ended, r.UpdatedAt)
	}
}

// Large records: a batched read of the walk is bounded in bytes, so the
// server never drops the reader (a2ad's own connection, which its watcher
// and writes share) as a slow consumer; and GetMany returns every record
// asked for, however large, in several reads.
func TestBatchedReadsOfLargeRecordsKeepTheConnection(t *testing.T) {
	srv, _, js := natstest.Start(t)
	w, stop := storeOn(t, js)
	defer stop()
	now := time.Now().UTC()
	big := strings.Repeat("0", 900_000)
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("big%03d", i)
		ids = append(ids, id)
		if err := w.Create(context.Background(), &Record{ID: id, Tenant: "t", AgentID: "evil", State: Working, CreatedAt: now, UpdatedAt: now, StatusMessage: big}); err != nil {
			t.Fatal(err)
		}
	}
	nc := natstest.Connect(t, srv)
	rjs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, stopS := storeOn(t, rjs)
	defer stopS()
	<-s.Loaded()
	slow := srv.NumSlowConsumers()
	b, err := s.readFrom(context.Background(), 1, removalBatch)
	if err != nil || len(b) == 0 || srv.NumSlowConsumers() != slow || nc.Status() != nats.CONNECTED {
		t.Fatalf("readFrom: %d values, %v; slow consumers %d -> %d, connection %v; want a bounded batch and the connection kept", len(b), err, slow, srv.NumSlowConsumers(), nc.Status())
	}
	got, err := s.GetMany(context.Background(), append(ids, "absent", "a.b"))
	if err != nil || len(got) != len(ids) || srv.NumSlowConsumers() != slow || nc.Status() != nats.CONNECTED {
		t.Fatalf("GetMany of %d large records: %d, %v; slow consumers %d -> %d, connection %v; want every one and the connection kept",
			len(ids), len(got), err, slow, srv.NumSlowConsumers(), nc.Status())
	}
}
