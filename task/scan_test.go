package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// scanStore is a store on a fresh embedded NATS, with the bucket itself for
// writes that bypass the store.
func scanStore(t *testing.T) (*Store, jetstream.KeyValue, jetstream.JetStream) {
	t.Helper()
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return s, kv, js
}

func scanIDs(t *testing.T, s *Store) []string {
	t.Helper()
	var got []string
	if err := s.Scan(context.Background(), func(r *Record) error { got = append(got, r.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// Scan reports each current record once, decoded, in the order of their
// last writes; records deleted (a delete marker) or purged are not
// reported, and List returns the same records newest first.
func TestScanReportsEachCurrentRecordOnce(t *testing.T) {
	s, kv, js := scanStore(t)
	ctx := context.Background()
	before := natstest.Consumers(t, js, "KV_"+Bucket)
	if got := scanIDs(t, s); len(got) != 0 {
		t.Fatalf("empty bucket: scanned %v", got)
	}
	base := time.Now().Add(-time.Hour).UTC()
	for i := range 30 {
		at := base.Add(time.Duration(i) * time.Second)
		r := &Record{ID: fmt.Sprintf("s-%02d", i), Tenant: "acme", AgentID: "fraud-review", State: Working,
			Turns: i, CreatedAt: at, UpdatedAt: at}
		if err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Rewritten records move to the end of the write order, with their new
	// value.
	for _, id := range []string{"s-03", "s-00"} {
		if _, err := s.Update(ctx, id, func(r *Record) error { r.Question = "rewritten " + id; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "s-10"); err != nil { // purge
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "s-20"); err != nil { // delete marker
		t.Fatal(err)
	}

	var want []string
	for i := range 30 {
		if id := fmt.Sprintf("s-%02d", i); !slices.Contains([]string{"s-00", "s-03", "s-10", "s-20"}, id) {
			want = append(want, id)
		}
	}
	want = append(want, "s-03", "s-00")
	var got []string
	err := s.Scan(ctx, func(r *Record) error {
		got = append(got, r.ID)
		n, _ := strconv.Atoi(strings.TrimPrefix(r.ID, "s-"))
		if r.Turns != n || r.Tenant != "acme" || r.State != Working {
			t.Errorf("%s decoded as turns %d tenant %q state %s", r.ID, r.Turns, r.Tenant, r.State)
		}
		if q := "rewritten " + r.ID; (r.ID == "s-00" || r.ID == "s-03") != (r.Question == q) {
			t.Errorf("%s has question %q", r.ID, r.Question)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("scanned\n%v\nwant\n%v", got, want)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range list {
		listed = append(listed, r.ID)
	}
	newest := slices.Clone(want)
	slices.Sort(newest)
	slices.Reverse(newest)
	if !slices.Equal(listed, newest) {
		t.Errorf("listed\n%v\nwant\n%v", listed, newest)
	}

	// Each scan's watcher goes with it.
	waitUntil(t, "the scans' consumers to go", func() bool { return natstest.Consumers(t, js, "KV_"+Bucket) == before })
}

// fn's error stops the scan and is returned as is; the end of ctx stops it
// with the context's error; the watcher goes either way.
func TestScanStopsOnCallbackErrorAndContextEnd(t *testing.T) {
	s, _, js := scanStore(t)
	ctx := context.Background()
	before := natstest.Consumers(t, js, "KV_"+Bucket)
	now := time.Now().UTC()
	for i := range 600 { // more than the watcher's buffer: some are unread when it stops
		if err := s.Create(ctx, &Record{ID: fmt.Sprintf("e-%03d", i), State: Submitted, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("enough")
	calls := 0
	err := s.Scan(ctx, func(*Record) error {
		if calls++; calls == 3 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 3 {
		t.Errorf("Scan = %v after %d calls, want the callback's error after 3", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = s.Scan(cctx, func(*Record) error { calls++; cancel(); return nil })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("Scan = %v after %d calls, want context.Canceled after 1", err, calls)
	}
	if err := s.Scan(cctx, func(*Record) error { t.Error("called after the end of ctx"); return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Scan on an ended context = %v", err)
	}
	waitUntil(t, "the scans' consumers to go", func() bool { return natstest.Consumers(t, js, "KV_"+Bucket) == before })
}

// A stored value that is not a record fails the scan, naming its key, as
// Get does.
func TestScanReportsValueThatIsNotARecord(t *testing.T) {
	s, kv, _ := scanStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if err := s.Create(ctx, &Record{ID: "ok-1", State: Submitted, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "junk-1", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	err := s.Scan(ctx, func(*Record) error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), "task: decode junk-1: ") {
		t.Errorf("Scan = %v, want a decode error naming junk-1", err)
	}
	if _, err := s.List(ctx); err == nil || !strings.HasPrefix(err.Error(), "task: decode junk-1: ") {
		t.Errorf("List = %v, want a decode error naming junk-1", err)
	}
}

// ScanBack reports each current record once, newest write first, across
// several batches (more records than one window, with the gaps that
// rewrites leave in the stream), skipping deleted and purged keys, with
// stored times that never grow; it stops where fn says.
func TestScanBackReportsNewestWritesFirst(t *testing.T) {
	s, kv, _ := scanStore(t)
	ctx := context.Background()
	const n = 3*scanBackWindow + 17
	var want []string // in write order
	for i := range n {
		id := fmt.Sprintf("b-%04d", i)
		if err := s.Create(ctx, &Record{ID: id, Tenant: "acme", State: Working, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
		if i%5 == 4 { // rewrite an earlier one: it moves to the top
			old := fmt.Sprintf("b-%04d", i-3)
			if _, err := s.Update(ctx, old, func(r *Record) error { r.Turns++; return nil }); err != nil {
				t.Fatal(err)
			}
			want = append(slices.DeleteFunc(want, func(id string) bool { return id == old }), old)
		}
	}
	for _, id := range []string{"b-0003", "b-0100"} {
		if err := kv.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		want = slices.DeleteFunc(want, func(x string) bool { return x == id })
	}
	if err := kv.Purge(ctx, "b-0200"); err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(x string) bool { return x == "b-0200" })
	slices.Reverse(want)

	var got []string
	last := time.Now().Add(time.Hour)
	err := s.ScanBack(ctx, func(v *Scanned) (bool, error) {
		r, err := v.Record()
		if err != nil || r.ID != v.ID || !r.CreatedAt.Equal(v.CreatedAt) || r.State != v.State {
			t.Errorf("%s: Record() = %+v, %v; want the record its summary (%s, %v) describes", v.ID, r, err, v.State, v.CreatedAt)
			return false, nil
		}
		stored := v.Stored
		if stored.After(last) {
			t.Errorf("%s stored at %v, after the one before it (%v)", r.ID, stored, last)
		}
		if stored.Before(r.CreatedAt) {
			t.Errorf("%s stored at %v, before its creation %v", r.ID, stored, r.CreatedAt)
		}
		last = stored
		got = append(got, r.ID)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ScanBack: %d records %v…, want %d %v…", len(got), got[:min(10, len(got))], len(want), want[:10])
	}
	got = nil
	if err := s.ScanBack(ctx, func(v *Scanned) (bool, error) { got = append(got, v.ID); return len(got) < 3, nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want[:3]) {
		t.Errorf("ScanBack stopped after 3: %v, want %v", got, want[:3])
	}
	boom := errors.New("boom")
	if err := s.ScanBack(ctx, func(*Scanned) (bool, error) { return true, boom }); err != boom {
		t.Errorf("fn's error: %v, want it unchanged", err)
	}
}

// OpenTasks yields the open tasks the watcher saw, with tenant, agent,
// state and creation time, and none once ended or deleted.
func TestOpenTasksIndex(t *testing.T) {
	s, kv, _ := scanStore(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	for i, st := range []State{Working, InputRequired, Completed, Submitted} {
		if err := s.Create(ctx, &Record{ID: fmt.Sprintf("o-%d", i), Tenant: "acme", AgentID: "kyc", State: st, CreatedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Update(ctx, "o-0", func(r *Record) error { r.State = Failed; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "o-3"); err != nil {
		t.Fatal(err)
	}
	want := []OpenTask{{ID: "o-1", Tenant: "acme", AgentID: "kyc", State: InputRequired, CreatedAt: at}}
	var got []OpenTask
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got = slices.Collect(s.OpenTasks())
		if len(got) == 1 && s.Open() == 1 {
			break
		}
	}
	if len(got) != 1 || got[0].ID != want[0].ID || got[0].Tenant != "acme" || got[0].AgentID != "kyc" || got[0].State != InputRequired ||
		!got[0].CreatedAt.Equal(at) || s.Open() != 1 {
		t.Errorf("OpenTasks: %+v (Open %d), want %+v", got, s.Open(), want)
	}
}
