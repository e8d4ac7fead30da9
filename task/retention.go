package task

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
// Every instance runs one, and it keeps nothing per ended task. It walks
// the bucket's stream forward, in stream order (batched direct gets of
// removalBatch values), removing each ended record it reaches whose time
// has come with [Store.Expire] at the revision it read, paced; it stops at
// the first ended record whose time has not come and waits for it. Stream
// order is write order, and the write that ends a task stamps its EndedAt,
// so ended records come due in about the order the walk meets them; what
// the walk passes and cannot remove (an open task, an outbox waiting for
// delivery) becomes removable only by a new write, which lands ahead of
// the walk. A task written again long after it ended (an agent's late
// event, refused yet recorded) comes due before its place in the stream:
// those the store's watcher reports ([Retention.Track]) in a small index
// of their own, of at most MaxLate tasks, removed on time; past that
// bound, the walk removes them when it reaches their last write, later by
// as long as they had ended before it.
//
// Each instance waits a random extra delay of up to a tenth of Keep (at
// most a minute), so that one instance usually removes a task before the
// others reach it; when instances do meet, compare-and-swap lets exactly
// one remove it. A restarted instance walks from the stream's start again,
// a tenth of Keep (at most a minute) after its store has loaded: serving
// and tracking come first.
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
	// MaxLate bounds the index of tasks written again after they ended
	// (0: DefaultMaxLate).
	MaxLate int
	// OnRemoved, if set, is called after each task this instance removed.
	OnRemoved func()
	// Log reports failed removals (rate-limited to one line a minute).
	Log *slog.Logger

	mu      sync.Mutex
	byID    map[string]*endedTask // the late index
	due     endedHeap
	wake    chan struct{}
	removed atomic.Uint64
	changed atomic.Uint64 // removals refused: the task changed or was removed since read
	skipped atomic.Uint64 // late-written tasks left to the walk: the late index was full
	behind  atomic.Int64  // when the oldest removal the walk knows is due came due, Unix ns; 0: none
	atEnd   atomic.Bool   // the walk has read the whole stream and waits for a new ended record
	offset  time.Duration // this instance's extra delay, drawn once
	once    sync.Once

	beforeExpire func(id string, rev uint64) // tests: called before each removal
	startIn      time.Duration               // tests: the start delay, when not 0
}

// DefaultMaxLate bounds the late index when Retention.MaxLate is 0: about
// 125 bytes each, half a megabyte in all.
const DefaultMaxLate = 4096

// FinalAfter is how long after its end a task's record is final to its
// agent: later events of the agent are dropped unwritten (DropTaskEnded),
// so that no agent keeps rewriting its ended tasks to put off their
// removal. It is also how long after its end a write of an ended task
// makes it late for retention: the walk meets a task written that much
// after its end that much later than its time.
const FinalAfter = time.Minute

// lateAfter: see FinalAfter.
const lateAfter = FinalAfter

// removalBatch is how many stored values one read of the walk takes.
const removalBatch = 256

// endedTask is one task of the late index: about 125 bytes with its map
// entry, heap slot and a 28-byte id (BenchmarkRetentionTrack).
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

func (r *Retention) maxLate() int {
	if r.MaxLate <= 0 {
		return DefaultMaxLate
	}
	return r.MaxLate
}

// removable reports whether sn is a record retention may remove once its
// time comes (ended, its outbox empty), and when it ended.
func removable(sn Snapshot) (time.Time, bool) {
	// An ended task whose outbox is not empty (a CancelTask the agent has
	// yet to receive; bounded by broker.MaxCancelAttempts) waits for it.
	if sn.Deleted || !sn.State.Terminal() || !sn.OutboxAt.IsZero() {
		return time.Time{}, false
	}
	// From the end, not the last write: an agent's late events (refused,
	// yet written) must not keep its ended tasks for ever.
	return endOf(sn), true
}

// endOf is when sn's task ended for retention: EndedAt (its last write in
// records of earlier versions), but never after the server stored the
// value — a writer's clock running ahead, or an absurd time, must not hold
// the walk back — and within the range of Unix nanoseconds (1970 to 2262).
func endOf(sn Snapshot) time.Time {
	at := endedAt(sn)
	if !sn.Stored.IsZero() && (at.IsZero() || at.After(sn.Stored)) {
		at = sn.Stored
	}
	if lo := time.Unix(0, 0); at.Before(lo) {
		return lo
	}
	if hi := time.Unix(0, math.MaxInt64-int64(24*time.Hour)); at.After(hi) {
		return hi
	}
	return at
}

