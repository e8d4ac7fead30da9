package task

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natscluster"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// retained starts a store on js whose watcher feeds a Retention keeping
// ended tasks for keep; the sweep runs until the test ends.
func retained(t *testing.T, js jetstream.JetStream, keep time.Duration) (*Store, *Retention) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ret := &Retention{Keep: keep}
	s, err := NewStore(ctx, js, 1, ret.Track)
	if err != nil {
		t.Fatal(err)
	}
	ret.Store = s
	done := make(chan struct{})
	go func() { defer close(done); ret.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, ret
}

// put stores a record in state st whose last write was at.
func put(t *testing.T, s *Store, id string, st State, at time.Time) {
	t.Helper()
	r := &Record{ID: id, Tenant: "t", AgentID: "a", State: st, CreatedAt: at, UpdatedAt: at,
		History: []Transition{{At: at, To: st, Event: "submit", Source: SourceHost}}}
	if err := s.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func ids(t *testing.T, s *Store) []string {
	t.Helper()
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list {
		out = append(out, r.ID+"="+string(r.State))
	}
	sort.Strings(out)
	return out
}

var openStates = []State{Submitted, Working, InputRequired, AuthRequired}
var endedStates = []State{Completed, Failed, Canceled, Rejected}

// Ended tasks go once their retention has passed since they ended;
// open tasks stay however old they are, and an ended task is not removed
// before its time.
func TestRetentionRemovesEndedTasksNotOpenOnes(t *testing.T) {
	_, _, js := natstest.Start(t)
	const keep = 3 * time.Second
	s, ret := retained(t, js, keep)
	ctx := context.Background()
	old := time.Now().Add(-24 * time.Hour).UTC()
	var want []string
	for _, st := range openStates {
		id := "old-open-" + string(st)
		put(t, s, id, st, old) // open for a day, far longer than keep
		want = append(want, id+"="+string(st))
	}
	for _, st := range endedStates {
		put(t, s, "old-ended-"+string(st), st, old)
	}
	// Ended a day ago, written just now (an agent's late event, refused):
	// its retention counts from its end.
	late := &Record{ID: "old-ended-late-event", Tenant: "t", AgentID: "a", State: Failed, CreatedAt: old, EndedAt: old, UpdatedAt: time.Now().UTC()}
	if err := s.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	sort.Strings(want)
	fresh := time.Now().UTC()
	for _, st := range endedStates {
		put(t, s, "fresh-ended-"+string(st), st, fresh)
	}
	waitUntil(t, "the day-old ended tasks to go", func() bool { return ret.Removed() >= 5 })
	if _, _, err := s.Get(ctx, "old-ended-late-event"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(old-ended-late-event) = %v; want ErrNotFound", err)
	}
	for _, st := range endedStates {
		if _, _, err := s.Get(ctx, "old-ended-"+string(st)); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(old-ended-%s) after its retention = %v; want ErrNotFound", st, err)
		}
	}
	got := ids(t, s)
	if time.Since(fresh) < keep { // measured after the read
		// Still within their retention: all four fresh ended tasks stay.
		if n := len(got) - len(want); n != 4 {
			t.Errorf("%d fresh ended tasks in the bucket %v before their retention passed; want 4", n, got)
		}
	}
	waitUntil(t, "the fresh ended tasks to go", func() bool { return ret.Removed() == 9 && s.Ended() == 0 })
	if got := ids(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bucket after the sweep = %v; want only the open tasks %v", got, want)
	}
	waitUntil(t, "Lag to say none is due", func() bool { return ret.Lag(time.Now()) == 0 })
	// Much later, the open tasks are still there.
	time.Sleep(keep + time.Second)
	if got := ids(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bucket %v after another retention period; want the open tasks %v", got, want)
	}
	if ret.Removed() != 9 {
		t.Fatalf("Removed = %d; want 9", ret.Removed())
	}
}

