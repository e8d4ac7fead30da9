package task

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"
)

// DefaultRetention is how long an ended task stays in the bucket after it
// ended when none is configured: 30 days.
const DefaultRetention = 30 * 24 * time.Hour

// DefaultRemovalsPerSecond paces one instance's removals of expired tasks
// when none is configured: above the 650 delegations a second one instance
// sustains, so that removal keeps up with them.
const DefaultRemovalsPerSecond = 1000

// PurgeMarkerTTL is how long the purge marker an expired task leaves in the
// bucket stays (a per-message TTL, nats-server ≥ 2.11): long enough for
// every instance's watcher to see the removal, short enough that markers do
// not pile up (at most removals per second × 10 minutes of them).
const PurgeMarkerTTL = 10 * time.Minute

// ErrChanged means the record was written (or removed) since the revision
// given: [Store.Expire] removed nothing.
var ErrChanged = errors.New("task: record changed since it was read")

// ErrRemoved means the task id is that of a task with an idempotency key
// that ended and was removed after its retention, less than another
// retention period ago: its id is not used again while the agent may still
// remember its message ids or send its events.
var ErrRemoved = errors.New("task: removed after its retention; its id is not reused")

// RemovedHeader marks the purge marker [Store.Expire] leaves as the
// tombstone of an idempotent task: its value is the removal time (RFC 3339).
const RemovedHeader = "A2ad-Removed"

// Expire removes the ended task id from the bucket, record and history,
// only if its stored value is still revision rev: a KV purge (a rollup of
// the key's subject) with an expected last revision, which JetStream
// refuses otherwise, and ErrChanged is returned. Of several instances
// expiring the same task at once, exactly one succeeds.
//
// The purge marker left behind expires after PurgeMarkerTTL where the
// server supports per-message TTLs (nats-server ≥ 2.11; an older one keeps
// it). With tombstone > 0 (a task with an idempotency key) the marker is
// the key's tombstone instead, kept for tombstone (at least a second):
// until then [Store.Create] refuses the id with ErrRemoved rather than
// reuse it. Errors other than ErrChanged wrap the NATS error; nothing is
// retried.
func (s *Store) Expire(ctx context.Context, id string, rev uint64, tombstone time.Duration) error {
	if !validKey(id) {
		return ErrNotFound
	}
	m := nats.NewMsg("$KV." + Bucket + "." + id)
	m.Header.Set("KV-Operation", "PURGE")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	var opts []jetstream.PublishOpt
	ttl := s.markerTTL
	if tombstone > 0 {
		m.Header.Set(RemovedHeader, time.Now().UTC().Format(time.RFC3339))
		ttl = max(tombstone, time.Second)
	}
	if s.markerTTL > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	s.cache.drop(id)
	_, err := s.js.PublishMsg(ctx, m, opts...)
	if wrongLastRevision(err) {
		return ErrChanged
	}
	if err != nil {
		return fmt.Errorf("task: expire %s: %w", id, err)
	}
	return nil
}