// written is when sn was written: the server's time of storing it, or the
// record's UpdatedAt when not known.
func written(sn Snapshot) time.Time {
	if !sn.Stored.IsZero() {
		return sn.Stored
	}
	return sn.UpdatedAt
}

// Track is the store's change callback ([NewStore]): it keeps in the late
// index the ended records with an empty outbox stored more than a minute
// after they ended (the server's time of the write), at most MaxLate of
// them, and forgets any other value
// of a task it holds. It may be called before Run, and from one goroutine
// at a time (the store's watcher).
func (r *Retention) Track(sn Snapshot) {
	r.init()
	at, ok := removable(sn)
	late := ok && written(sn).Sub(at) > lateAfter
	r.mu.Lock()
	defer r.mu.Unlock()
	e, had := r.byID[sn.ID]
	switch {
	case !late && had:
		heap.Remove(&r.due, int(e.i))
		delete(r.byID, sn.ID)
		return
	case !late:
		if ok && r.atEnd.Load() {
			r.signal() // the walk waits at the stream's end: a record to reach
		}
		return
	case had:
		e.at, e.rev, e.idem = at.UnixNano(), sn.Revision, sn.Idempotent
		heap.Fix(&r.due, int(e.i))
	case len(r.byID) >= r.maxLate():
		r.skipped.Add(1)
		return
	default:
		// A copy: the watcher's key is a slice of the message's subject.
		e = &endedTask{id: strings.Clone(sn.ID), at: at.UnixNano(), rev: sn.Revision, idem: sn.Idempotent}
		r.byID[e.id] = e
		heap.Push(&r.due, e)
	}
	if e.i == 0 {
		r.signal()
	}
}

func (r *Retention) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Late is the number of tasks in the late index.
func (r *Retention) Late() int {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// Lag is how long the oldest removal this instance knows to be due has
// waited past its time (Keep after the task ended, plus this instance's
// extra delay) as of now; 0 when none is due. It grows while removal does
// not keep up with the tasks ending (retention.removals_per_second), or
// while removals fail.
func (r *Retention) Lag(now time.Time) time.Duration {
	r.init()
	if r.keep() < 0 {
		return 0
	}
	oldest := r.behind.Load()
	r.mu.Lock()
	if len(r.due) > 0 {
		if at := r.dueAt(r.due[0].at).UnixNano(); at <= now.UnixNano() && (oldest == 0 || at < oldest) {
			oldest = at
		}
	}
	r.mu.Unlock()
	if oldest == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, oldest)))
}

// Removed is the number of tasks this instance removed.
func (r *Retention) Removed() uint64 { return r.removed.Load() }

// Unindexed is the number of times a task written long after it ended was
// left to the walk because the late index was full: it is removed when
// the walk reaches its last write, later than its time.
func (r *Retention) Unindexed() uint64 { return r.skipped.Load() }

// dueAt is when a task that ended at (Unix ns) is this instance's to remove.
func (r *Retention) dueAt(at int64) time.Time {
	return time.Unix(0, at).Add(r.keep() + r.offset)
}

// nextLate takes the earliest task of the late index if it is due at now;
// otherwise it returns when it will be (the zero time when the index is
// empty).
func (r *Retention) nextLate(now time.Time) (*endedTask, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.due) == 0 {
		return nil, time.Time{}
	}
	e := r.due[0]
	if at := r.dueAt(e.at); at.After(now) {
		return nil, at
	}
	heap.Pop(&r.due)
	delete(r.byID, e.id)
	return e, time.Time{}
}

// forget drops id from the late index: the walk removed it.
func (r *Retention) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.byID[id]; ok {
		heap.Remove(&r.due, int(e.i))
		delete(r.byID, id)
	}
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

// staleAfter is how old a batch the walk read may be when its first
// record comes due before the walk reads it again: what another instance
// removed meanwhile is gone from a new read.
const staleAfter = time.Second