// Two instances sweeping the same bucket at once remove each ended task
// exactly once between them, and never an open one.
func TestRetentionTwoInstancesRemoveEachTaskOnce(t *testing.T) {
	srv, _, js := natstest.Start(t)
	js2, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	a, retA := retained(t, js, time.Second)
	b, retB := retained(t, js2, time.Second)
	old := time.Now().Add(-time.Hour).UTC()
	const ended, open = 300, 40
	for i := range ended {
		r := &Record{ID: fmt.Sprintf("e%03d", i), Tenant: "t", AgentID: "a", State: endedStates[i%4], CreatedAt: old, UpdatedAt: old}
		if i%2 == 0 {
			r.IdempotencyKey = r.ID // half of them leave a tombstone
		}
		if err := a.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range open {
		id := fmt.Sprintf("o%03d", i)
		put(t, a, id, openStates[i%4], old)
		want = append(want, id+"="+string(openStates[i%4]))
	}
	sort.Strings(want)
	waitUntil(t, "both instances to see every ended task go", func() bool {
		return a.Ended() == 0 && b.Ended() == 0 && retA.Removed()+retB.Removed() >= ended
	})
	time.Sleep(200 * time.Millisecond) // a double removal would show now
	if n := retA.Removed() + retB.Removed(); n != ended {
		t.Fatalf("the instances removed %d + %d = %d tasks; want each of the %d ended ones once", retA.Removed(), retB.Removed(), n, ended)
	}
	if got := ids(t, a); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bucket after both sweeps = %v; want the %d open tasks", got, open)
	}
	t.Logf("instance A removed %d, instance B %d; they met on %d", retA.Removed(), retB.Removed(), retA.changed.Load()+retB.changed.Load())
}

// A removal names the revision the watcher reported: a record written
// since is not removed, and of two removals of one revision only the first
// succeeds.
func TestExpireRefusesAChangedRecord(t *testing.T) {
	_, _, js := natstest.Start(t)
	s, stop := storeOn(t, js)
	defer stop()
	ctx := context.Background()
	put(t, s, "x", Completed, time.Now().UTC())
	_, rev, err := s.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	// A refused transition is still a write of the ended task.
	if _, err := s.Update(ctx, "x", func(r *Record) error { return r.Move(time.Now(), EventStart, SourceAgent, "", "") }); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("start from completed: %v", err)
	}
	if err := s.Expire(ctx, "x", rev, 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("Expire at the revision before the write = %v; want ErrChanged", err)
	}
	r, now, err := s.Get(ctx, "x")
	if err != nil || r.State != Completed || len(r.History) != 2 {
		t.Fatalf("after the refused removal Get = %+v, %v; want the completed record with 2 history entries", r, err)
	}
	if err := s.Expire(ctx, "x", now, 0); err != nil {
		t.Fatalf("Expire at the current revision: %v", err)
	}
	if err := s.Expire(ctx, "x", now, 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("second Expire of the same revision = %v; want ErrChanged", err)
	}
	if _, _, err := s.Get(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Expire = %v; want ErrNotFound", err)
	}
	// The id is free again: a new record under it is a new task, not the
	// old one back.
	fresh := time.Now().UTC()
	put(t, s, "x", Submitted, fresh)
	r, _, err = s.Get(ctx, "x")
	if err != nil || r.State != Submitted || len(r.History) != 1 || !r.CreatedAt.Equal(fresh) {
		t.Fatalf("record created under the removed id = %+v, %v; want a new submitted task", r, err)
	}
}

// The index is built from what the watcher loads at start: ended tasks
// stored before this instance started (a restart) are removed too.
func TestRetentionIndexesTasksStoredBeforeItStarted(t *testing.T) {
	_, _, js := natstest.Start(t)
	w, stop := storeOn(t, js)
	old := time.Now().Add(-time.Hour).UTC()
	for i := range 20 {
		put(t, w, fmt.Sprintf("e%02d", i), Completed, old)
	}
	put(t, w, "open", Working, old)
	stop()
	s, ret := retained(t, js, time.Minute)
	waitUntil(t, "the stored ended tasks to go", func() bool { return ret.Removed() == 20 })
	if got := ids(t, s); fmt.Sprint(got) != "[open=working]" {
		t.Fatalf("bucket = %v; want only the open task", got)
	}
}

