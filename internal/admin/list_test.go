package admin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
)

// noSkew lists as if a2ad's and NATS's clocks agreed exactly (they are
// one clock here), so that the backward scan stops as early as it may.
func noSkew(t *testing.T) {
	old := listClockSkew
	listClockSkew = 0
	t.Cleanup(func() { listClockSkew = old })
}

// createNow stores a record created now (as a2ad creates them: its
// CreatedAt before its first write).
func (a *api) createNow(id, tenant string, state task.State) *task.Record {
	a.t.Helper()
	return a.createAt(id, tenant, state, time.Now().UTC())
}

// createAt stores a record created at now by the writer's clock.
func (a *api) createAt(id, tenant string, state task.State, now time.Time) *task.Record {
	a.t.Helper()
	r := &task.Record{ID: id, Tenant: tenant, AgentID: "fraud-review", State: state, CreatedAt: now, UpdatedAt: now}
	if state.Terminal() {
		r.EndedAt = now
	}
	if err := a.store.Create(context.Background(), r); err != nil {
		a.t.Fatal(err)
	}
	return r
}

// Pages walked with the backward scan stopping as early as it may equal
// the filtered records sorted newest first, while tasks end out of
// creation order (each end moves a record to the top of the stream) and
// some stay open for the index to give.
func TestListTasksBackwardScanIsExact(t *testing.T) {
	noSkew(t)
	backwardScanIsExact(t, 0)
}

// With every a2ad clock 3 s ahead of the NATS server's (far beyond the
// base margin, here none), the scan measures the lead from the writes it
// reads and pages stay exact: a fixed margin would stop 3 s of writes
// too early and leave tasks off.
func TestListTasksBackwardScanMeasuresTheWritersClock(t *testing.T) {
	noSkew(t)
	backwardScanIsExact(t, 3*time.Second)
}

