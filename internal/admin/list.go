package admin

import (
	"context"
	"slices"
	"time"

	"github.com/a2ad/a2ad/task"
)

// listClockSkew is the least margin the backward scan of ended tasks
// keeps between a write's time on the NATS server's clock and the
// CreatedAt (an a2ad instance's clock) of the tasks it has still to read.
// The scan widens the margin to the largest UpdatedAt − stored-time gap it
// has seen, so a clock offset shared by every writer (the server's clock
// behind all instances, say) is measured rather than assumed; this base
// covers instances whose clocks differ from each other. An ended task
// written by an instance whose clock runs more than this ahead of the
// newer writes' instances may be left off the page it belongs on.
var listClockSkew = 50 * time.Millisecond

// listPage cuts one page of GET /v1/tasks out of the store without reading
// the whole bucket:
//
//   - open tasks (the filter's non-terminal states) come from the store's
//     in-memory index ([task.Store.OpenTasks]): the index picks the page's
//     candidates, and only those are read;
//   - ended tasks come from the newest writes down ([task.Store.ScanBack]),
//     until the writes are older (less a margin: listClockSkew, or the
//     largest writer-clock lead seen so far) than the page's oldest task
//     — a task is created before its last write — or than newer_than
//     allows.
//
// A page of the newest tasks reads about the tasks written since its
// oldest was created; a page further down, or a filter that ended tasks
// rarely match, reads back further (at worst the whole bucket). Until the
// store's watcher has loaded the bucket the index is not complete, and
// the page is cut from a full [task.Store.Scan].
func listPage(ctx context.Context, store *task.Store, f taskFilter, limit int, cursor *pageCursor, now time.Time) (TaskPage, error) {
	pg := newPager(f, limit, cursor, now)
	select {
	case <-store.Loaded():
	default:
		if err := store.Scan(ctx, pg.add); err != nil {
			return TaskPage{}, err
		}
		return pg.page(), nil
	}
	open, ended := f.States, f.States
	if len(f.States) == 0 {
		open, ended = states, states
	}
	open = slices.DeleteFunc(slices.Clone(open), task.State.Terminal)
	ended = slices.DeleteFunc(slices.Clone(ended), func(s task.State) bool { return !s.Terminal() })
	if len(open) > 0 {
		of := f
		of.States = open
		cands := openCandidates(store, of, limit+1, cursor, now)
		ids := make([]string, len(cands))
		for i, c := range cands {
			ids[i] = c.ID
		}
		got, err := store.GetMany(ctx, ids) // one read for the page, not one each
		if err != nil {
			return TaskPage{}, err
		}
		for _, id := range ids {
			if r, ok := got[id]; ok { // absent: removed since the watcher reported it
				_ = pg.add(r) // added only if it still matches: it may have ended since
			}
		}
	}
	if len(ended) > 0 {
		margin := listClockSkew
		err := store.ScanBack(ctx, func(v *task.Scanned) (bool, error) {
			if lead := v.UpdatedAt.Sub(v.Stored); lead > margin {
				margin = lead // this writer's clock runs ahead of the server's
			}
			floor := v.Stored.Add(margin) // every task written at or before this was created before it
			if f.NewerThan > 0 && floor.Before(now.Add(-f.NewerThan)) {
				return false, nil
			}
			if last := pg.last(); last != nil && floor.Before(last.CreatedAt) {
				return false, nil
			}
			// Decoded only when it would be on the page: a scan reads past
			// the page by the writes of the clock margin.
			if !pg.wants(&task.Record{ID: v.ID, Tenant: v.Tenant, AgentID: v.AgentID, State: v.State, CreatedAt: v.CreatedAt}) {
				return true, nil
			}
			r, err := v.Record()
			if err != nil {
				return false, err
			}
			return true, pg.add(r)
		})
		if err != nil {
			return TaskPage{}, err
		}
	}
	return pg.page(), nil
}

// openCandidates returns, from the store's index, the n open tasks that
// come first in newest-first order among those matching f (by state,
// agent, tenant and age) after the cursor.
func openCandidates(store *task.Store, f taskFilter, n int, cursor *pageCursor, now time.Time) []task.OpenTask {
	// comesBefore orders as before does, on index entries.
	comesBefore := func(a, b task.OpenTask) bool {
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		return a.ID > b.ID
	}
	var held []task.OpenTask // sorted newest first, at most n
	for t := range store.OpenTasks() {
		r := task.Record{ID: t.ID, Tenant: t.Tenant, AgentID: t.AgentID, State: t.State, CreatedAt: t.CreatedAt}
		if !cursor.after(&r) || !f.match(&r, now) {
			continue
		}
		if len(held) == n && !comesBefore(t, held[n-1]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(held, t, func(a, b task.OpenTask) int {
			if comesBefore(a, b) {
				return -1
			}
			return 1
		})
		held = slices.Insert(held, i, t)
		if len(held) > n {
			held = held[:n]
		}
	}
	return held
}

// last is the held record that comes last in newest-first order once the
// pager holds as many as can be on the page and one more; nil before.
func (p *pager) last() *task.Record {
	if len(p.held) < p.limit+1 {
		return nil
	}
	return p.held[0].r
}