// What a removed task leaves behind goes too: the purge marker expires
// (per-message TTL), and the bucket's stream ends up holding nothing of it.
// A task with an idempotency key leaves its marker as a tombstone for a
// while: its id is refused for a new task (ErrRemoved) until the tombstone
// expires in turn. The id of a task deleted otherwise (never delegated)
// can be created again at once, and its marker expires too.
func TestExpiredTaskLeavesAnIdempotentTombstoneForAWhile(t *testing.T) {
	_, _, js := natstest.Start(t)
	s, stop := storeOn(t, js)
	defer stop()
	if s.markerTTL != PurgeMarkerTTL {
		t.Fatalf("marker TTL = %v; want %v (the embedded server supports per-message TTLs)", s.markerTTL, PurgeMarkerTTL)
	}
	s.markerTTL = time.Second // the marker's lifetime, shortened to wait for it here
	ctx := context.Background()
	now := time.Now().UTC()
	put(t, s, "plain", Completed, now)
	idem := &Record{ID: "idem", Tenant: "t", AgentID: "a", State: Completed, IdempotencyKey: "k", CreatedAt: now, UpdatedAt: now}
	if err := s.Create(ctx, idem); err != nil {
		t.Fatal(err)
	}
	for id, tombstone := range map[string]time.Duration{"plain": 0, "idem": 4 * time.Second} {
		_, rev, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Expire(ctx, id, rev, tombstone); err != nil {
			t.Fatal(err)
		}
	}
	removed := time.Now()
	put(t, s, "never-delegated", Submitted, now)
	if err := s.Delete(ctx, "never-delegated"); err != nil {
		t.Fatal(err)
	}
	put(t, s, "never-delegated", Submitted, now) // at once over its marker (put fails the test on an error)
	if err := s.Delete(ctx, "never-delegated"); err != nil {
		t.Fatal(err)
	}
	if n := natstest.Messages(t, js, "KV_"+Bucket); n != 3 {
		t.Fatalf("stream holds %d messages after the purges; want 3 (their markers)", n)
	}
	waitUntil(t, "the purge markers to expire", func() bool { return natstest.Messages(t, js, "KV_"+Bucket) == 1 })
	again := &Record{ID: "idem", Tenant: "t", AgentID: "a", State: Submitted, IdempotencyKey: "k", CreatedAt: time.Now().UTC()}
	err := s.Create(ctx, again)
	if time.Since(removed) < 4*time.Second { // measured after the create: the tombstone was there
		if !errors.Is(err, ErrRemoved) {
			t.Fatalf("Create over the tombstone = %v; want ErrRemoved", err)
		}
		if _, _, err := s.Get(ctx, "idem"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of the removed idempotent task = %v; want ErrNotFound", err)
		}
	}
	waitUntil(t, "the tombstone to expire", func() bool { return natstest.Messages(t, js, "KV_"+Bucket) == 0 })
	time.Sleep(2 * time.Second) // no marker of a marker follows
	if n := natstest.Messages(t, js, "KV_"+Bucket); n != 0 {
		t.Fatalf("stream holds %d messages after the markers expired; want 0", n)
	}
	if err := s.Create(ctx, again); err != nil {
		t.Fatalf("Create after the tombstone expired: %v", err)
	}
}

// A bucket made by an earlier version (no per-message TTLs) is upgraded in
// place at start, its records kept.
func TestStoreUpgradesABucketWithoutMarkerTTL(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Bucket, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "before", []byte(`{"task_id":"before","state":"completed"}`)); err != nil {
		t.Fatal(err)
	}
	s, stop := storeOn(t, js)
	defer stop()
	st, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	status, err := st.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.LimitMarkerTTL() != PurgeMarkerTTL {
		t.Fatalf("bucket's limit marker TTL = %v after start; want %v", status.LimitMarkerTTL(), PurgeMarkerTTL)
	}
	r, rev, err := s.Get(ctx, "before")
	if err != nil || r.State != Completed {
		t.Fatalf("record stored before the upgrade: %+v, %v", r, err)
	}
	if err := s.Expire(ctx, "before", rev, 0); err != nil {
		t.Fatalf("Expire on the upgraded bucket: %v", err)
	}
}