// wrongLastRevision reports whether err is JetStream refusing a write for
// an expected last revision that is not the subject's (10071; 10164 on
// replicated streams).
func wrongLastRevision(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Retention removes ended tasks (completed, failed, canceled, rejected)
// from the bucket once Keep has passed since they ended and their outbox
// is empty; open tasks, however old, are never removed.
//
// Every instance runs one. It keeps an index of the ended tasks its
// store's watcher reports ([Retention.Track], fed every record at load and
// each change after), ordered by when they ended, and removes the due ones
// one at a time, paced, with [Store.Expire] (a task with an idempotency key
// leaves a tombstone for another Keep): the bucket is never scanned, and a
// task that changed since the watcher reported it is left for its newer
// value. Each instance waits a random extra delay of up to a tenth of Keep
// (at most a minute), so that one instance usually removes a task before
// the others reach it; when instances do meet, compare-and-swap lets
// exactly one remove it.
type Retention struct {
	// Store is the bucket to remove from.
	Store *Store
	// Keep is how long an ended task is kept after it ended;
	// 0 means DefaultRetention, negative keeps ended tasks for ever (Run
	// returns at once).
	Keep time.Duration
	// PerSecond bounds this instance's removals per second (0:
	// DefaultRemovalsPerSecond).
	PerSecond float64
	// OnRemoved, if set, is called after each task this instance removed.
	OnRemoved func()
	// Log reports failed removals (rate-limited to one line a minute).
	Log *slog.Logger

	mu      sync.Mutex
	byID    map[string]*endedTask
	due     endedHeap
	wake    chan struct{}
	removed atomic.Uint64
	changed atomic.Uint64 // removals refused: the task changed or was removed since indexed
	offset  time.Duration // this instance's extra delay, drawn once
	once    sync.Once
}

// endedTask is one indexed ended task: about 125 bytes with its map entry,
// heap slot and a 28-byte id (BenchmarkRetentionIndex; docs/operations.md
// "Retention").
type endedTask struct {
	id   string
	at   int64 // when it ended, Unix nanoseconds
	rev  uint64
	i    int32 // index in the heap
	idem bool  // the task has an idempotency key
}

type endedHeap []*endedTask

func (h endedHeap) Len() int           { return len(h) }
func (h endedHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h endedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = int32(i); h[j].i = int32(j) }
func (h *endedHeap) Push(x any)        { e := x.(*endedTask); e.i = int32(len(*h)); *h = append(*h, e) }
func (h *endedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

func (r *Retention) init() {
	r.once.Do(func() {
		r.byID = map[string]*endedTask{}
		r.wake = make(chan struct{}, 1)
		if k := r.keep(); k > 0 {
			if spread := min(k/10, time.Minute); spread > 0 {
				r.offset = time.Duration(rand.Int64N(int64(spread)))
			}
		}
	})
}

func (r *Retention) keep() time.Duration {
	if r.Keep == 0 {
		return DefaultRetention
	}
	return r.Keep
}

// Track is the store's change callback ([NewStore]): it indexes ended
// records with an empty outbox and forgets deleted ones, any that is open
// and any whose outbox waits for delivery. It may be called
// before Run, and from one goroutine at a time (the store's watcher).
func (r *Retention) Track(sn Snapshot) {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.byID[sn.ID]
	// An ended task whose outbox is not empty (a CancelTask the agent has
	// yet to receive; bounded by broker.MaxCancelAttempts) waits for it.
	if sn.Deleted || !sn.State.Terminal() || !sn.OutboxAt.IsZero() {
		if ok {
			heap.Remove(&r.due, int(e.i))
			delete(r.byID, sn.ID)
		}
		return
	}
	// From the end, not the last write: an agent's late events (refused,
	// yet written) must not keep its ended tasks for ever.
	at := sn.EndedAt
	if at.IsZero() { // a record of an earlier version
		at = sn.UpdatedAt
	}
	if !ok {
		// A copy: the watcher's key is a slice of the message's subject.
		e = &endedTask{id: strings.Clone(sn.ID)}
		r.byID[e.id] = e
		e.at, e.rev, e.idem = at.UnixNano(), sn.Revision, sn.Idempotent
		heap.Push(&r.due, e)
	} else {
		e.at, e.rev, e.idem = at.UnixNano(), sn.Revision, sn.Idempotent
		heap.Fix(&r.due, int(e.i))
	}
	if e.i == 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Ended is the number of ended tasks indexed: kept in the bucket, as this
// instance's watcher sees it.
func (r *Retention) Ended() int {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// Due is the number of indexed ended tasks whose retention, and this
// instance's extra delay, have passed and that no instance has removed
// yet, as of now: the backlog of removals (the instance with the shortest
// delay removes tasks before the others reach them).
func (r *Retention) Due(now time.Time) int {
	r.init()
	if r.keep() < 0 {
		return 0
	}
	cut := now.Add(-r.keep() - r.offset).UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	// The heap's due part is a subtree at its root: walk only that.
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(r.due) || r.due[i].at > cut {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return n
}

// Removed is the number of tasks this instance removed.
func (r *Retention) Removed() uint64 { return r.removed.Load() }

// next takes the earliest indexed task if it is due at now; otherwise it
// returns how long until it is (or an hour when none is indexed).
func (r *Retention) next(now time.Time) (*endedTask, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.due) == 0 {
		return nil, time.Hour
	}
	e := r.due[0]
	dueAt := time.Unix(0, e.at).Add(r.keep() + r.offset)
	if wait := dueAt.Sub(now); wait > 0 {
		return nil, wait
	}
	heap.Pop(&r.due)
	delete(r.byID, e.id)
	return e, 0
}

// restore puts back e after a removal that failed, unless the watcher
// reported the task again meanwhile.
func (r *Retention) restore(e *endedTask) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[e.id]; !ok {
		r.byID[e.id] = e
		heap.Push(&r.due, e)
	}
}

// conflictPause is how long Run waits after finding a task changed or
// removed by another instance.
const conflictPause = 20 * time.Millisecond

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Run removes due tasks until ctx ends. It returns at once when Keep is
// negative.
func (r *Retention) Run(ctx context.Context) {
	r.init()
	if r.keep() < 0 {
		return
	}
	per := r.PerSecond
	if per <= 0 {
		per = DefaultRemovalsPerSecond
	}
	lim := rate.NewLimiter(rate.Limit(per), max(1, int(per/10)))
	var lastLog time.Time
	failures := 0
	for {
		e, wait := r.next(time.Now())
		if e == nil {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-r.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if err := lim.Wait(ctx); err != nil {
			return
		}
		var tombstone time.Duration
		if e.idem {
			tombstone = max(r.keep(), PurgeMarkerTTL)
		}
		err := r.Store.Expire(ctx, e.id, e.rev, tombstone)
		switch {
		case err == nil:
			failures = 0
			r.removed.Add(1)
			if r.OnRemoved != nil {
				r.OnRemoved()
			}
		case errors.Is(err, ErrChanged), errors.Is(err, ErrNotFound):
			// Written since (the watcher reports the newer value, which is
			// indexed anew if still ended) or removed by another instance;
			// or a key a2ad never issued. Another instance sweeping the same
			// backlog is ahead: a short pause lets the watcher drop what it
			// removed, so that the two split the backlog rather than race
			// through it together.
			r.changed.Add(1)
			pause(ctx, conflictPause)
		default:
			if ctx.Err() != nil {
				return
			}
			r.restore(e)
			failures++
			if r.Log != nil && time.Since(lastLog) >= time.Minute {
				lastLog = time.Now()
				r.Log.Warn("could not remove an ended task past its retention; retrying", "task", e.id, "err", err)
			}
			jsretry.Pause(ctx, min(failures, 10))
		}
	}
}