// Run removes due tasks until ctx ends, once the store has loaded. It
// returns at once when Keep is negative.
func (r *Retention) Run(ctx context.Context) {
	r.init()
	if r.keep() < 0 {
		return
	}
	select {
	case <-r.Store.Loaded():
	case <-ctx.Done():
		return
	}
	// A restarted instance serves and tracks first: the walk's first
	// reads go over the open tasks at the stream's start again.
	if pause(ctx, r.startDelay()); ctx.Err() != nil {
		return
	}
	per := r.PerSecond
	if per <= 0 {
		per = DefaultRemovalsPerSecond
	}
	lim := rate.NewLimiter(rate.Limit(per), max(1, int(per/10)))
	var (
		lastLog  time.Time
		failures int
		cursor   uint64 = 1 // the next stream sequence the walk reads
		batch    []storedValue
		readAt   time.Time
	)
	// remove expires id at rev; false when it failed for a reason other
	// than the task having changed or gone (then it is to be tried again).
	remove := func(id string, rev uint64, idem bool) bool {
		if err := lim.Wait(ctx); err != nil {
			return false
		}
		var tombstone time.Duration
		if idem {
			tombstone = max(r.keep(), PurgeMarkerTTL)
		}
		if r.beforeExpire != nil {
			r.beforeExpire(id, rev)
		}
		err := r.Store.Expire(ctx, id, rev, tombstone)
		switch {
		case err == nil:
			failures = 0
			r.removed.Add(1)
			if r.OnRemoved != nil {
				r.OnRemoved()
			}
			return true
		case errors.Is(err, ErrChanged), errors.Is(err, ErrNotFound):
			// Written since (its newer value lands ahead of the walk, or in
			// the late index) or removed by another instance; or a key
			// a2ad never issued. Another instance sweeping the same
			// backlog is ahead: a short pause lets the two split it rather
			// than race through it together.
			r.changed.Add(1)
			pause(ctx, conflictPause)
			return true
		default:
			if ctx.Err() != nil {
				return false
			}
			failures++
			if r.Log != nil && time.Since(lastLog) >= time.Minute {
				lastLog = time.Now()
				r.Log.Warn("could not remove an ended task past its retention; retrying", "task", id, "err", err)
			}
			jsretry.Pause(ctx, min(failures, 10))
			return false
		}
	}
	var full bool // the last read took a whole batch: more may follow
	for ctx.Err() == nil {
		now := time.Now()
		if e, _ := r.nextLate(now); e != nil {
			if !remove(e.id, e.rev, e.idem) {
				r.restore(e)
			}
			continue
		}
		if len(batch) == 0 {
			// Set before the read: a record stored after the read began
			// wakes the walk if the read ends the stream.
			r.atEnd.Store(true)
			var err error
			if batch, err = r.Store.readFrom(ctx, cursor, removalBatch); err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				if r.Log != nil && time.Since(lastLog) >= time.Minute {
					lastLog = time.Now()
					r.Log.Warn("could not read the task bucket to remove ended tasks; retrying", "err", err)
				}
				jsretry.Pause(ctx, min(failures, 10))
				continue
			}
			readAt, full = now, len(batch) == removalBatch
			if n := len(batch); n > 0 && !full {
				// A batch is cut short at the server's byte limit for one
				// reply too (64 MiB: about 75 of the largest records), not
				// only at the stream's end.
				last, err := r.Store.lastSeq(ctx)
				full = err != nil || last > batch[n-1].Seq
			}
		}
		// Skip what the walk cannot remove; stop at the first ended record.
		for len(batch) > 0 {
			v := batch[0]
			if _, ok := removable(v.Snap); v.Record && ok {
				break
			}
			cursor, batch = v.Seq+1, batch[1:]
		}
		var wait time.Time // zero: until woken
		if len(batch) > 0 {
			v := batch[0]
			at, _ := removable(v.Snap)
			due := r.dueAt(at.UnixNano())
			if !due.After(now) {
				if now.Sub(readAt) > staleAfter {
					batch = nil // read again: another instance may have removed it since
					continue
				}
				r.behind.Store(due.UnixNano())
				if remove(v.ID, v.Seq, v.Snap.Idempotent) {
					r.behind.Store(0) // the next one says whether it is due too
					r.forget(v.ID)
					cursor, batch = v.Seq+1, batch[1:]
				} else {
					batch = nil // read again after the failure
				}
				continue
			}
			wait = due // its time has not come; the batch is kept until then (a wake does not read it again)
			r.atEnd.Store(false)
		} else if full {
			continue // read on
		}
		// Otherwise the end of the stream: a new ended record wakes the walk.
		r.behind.Store(0)
		if _, at := r.nextLate(now); !at.IsZero() && (wait.IsZero() || at.Before(wait)) {
			wait = at
		}
		if !r.sleep(ctx, wait) {
			return
		}
	}
}

// startDelay is how long Run waits after the store loaded before it
// walks: a tenth of Keep, at most a minute.
func (r *Retention) startDelay() time.Duration {
	if r.startIn != 0 {
		return r.startIn
	}
	return min(r.keep()/10, time.Minute)
}

// sleep waits until the time until (forever when zero), a wake, or the end
// of ctx (false).
func (r *Retention) sleep(ctx context.Context, until time.Time) bool {
	var timer <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-r.wake:
	case <-timer:
	}
	return true
}