// The late index holds only ended tasks written more than a minute after
// they ended (an agent's late event), with an empty outbox, at most MaxLate
// of them; every other value leaves it, and an ordinary ended task costs
// it nothing: the walk finds those in the stream.
func TestRetentionLateIndex(t *testing.T) {
	ret := &Retention{Keep: time.Hour, MaxLate: 50}
	ret.init()
	ret.offset = 0 // no extra delay: exact times
	now := time.Now()
	for i := range 1000 { // ended and written at once: not late
		at := now.Add(-time.Duration(i) * time.Minute)
		ret.Track(Snapshot{ID: fmt.Sprint("t", i), State: Completed, Revision: uint64(i + 1), EndedAt: at, UpdatedAt: at.Add(time.Second)})
	}
	ret.Track(Snapshot{ID: "open", State: Working, UpdatedAt: now})
	// Canceled two days ago and written now, its CancelTask to the agent
	// still in the outbox: it waits for that, not in the index.
	ret.Track(Snapshot{ID: "cancel-pending", State: Canceled, EndedAt: now.Add(-48 * time.Hour), UpdatedAt: now, OutboxAt: now})
	if n := ret.Late(); n != 0 {
		t.Fatalf("Late = %d after 1000 ended tasks written as they ended, an open one and one with an outbox; want 0", n)
	}
	for i := range 60 { // ended 2 h ago, written i minutes ago + 2 min
		ret.Track(Snapshot{ID: fmt.Sprint("late", i), State: Failed, Revision: uint64(2000 + i),
			EndedAt: now.Add(-2*time.Hour - time.Duration(i)*time.Second), UpdatedAt: now.Add(-time.Duration(i) * time.Minute)})
	}
	if n, skipped := ret.Late(), ret.skipped.Load(); n != 50 || skipped != 10 {
		t.Fatalf("Late, skipped = %d, %d after 60 late-written tasks; want 50, 10 (MaxLate 50)", n, skipped)
	}
	// The agent got the cancel: the outbox is empty, the task is late.
	ret.Track(Snapshot{ID: "cancel-pending", State: Canceled, EndedAt: now.Add(-48 * time.Hour), UpdatedAt: now, Revision: 3000})
	if n, skipped := ret.Late(), ret.skipped.Load(); n != 50 || skipped != 11 {
		t.Fatalf("Late, skipped = %d, %d with the index full; want 50, 11", n, skipped)
	}
	ret.Track(Snapshot{ID: "late0", Deleted: true})
	ret.Track(Snapshot{ID: "late1", State: Submitted, UpdatedAt: now}) // created anew
	ret.Track(Snapshot{ID: "cancel-pending", State: Canceled, EndedAt: now.Add(-48 * time.Hour), UpdatedAt: now, Revision: 3001})
	if n := ret.Late(); n != 49 {
		t.Fatalf("Late = %d after two left and one came in; want 49", n)
	}
	e, _ := ret.nextLate(now)
	if e == nil || e.id != "cancel-pending" || e.rev != 3001 {
		t.Fatalf("nextLate = %+v; want the earliest ended, cancel-pending at revision 3001", e)
	}
	// The earliest left, late49, ended 2 h 49 s ago: an hour and 49 s
	// past an hour's retention.
	if lag := ret.Lag(now); lag != time.Hour+49*time.Second {
		t.Fatalf("Lag = %v; want 1h0m49s", lag)
	}
}