// backwardScanIsExact walks every filter's pages over 400 tasks written
// by a clock lead ahead of the server's and checks them against a sort.
func backwardScanIsExact(t *testing.T, lead time.Duration) {
	t.Helper()
	clock := func() time.Time { return time.Now().UTC().Add(lead) }
	a := newAPI(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(20, 3))
	const n = 400
	recs := map[string]*task.Record{}
	var order []string
	for i := range n {
		id := fmt.Sprintf("tsk-%03d", i)
		tenant := []string{"acme", "globex"}[rng.IntN(2)]
		st := []task.State{task.Working, task.Completed, task.Failed}[rng.IntN(3)]
		recs[id] = a.createAt(id, tenant, st, clock())
		order = append(order, id)
		// Now and then a working task created earlier ends.
		if rng.IntN(4) == 0 {
			old := order[rng.IntN(len(order))]
			if !recs[old].State.Terminal() {
				r, err := a.store.Update(ctx, old, func(r *task.Record) error {
					r.State, r.EndedAt = task.Completed, clock()
					r.UpdatedAt = r.EndedAt
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				recs[old] = r
			}
		}
	}
	waitIndexed(t, a.store, recs)
	for _, c := range []struct {
		query string
		pass  func(r *task.Record) bool
	}{
		{"", func(*task.Record) bool { return true }},
		{"state=completed", func(r *task.Record) bool { return r.State == task.Completed }},
		{"state=working,failed", func(r *task.Record) bool { return r.State == task.Working || r.State == task.Failed }},
		{"state=working", func(r *task.Record) bool { return r.State == task.Working }},
		{"tenant=globex&state=completed,working", func(r *task.Record) bool {
			return r.Tenant == "globex" && (r.State == task.Completed || r.State == task.Working)
		}},
	} {
		var want []string
		for _, r := range recs {
			if c.pass(r) {
				want = append(want, r.ID)
			}
		}
		slices.SortFunc(want, func(x, y string) int {
			if before(recs[x], recs[y]) {
				return -1
			}
			return 1
		})
		for _, limit := range []int{3, 50} {
			var got []string
			token := ""
			for range n + 1 {
				q := fmt.Sprintf("/v1/tasks?limit=%d&%s", limit, c.query)
				if token != "" {
					q += "&page_token=" + token
				}
				var p TaskPage
				if code := a.do("GET", q, "", &p); code != http.StatusOK {
					t.Fatalf("GET %s: %d", q, code)
				}
				got = append(got, ids(p)...)
				if token = p.NextPageToken; token == "" {
					break
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%q by %d: %d tasks\n%v\nwant %d\n%v", c.query, limit, len(got), got, len(want), want)
			}
		}
	}
}

// waitIndexed waits until the store's watcher has seen every record's
// state (the index of open tasks is the watcher's).
func waitIndexed(t *testing.T, s *task.Store, recs map[string]*task.Record) {
	t.Helper()
	want := 0
	for _, r := range recs {
		if !r.State.Terminal() {
			want++
		}
	}
	for deadline := time.Now().Add(10 * time.Second); s.Open() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watcher indexed %d open tasks, want %d", s.Open(), want)
		}
	}
}

// A page of the newest tasks reads only the newest writes: out of 3,000
// ended tasks, one batch of the backward scan, where a pass over the
// bucket would read all twelve; open tasks come from the index alone, and
// no listing starts a consumer (the full scan's KV watcher).
func TestListTasksReadsOnlyWhatThePageNeeds(t *testing.T) {
	noSkew(t)
	srv, _, js := natstest.Start(t)
	a := newAPIOn(t, js)
	for i := range 20 {
		a.createNow(fmt.Sprintf("open-%02d", i), "acme", task.Working)
	}
	for i := range 3000 {
		a.createNow(fmt.Sprintf("done-%04d", i), "acme", task.Completed)
	}
	for deadline := time.Now().Add(10 * time.Second); a.store.Open() != 20; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("open tasks indexed: %d, want 20", a.store.Open())
		}
	}
	// Count the JetStream requests the listing sends, on a connection of
	// its own.
	spy := natstest.Connect(t, srv)
	var batches, multiLast, consumers atomic.Int64
	if _, err := spy.Subscribe("$JS.API.DIRECT.GET.KV_"+task.Bucket, func(m *nats.Msg) {
		if strings.Contains(string(m.Data), `"multi_last"`) {
			multiLast.Add(1) // the open candidates' records, in one read
		} else {
			batches.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := spy.Subscribe("$JS.API.CONSUMER.CREATE.KV_"+task.Bucket+".>", func(*nats.Msg) { consumers.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	list := func(q string) TaskPage {
		t.Helper()
		batches.Store(0)
		multiLast.Store(0)
		var p TaskPage
		if code := a.do("GET", q, "", &p); code != http.StatusOK {
			t.Fatalf("GET %s: %d", q, code)
		}
		_ = spy.Flush()
		return p
	}
	p := list("/v1/tasks?limit=50")
	if got := ids(p); len(got) != 50 || got[0] != "done-2999" || got[49] != "done-2950" {
		t.Errorf("newest page: %v, want done-2999 down to done-2950", got)
	}
	if n, m := batches.Load(), multiLast.Load(); n != 1 || m != 3 {
		t.Errorf("newest page of 50 read %d batches of the backward scan and %d of open records, want 1 (of 12 for the whole bucket) and 3 (the 20 open ones, 8 a read)", n, m)
	}
	p = list("/v1/tasks?limit=50&state=working")
	if got := ids(p); len(got) != 20 || got[0] != "open-19" || got[19] != "open-00" {
		t.Errorf("open page: %v, want open-19 down to open-00", got)
	}
	if n, m := batches.Load(), multiLast.Load(); n != 0 || m != 3 {
		t.Errorf("open page read %d batches of the backward scan and %d of open records, want 0 (the index gives open tasks) and 3 (their 20 records, 8 a read)", n, m)
	}
	if n := consumers.Load(); n != 0 {
		t.Errorf("listing created %d consumers on the bucket's stream, want 0", n)
	}
}