// BenchmarkRetentionTrack measures the memory retention keeps per ended
// task the watcher reports (bytes/task): 0 for tasks written as they
// ended, the late index's for tasks written long after (late bytes/task).
func BenchmarkRetentionTrack(b *testing.B) {
	const n = 200_000
	now := time.Now()
	measure := func(late bool) float64 {
		snaps := make([]Snapshot, n)
		for i := range snaps {
			at := now.Add(time.Duration(i))
			snaps[i] = Snapshot{ID: fmt.Sprintf("tsk-%024x", i), State: Completed, Revision: uint64(i), EndedAt: at, UpdatedAt: at}
			if late {
				snaps[i].UpdatedAt = at.Add(time.Hour)
			}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ret := &Retention{MaxLate: n}
		for _, sn := range snaps {
			ret.Track(sn)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(ret)
		return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	}
	var onTime, late float64
	for b.Loop() {
		onTime, late = measure(false), measure(true)
	}
	b.ReportMetric(max(0, onTime), "bytes/task")
	b.ReportMetric(late, "late-bytes/task") // the index's own copy of each id included
}

// BenchmarkRetentionSweep measures how fast one instance removes due tasks
// from an embedded JetStream (removals/s), unpaced.
func BenchmarkRetentionSweep(b *testing.B) {
	_, _, js := natstest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ret := &Retention{Keep: time.Nanosecond, PerSecond: 1e9}
	s, err := NewStore(ctx, js, 1, ret.Track)
	if err != nil {
		b.Fatal(err)
	}
	ret.Store = s
	old := time.Now().Add(-time.Hour).UTC()
	const batch = 2000
	var wg sync.WaitGroup
	for i := range batch {
		wg.Go(func() {
			r := &Record{ID: fmt.Sprintf("tsk-%024x", i), Tenant: "t", AgentID: "a", State: Completed, CreatedAt: old, UpdatedAt: old}
			if err := s.Create(ctx, r); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	<-s.Loaded()
	for s.Ended() < batch {
		time.Sleep(time.Millisecond)
	}
	b.ResetTimer()
	start := time.Now()
	go ret.Run(ctx)
	for ret.Removed() < batch {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(batch/time.Since(start).Seconds(), "removals/s")
}

// On a three-node cluster (an R3 bucket, whose compare-and-swap conflicts
// JetStream reports with another code), two instances connected to
// different nodes remove each ended task once between them and never an
// open one, tombstones included.
func TestRetentionOnAThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	c := natscluster.Start(t, 3)
	ctx := context.Background()
	var stores []*Store
	var rets []*Retention
	for i := range 2 {
		nc, err := nats.Connect(c.URL(i), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		ret := &Retention{Keep: time.Second}
		s, err := NewStore(rctx, js, 3, ret.Track)
		if err != nil {
			t.Fatal(err)
		}
		ret.Store = s
		done := make(chan struct{})
		go func() { defer close(done); ret.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done })
		stores, rets = append(stores, s), append(rets, ret)
	}
	old := time.Now().Add(-time.Hour).UTC()
	const ended = 200
	for i := range ended {
		r := &Record{ID: fmt.Sprintf("e%03d", i), Tenant: "t", AgentID: "a", State: endedStates[i%4], CreatedAt: old, UpdatedAt: old}
		if i%2 == 0 {
			r.IdempotencyKey = r.ID
		}
		if err := stores[i%2].Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	put(t, stores[1], "open", InputRequired, old)
	waitUntil(t, "both instances to see every ended task go", func() bool {
		return stores[0].Ended() == 0 && stores[1].Ended() == 0 && rets[0].Removed()+rets[1].Removed() >= ended
	})
	time.Sleep(200 * time.Millisecond) // a double removal would show now
	if n := rets[0].Removed() + rets[1].Removed(); n != ended {
		t.Fatalf("the instances removed %d + %d = %d tasks; want each of the %d ended ones once", rets[0].Removed(), rets[1].Removed(), n, ended)
	}
	for _, s := range stores {
		if got := ids(t, s); fmt.Sprint(got) != "[open=input-required]" {
			t.Fatalf("bucket = %v; want only the open task", got)
		}
	}
	if err := stores[0].Create(ctx, &Record{ID: "e000", State: Submitted, IdempotencyKey: "e000"}); !errors.Is(err, ErrRemoved) {
		t.Fatalf("Create over a tombstone on R3 = %v; want ErrRemoved", err)
	}
	t.Logf("instance A removed %d, instance B %d", rets[0].Removed(), rets[1].Removed())
}

// A removal names the revision the walk read: a record written between
// the read and the removal is not removed at that revision, and the walk
// removes the newer value when it reaches it (still ended, still past its
// retention), never the one it read.
func TestRetentionLeavesARecordWrittenSinceItWasRead(t *testing.T) {
	_, _, js := natstest.Start(t)
	s, stop := storeOn(t, js)
	defer stop()
	ctx := context.Background()
	old := time.Now().Add(-time.Hour).UTC()
	put(t, s, "x", Completed, old)
	_, first, err := s.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tried []uint64
	ret := &Retention{Store: s, Keep: time.Second}
	ret.beforeExpire = func(id string, rev uint64) {
		mu.Lock()
		defer mu.Unlock()
		tried = append(tried, rev)
		if len(tried) == 1 {
			if _, err := s.Update(ctx, "x", func(r *Record) error { r.StatusMessage = "late"; return nil }); err != nil {
				t.Error(err)
			}
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ret.Run(rctx) }()
	waitUntil(t, "the walk to remove the newer value", func() bool { return ret.Removed() == 1 })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(tried) != 2 || tried[0] != first || tried[1] <= first || ret.changed.Load() != 1 {
		t.Fatalf("removals tried at revisions %v (%d refused); want the read one, %d, refused, then the newer one", tried, ret.changed.Load(), first)
	}
	if _, _, err := s.Get(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after the removal = %v; want ErrNotFound", err)
	}
}

// The store counts the ended records in the bucket without keeping them:
// those it loads, each task it sees end or created ended, less each
// removal; a late write of an ended task is not counted again, and a
// restarted store counts the same.
func TestStoreCountsEndedTasks(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	w, stopW := storeOn(t, js)
	old := time.Now().Add(-time.Hour).UTC()
	for i := range 5 {
		put(t, w, fmt.Sprint("loaded", i), Completed, old)
	}
	put(t, w, "open-before", Working, old)
	waitUntil(t, "the writer's watcher to count 5", func() bool { return w.Ended() == 5 })
	stopW()

	s, stop := storeOn(t, js)
	defer stop()
	<-s.Loaded()
	if n := s.Ended(); n != 5 {
		t.Fatalf("Ended = %d after loading 5 ended records and an open one; want 5", n)
	}
	put(t, s, "open", Submitted, time.Now().UTC())
	for _, ev := range []string{EventStart, EventComplete} {
		if _, err := s.Update(ctx, "open", func(r *Record) error { return r.Move(time.Now().UTC(), ev, SourceAgent, "", "") }); err != nil {
			t.Fatal(err)
		}
	}
	// A late event: refused, yet written.
	if _, err := s.Update(ctx, "open", func(r *Record) error { return r.Move(time.Now().UTC(), EventStart, SourceAgent, "", "") }); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("start from completed: %v", err)
	}
	put(t, s, "created-ended", Rejected, time.Now().UTC())
	waitUntil(t, "the watcher to count 7", func() bool { return s.Ended() == 7 })
	for _, id := range []string{"loaded0", "open"} {
		_, rev, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Expire(ctx, id, rev, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "open-before"); err != nil { // an open task deleted
		t.Fatal(err)
	}
	waitUntil(t, "the watcher to count 5 after two removals", func() bool { return s.Ended() == 5 && s.Open() == 0 })
	time.Sleep(100 * time.Millisecond) // a miscount of the late write or the deletion would show now
	if n := s.Ended(); n != 5 {
		t.Fatalf("Ended = %d; want 5", n)
	}
	stop()
	again, stopAgain := storeOn(t, js)
	defer stopAgain()
	<-again.Loaded()
	if n := again.Ended(); n != 5 {
		t.Fatalf("Ended = %d after a restart; want 5, as before", n)
	}
}

// The walk waits at the first ended task whose retention has not passed;
// a task written long after it ended, behind that one in the stream, is
// removed on time all the same (the late index), and a task that ends
// while the walk waits at the stream's end is removed once its time comes.
func TestRetentionRemovesALateWrittenTaskBehindTheWalk(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	s, ret := retained(t, js, 2*time.Second)
	now := time.Now().UTC()
	put(t, s, "fresh", Completed, now) // the walk waits here 2 s
	ended := now.Add(-time.Hour)
	late := &Record{ID: "late", Tenant: "t", AgentID: "a", State: Failed, CreatedAt: ended, EndedAt: ended, UpdatedAt: now}
	if err := s.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the late-written task to go", func() bool { return ret.Removed() == 1 })
	if _, _, err := s.Get(ctx, "late"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(late) = %v; want ErrNotFound", err)
	}
	if took := time.Since(now); took >= 2*time.Second {
		t.Fatalf("the late-written task went after %v, behind the fresh one; want before its 2 s", took)
	}
	if _, _, err := s.Get(ctx, "fresh"); err != nil {
		t.Fatalf("Get(fresh) before its retention passed = %v", err)
	}
	waitUntil(t, "the fresh task to go", func() bool { return ret.Removed() == 2 })
	waitUntil(t, "the walk to wait at the stream's end", func() bool { return ret.atEnd.Load() })
	put(t, s, "next", Canceled, time.Now().UTC())
	waitUntil(t, "the task that ended at the stream's end to go", func() bool { return ret.Removed() == 3 })
	if n := s.Ended(); n != 0 {
		t.Fatalf("Ended = %d; want 0", n)
	}
}
