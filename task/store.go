package task

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the JetStream KV bucket holding task records.
const Bucket = "a2ad_tasks"

// ErrNotFound means no task has that ID (or it belongs to another tenant:
// callers answer both alike).
var ErrNotFound = errors.New("task not found")

// ErrExists means a task with that ID already exists.
var ErrExists = errors.New("task already exists")

// ErrConflict means compare-and-swap kept losing to concurrent writers.
var ErrConflict = errors.New("task: too many concurrent updates")

// Store keeps records in a KV bucket. One KV watcher per process feeds
// waiters ([Store.Follow], [Store.Subscribe]) and the optional change
// callback: first every record in the bucket, then each change.
type Store struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's stream
	leader *leaderReader    // reads through the bucket's stream leader

	mu      sync.Mutex
	waiters map[string]map[*Follower]struct{}
	cache   revCache // the records this process last wrote, for the tracker's reads

	loaded chan struct{} // closed once the watcher delivered every stored record
	open   atomic.Int64  // records seen by the watcher that are not terminal
	ended  atomic.Int64  // ended records in the bucket, as the watcher counts them ([Store.Ended])

	idxMu   sync.RWMutex
	openIdx map[string]OpenTask // the watcher's non-terminal records, by id

	js jetstream.JetStream // for purges with headers of a2ad's ([Store.Expire])
	// markerTTL is how long the purge marker of an expired task stays
	// ([Store.Expire]); 0 when the server cannot expire markers (< 2.11).
	markerTTL time.Duration

	// RetryFor bounds how long an operation retries transient NATS errors
	// (a stream-leader election, a reconnect); default 20 s.
	RetryFor time.Duration

	// OnWrite, if set before the store is used, is called after each
	// record this process wrote (Create, Update) with what that write
	// added. It runs on the writer's goroutine, after the write and before
	// the writer's caller gets the record: it must not block (the audit
	// trail and the metrics queue or count, nothing more) and must not
	// modify r.
	OnWrite func(r *Record, w Write)
}

// Write is what one write of a record added to it: each write is reported
// once, by the process that made it, so several instances sharing the
// bucket never report a change twice.
type Write struct {
	// Created is true for the record's first write ([Store.Create]).
	Created bool
	// Transitions are the history entries the write appended, applied and
	// refused, in order.
	Transitions []Transition
	// Verdicts are the artifact verdicts the write added (at completion).
	Verdicts []artifact.Verdict
	// RefusedUnrecorded is the number of refused transitions the write
	// counted without recording them (beyond MaxRefusedHistory).
	RefusedUnrecorded int
}

// written reports a write of r to OnWrite; mark is r as it was read.
func (s *Store) written(r *Record, mark writeMark) {
	if s.OnWrite == nil {
		return
	}
	w := Write{RefusedUnrecorded: r.RefusedUnrecorded - mark.unrecorded}
	if mark.history <= len(r.History) {
		w.Transitions = r.History[mark.history:]
	}
	if mark.verdicts <= len(r.Verdicts) {
		w.Verdicts = r.Verdicts[mark.verdicts:]
	}
	s.OnWrite(r, w)
}

// writeMark is how much history, verdicts and uncounted refusals a record
// held when it was read for a write.
type writeMark struct{ history, verdicts, unrecorded int }

func markOf(r *Record) writeMark {
	return writeMark{history: len(r.History), verdicts: len(r.Verdicts), unrecorded: r.RefusedUnrecorded}
}

// Snapshot is what the watcher reports of one record.
type Snapshot struct {
	ID      string
	Tenant  string
	AgentID string
	Deleted bool
	// Bytes is the size of the stored record.
	Bytes int
	// CreatedAt is when the task was created; Idempotent whether it has an
	// idempotency key.
	CreatedAt  time.Time
	Idempotent bool
	State      State
	Deadline   time.Time
	// OutboxAt is when the record's outbox may be delivered again; zero
	// when the outbox is empty.
	OutboxAt time.Time
	// Revision is the KV revision of this value (of the deletion when
	// Deleted); UpdatedAt the record's last write, EndedAt when it reached
	// its terminal state ([Retention] counts an ended task's age from it,
	// else from UpdatedAt in records of earlier versions).
	Revision           uint64
	UpdatedAt, EndedAt time.Time
	// Binding, AgentTaskID and Follow are the record's (HTTP agents'
	// tasks: who follows them; Follow is nil when nobody does).
	Binding     string
	AgentTaskID string
	Follow      *FollowLease
	// EventSeq is the highest event sequence applied (Record.EventSeq).
	EventSeq int
	// Stored is when the NATS server stored this value (its clock, not
	// the writer's); zero when not known.
	Stored time.Time
}

// NewStore creates or binds the bucket (replicas ≥ 1) and starts its
// watcher, which runs until ctx ends. onChange (may be nil) is called from
// the watcher goroutine, in revision order, for every stored record and then
// for every change; it must not block for long.
func NewStore(ctx context.Context, js jetstream.JetStream, replicas int, onChange func(Snapshot)) (*Store, error) {
	var kv jetstream.KeyValue
	// Per-message TTLs (nats-server ≥ 2.11) let the purge markers of
	// expired tasks go too ([Store.Expire]); an older server keeps them.
	markerTTL := PurgeMarkerTTL
	// Instances starting together on a fresh cluster race to create the
	// bucket; the losers' requests time out while it is created.
	err := jsretry.Do(ctx, time.Minute, func() (err error) {
		cfg := jetstream.KeyValueConfig{
			Bucket:         Bucket,
			Description:    "a2ad delegated task records",
			History:        1,
			Replicas:       max(1, replicas),
			Storage:        jetstream.FileStorage,
			LimitMarkerTTL: markerTTL,
		}
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			markerTTL, cfg.LimitMarkerTTL = 0, 0
			kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("task: KV bucket %s: %w", Bucket, err)
	}
	var st jetstream.Stream
	err = jsretry.Do(ctx, time.Minute, func() (err error) { st, err = js.Stream(ctx, "KV_"+Bucket); return err })
	if err != nil {
		return nil, fmt.Errorf("task: KV bucket %s: %w", Bucket, err)
	}
	s := &Store{stream: st, leader: newLeaderReader(js, "KV_"+Bucket), waiters: map[string]map[*Follower]struct{}{}, loaded: make(chan struct{})}
	s.kv = writeThrough{KeyValue: kv, cache: &s.cache}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("task: watch %s: %w", Bucket, err)
	}
	s.js, s.markerTTL = js, markerTTL
	go s.fanOut(w, onChange)
	return s, nil
}

// Loaded is closed once the watcher has reported every record stored when
// it started: from then on every open task is tracked.
func (s *Store) Loaded() <-chan struct{} { return s.loaded }

// Open is the number of non-terminal records the watcher has seen.
func (s *Store) Open() int { return int(s.open.Load()) }

// Ended is the number of ended records in the bucket as the watcher counts
// them, without keeping any: every ended record it loads at start, then
// each task it sees end (an open record written terminal) or created
// ended, less each removal (a deletion of a record not open). A record an
// agent's late event writes again is not counted twice: it ended before
// that write. Never negative.
func (s *Store) Ended() int { return int(max(0, s.ended.Load())) }

func (s *Store) fanOut(w jetstream.KeyWatcher, onChange func(Snapshot)) {
	// Two stages, so that reading the records (summarize) and reporting
	// them overlap on two cores: at start the watcher reads every record in
	// the bucket, and each stage is about half of that. Order is kept: one
	// goroutine each, a channel between.
	type change struct {
		e      jetstream.KeyValueEntry // nil: every stored record was delivered
		snap   Snapshot
		record bool // a record a2ad wrote, or a deletion
	}
	changes := make(chan change, 256)
	go func() {
		defer close(changes)
		for e := range w.Updates() {
			if e == nil {
				changes <- change{}
				continue
			}
			c := change{e: e, snap: Snapshot{ID: e.Key(), Deleted: e.Operation() != jetstream.KeyValuePut, Bytes: len(e.Value()), Revision: e.Revision(), Stored: e.Created()}}
			c.record = c.snap.Deleted || summarize(e.Value(), &c.snap)
			changes <- c
		}
	}()
	loaded := false
	for c := range changes {
		e, snap := c.e, c.snap
		if e == nil {
			if !loaded {
				loaded = true
				close(s.loaded)
			}
			continue
		}
		// Waiters first, with the value itself: they need not read it again.
		seq := -1
		if c.record && !snap.Deleted {
			seq = snap.EventSeq
		}
		s.mu.Lock()
		for f := range s.waiters[e.Key()] {
			f.deliver(e, seq)
		}
		s.mu.Unlock()
		if !c.record {
			s.cache.observe(e.Key(), e.Revision(), nil, true)
			continue // not a record a2ad wrote; Get reports it
		}
		s.cache.observe(e.Key(), e.Revision(), e.Value(), snap.Deleted || snap.State.Terminal())
		s.index(snap, loaded)
		if onChange != nil {
			onChange(snap)
		}
	}
}

// Follower receives the changes of one task record as the store's watcher
// delivers them: a signal on C after each, and the newest value from
// [Follower.Latest]. Signals coalesce; Latest always has the newest value.
type Follower struct {
	c    chan struct{}
	mu   sync.Mutex
	rev  uint64 // of val; 0 before the first change
	val  []byte
	gone bool // the newest change deleted the record
	seq  int  // the newest value's EventSeq; -1 when deleted or not a record
	stop func()
}

// eventSeq is the highest event sequence the newest value delivered has
// applied (Record.EventSeq); false before any change, or when the record
// was deleted or the value is not a record.
func (f *Follower) eventSeq() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq, f.rev > 0 && f.seq >= 0
}

// C receives a signal after each change (at most one pending).
func (f *Follower) C() <-chan struct{} { return f.c }

// deliver records the watcher's entry e, with the record's event sequence
// (-1 when deleted or not a record), and signals.
func (f *Follower) deliver(e jetstream.KeyValueEntry, seq int) {
	f.mu.Lock()
	if e.Revision() > f.rev {
		f.rev, f.val, f.gone, f.seq = e.Revision(), e.Value(), e.Operation() != jetstream.KeyValuePut, seq
	}
	f.mu.Unlock()
	select {
	case f.c <- struct{}{}:
	default:
	}
}

// Latest returns the newest value the watcher delivered since [Store.Follow],
// decoded, and its revision; a revision of 0 (and a nil record) when none
// came yet. A deleted record is ErrNotFound (with its revision). The value
// is as current as the store's watcher: a read ([Store.Get]) made after a
// signal may find a newer one, never an older one.
func (f *Follower) Latest() (*Record, uint64, error) {
	f.mu.Lock()
	rev, val, gone := f.rev, f.val, f.gone
	f.mu.Unlock()
	switch {
	case rev == 0:
		return nil, 0, nil
	case gone:
		return nil, rev, ErrNotFound
	}
	r, err := decode(val)
	if err != nil {
		return nil, rev, fmt.Errorf("task: decode: %w", err)
	}
	return r, rev, nil
}

// LatestBytes is [Follower.Latest] undecoded, for a reader that needs only
// a few members: the newest value (nil when deleted or none came yet), its
// revision and whether the record was deleted. The bytes must not be
// modified.
func (f *Follower) LatestBytes() (value []byte, rev uint64, deleted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return nil, f.rev, true
	}
	return f.val, f.rev, false
}

// Follow starts following task id's changes; call Stop when done. Follow
// before reading the record, so that no change after the read is missed.
func (s *Store) Follow(id string) *Follower {
	f := &Follower{c: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.waiters[id] == nil {
		s.waiters[id] = map[*Follower]struct{}{}
	}
	s.waiters[id][f] = struct{}{}
	s.mu.Unlock()
	f.stop = func() {
		s.mu.Lock()
		delete(s.waiters[id], f)
		if len(s.waiters[id]) == 0 {
			delete(s.waiters, id)
		}
		s.mu.Unlock()
	}
	return f
}

// Stop ends the following.
func (f *Follower) Stop() { f.stop() }

// Subscribe returns a channel that receives a signal after each change of
// task id, and a function to stop. Signals coalesce: re-read after each
// (or use [Store.Follow], which has the changed value).
func (s *Store) Subscribe(id string) (<-chan struct{}, func()) {
	f := s.Follow(id)
	return f.c, f.stop
}

// Watch reports each record written from now on, decoded, in revision
// order, until ctx ends; the channel is closed then, or when the NATS
// connection closes. Deletions, and values that are not records, are not
// reported. Each call runs its own KV watcher (a JetStream ordered
// consumer), stopped when ctx ends: it is for a few long-lived readers,
// such as operators following tasks. To wait for one task use
// [Store.Subscribe], which shares the store's watcher.
func (s *Store) Watch(ctx context.Context) (<-chan *Record, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("task: watch %s: %w", Bucket, err)
	}
	out := make(chan *Record)
	go func() {
		defer close(out)
		defer func() {
			_ = w.Stop()
			// The client blocks delivering into Updates until it is
			// read; it closes Updates once the subscription is gone.
			for range w.Updates() {
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				r, err := decode(e.Value())
				if err != nil {
					continue
				}
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Create stores a new record; ErrExists if the ID is taken, ErrRemoved if
// it was an idempotent task's that retention removed, ErrRecordFull
// if it encodes to more than MaxRecordBytes, an error wrapping
// ErrUnavailable if the store has no room for it.
func (s *Store) Create(ctx context.Context, r *Record) error {
	b, err := encode(r)
	if err != nil {
		return err
	}
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrRecordFull, r.ID, len(b), MaxRecordBytes)
	}
	ambiguous := false
	err = s.retry(ctx, func() error {
		err := s.createKey(ctx, r.ID, b)
		if err != nil && transient(err) {
			ambiguous = true
		}
		return err
	})
	if errors.Is(err, ErrRemoved) {
		return ErrRemoved
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		if ambiguous && s.sameOrigin(ctx, r) {
			// An attempt whose answer was lost did store it (and it may
			// have changed since): this process wrote it.
			s.created(r)
			return nil
		}
		return ErrExists
	}
	if err != nil {
		return fmt.Errorf("task: create %s: %w", r.ID, unavailable(err))
	}
	s.created(r)
	return nil
}

// createKey stores b under id if the key holds nothing: no value, or the
// marker a deletion left ([Store.Delete]); never over a value
// (jetstream.ErrKeyExists) or the tombstone of a task removed after its
// retention (ErrRemoved). It is jetstream.KeyValue.Create but for the
// tombstone.
func (s *Store) createKey(ctx context.Context, id string, b []byte) error {
	for range 3 {
		_, err := s.kv.Update(ctx, id, b, 0)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		// What the key holds, as the stream leader has it: a replica a
		// little behind could miss a tombstone.
		var (
			seq uint64
			hdr nats.Header
		)
		gerr := s.retry(ctx, func() (err error) {
			_, seq, hdr, err = s.leader.last(ctx, "$KV."+Bucket+"."+id)
			return err
		})
		switch {
		case errors.Is(gerr, errNoMessage):
			continue // a marker that expired meanwhile: the key is empty
		case gerr != nil && transient(gerr) && ctx.Err() == nil:
			return fmt.Errorf("%w: create %s: %w", ErrNoLeader, id, gerr)
		case gerr != nil:
			return gerr
		case hdr.Get(RemovedHeader) != "":
			return ErrRemoved
		}
		if op := hdr.Get("KV-Operation"); op != "DEL" && op != "PURGE" {
			return err
		}
		_, err = s.kv.Update(ctx, id, b, seq)
		return err
	}
	return jetstream.ErrKeyExists
}

// created reports r's first write to OnWrite.
func (s *Store) created(r *Record) {
	if s.OnWrite != nil {
		s.OnWrite(r, Write{Created: true, Transitions: r.History, Verdicts: r.Verdicts, RefusedUnrecorded: r.RefusedUnrecorded})
	}
}

// sameOrigin reports whether the stored record with r's id is r itself,
// possibly changed since: same creation time, tenant, subject and brief.
func (s *Store) sameOrigin(ctx context.Context, r *Record) bool {
	got, _, err := s.Get(ctx, r.ID)
	return err == nil && got.CreatedAt.Equal(r.CreatedAt) && got.Tenant == r.Tenant &&
		got.Subject == r.Subject && got.BriefDigest == r.BriefDigest
}

// holds reports whether the stored value of id is exactly b.
func (s *Store) holds(ctx context.Context, id string, b []byte) bool {
	var e jetstream.KeyValueEntry
	err := s.retry(ctx, func() (err error) { e, err = s.kv.Get(ctx, id); return err })
	return err == nil && bytes.Equal(e.Value(), b)
}

// Get returns the record and its KV revision; ErrNotFound if absent, as
// the task bucket's stream leader answers (a replica's direct get that
// finds nothing is not trusted); an error wrapping ErrNoLeader if the
// leader did not answer within RetryFor.
func (s *Store) Get(ctx context.Context, id string) (*Record, uint64, error) {
	if ctx.Value(cachedReadKey{}) != nil {
		if rev, val, ok := s.cache.get(id); ok {
			if r, err := decode(val); err == nil {
				return r, rev, nil
			}
		}
	}
	var e jetstream.KeyValueEntry
	err := s.retry(ctx, func() (err error) { e, err = s.kv.Get(ctx, id); return err })
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		// KV reads are direct gets that any replica may serve; one a few
		// milliseconds behind would miss a task just created, on this
		// instance or another. "Not found" is decided by the stream
		// leader alone (leaderGet), or not at all (ErrNoLeader).
		var raw []byte
		raw, rev, lerr := s.leaderGet(ctx, id)
		if lerr != nil {
			return nil, 0, lerr
		}
		r, derr := decode(raw)
		if derr != nil {
			return nil, 0, fmt.Errorf("task: decode %s: %w", id, derr)
		}
		return r, rev, nil
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrInvalidKey) {
			return nil, 0, ErrNotFound
		}
		return nil, 0, fmt.Errorf("task: get %s: %w", id, err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("task: decode %s: %w", id, err)
	}
	return r, e.Revision(), nil
}

// Update reads the record, lets mutate change it, and writes it back with
// compare-and-swap on the revision read, retrying on a lost race with
// jittered backoff (up to 64 times, then ErrConflict). If mutate returns an error the record is not
// written and the error is returned, except that errors wrapping
// ErrIllegalTransition still write the record (the refusal is history) and
// are returned after the write. A write whose answer was lost (a timeout
// during a leader election) is recognised on the next read and not redone.
// A record that would encode to more than MaxRecordBytes is not written:
// ErrRecordFull. A store with no room for the write fails with an error
// wrapping ErrUnavailable, at once.
func (s *Store) Update(ctx context.Context, id string, mutate func(*Record) error) (*Record, error) {
	return s.update(ctx, id, mutate, MaxRecordBytes, nil, nil)
}

// MaxRecordBytes bounds the JSON encoding of a task record: a KV value is
// one NATS message (1 MiB with its headers, the server's max_payload).
// MaxAgentRecordBytes is what an agent's events may grow a record to; the
// difference keeps room for what a host or a2ad still has to write (an
// answer, a cancel, a deadline).
const (
	MaxRecordBytes      = 960 << 10
	MaxAgentRecordBytes = 896 << 10
)

// ErrRecordFull means a write would have grown a task record past
// MaxRecordBytes; nothing was written.
var ErrRecordFull = errors.New("task: record would exceed its byte budget")

// ErrUnavailable means JetStream has no room for the write (its store is
// full, or a limit is reached); nothing was written. Retrying helps only
// once room is made.
var ErrUnavailable = errors.New("task store has no room")

// unavailable wraps err with ErrUnavailable when it is JetStream refusing a
// write for lack of room.
func unavailable(err error) error {
	if jsretry.StorageFull(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// update is Update with a byte budget: when the mutated record encodes to
// more than budget bytes, the record is read again and overflow (if not
// nil) applies instead what must be written anyway (counters); without
// overflow, or when even that is over MaxRecordBytes, ErrRecordFull.
// wrote, if not nil, is told the size of what was written.
func (s *Store) update(ctx context.Context, id string, mutate func(*Record) error, budget int, overflow func(*Record) error, wrote func(bytes int)) (*Record, error) {
	var lastWrite []byte // bytes of a write whose outcome is unknown
	var lastRec *Record
	var lastErr error
	var lastMark writeMark
	over := false // mutate did not fit: overflow applies instead
	for attempt := range 64 {
		if attempt > 0 {
			// Jittered backoff: writers that lost a race spread out.
			time.Sleep(time.Duration(rand.Int64N(int64(attempt)*int64(200*time.Microsecond) + 1)))
		}
		if lastWrite != nil && s.holds(ctx, id, lastWrite) {
			s.written(lastRec, lastMark)
			if wrote != nil {
				wrote(len(lastWrite))
			}
			return lastRec, lastErr
		}
		lastWrite = nil
		r, rev, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		mark := markOf(r)
		fn := mutate
		if over {
			fn = overflow
		}
		merr := fn(r)
		if merr != nil && !errors.Is(merr, ErrIllegalTransition) {
			return r, merr
		}
		b, err := encode(r)
		if err != nil {
			return nil, err
		}
		if len(b) > budget && !over && overflow != nil {
			over = true // read it again (every read decodes anew) and apply overflow
			continue
		}
		if len(b) > MaxRecordBytes {
			return nil, fmt.Errorf("%w: %s would be %d bytes, more than %d", ErrRecordFull, id, len(b), MaxRecordBytes)
		}
		if _, err := s.kv.Update(ctx, id, b, rev); err != nil {
			switch {
			case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch):
				continue
			case transient(err) && ctx.Err() == nil:
				lastWrite, lastRec, lastErr, lastMark = b, r, merr, mark
				s.pause(ctx, attempt)
				continue
			}
			return nil, fmt.Errorf("task: update %s: %w", id, unavailable(err))
		}
		s.written(r, mark)
		if wrote != nil {
			wrote(len(b))
		}
		return r, merr
	}
	return nil, ErrConflict
}

func transient(err error) bool { return jsretry.Transient(err) }

// retry runs op until it succeeds, fails with a non-transient error, ctx
// ends, or RetryFor has passed.
func (s *Store) retry(ctx context.Context, op func() error) error {
	return jsretry.Do(ctx, cmp.Or(s.RetryFor, 20*time.Second), op)
}

// pause sleeps before retry number attempt.
func (s *Store) pause(ctx context.Context, attempt int) { jsretry.Pause(ctx, attempt) }

// Delete removes a record that never became a delegation (for example the
// agent was offline), so no half-created task remains. Its purge marker
// expires after PurgeMarkerTTL, as an expired task's does.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.retry(ctx, func() error { return s.kv.Purge(ctx, id, s.purgeTTL()) })
}

// purgeTTL is the option that gives a purge marker PurgeMarkerTTL, where
// the server supports per-message TTLs (nil, no option, where not).
func (s *Store) purgeTTL() jetstream.KVDeleteOpt {
	if s.markerTTL <= 0 {
		return nil
	}
	return jetstream.PurgeTTL(s.markerTTL)
}

// DeleteIf removes the record only if pred holds for it as stored, with
// compare-and-swap on its revision: ErrConflict if it changed meanwhile
// and pred no longer holds, ErrNotFound if it is gone.
func (s *Store) DeleteIf(ctx context.Context, id string, pred func(*Record) bool) error {
	for range 64 {
		r, rev, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		if !pred(r) {
			return ErrConflict
		}
		err = s.retry(ctx, func() error { return s.kv.Purge(ctx, id, jetstream.LastRevision(rev), s.purgeTTL()) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("task: delete %s: %w", id, err)
		}
	}
	return ErrConflict
}

// List returns every record in the bucket, newest first (by CreatedAt,
// then ID descending), each once. It holds them all in memory: a reader
// that keeps only some should use [Store.Scan]. Errors are Scan's.
func (s *Store) List(ctx context.Context) ([]*Record, error) {
	var out []*Record
	at := map[string]int{} // id → index in out
	err := s.Scan(ctx, func(r *Record) error {
		if i, ok := at[r.ID]; ok {
			out[i] = r // reported again: the later value is newer
			return nil
		}
		at[r.ID] = len(out)
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].ID > out[j].ID
		}
		return out[i].CreatedAt.After(out[j].CreatedAt)
	})
	return out, nil
}

// Scan calls fn with each record in the bucket, decoded, one at a time on
// the caller's goroutine, in KV revision order (the order of their last
// writes, not of creation). It reads the bucket's current values in one
// stream (a KV watcher, that is a JetStream ordered consumer, stopped when
// Scan returns), not one read per key, and holds no record itself: fn owns
// each record it gets. Deleted and purged keys are skipped.
//
// Scan is not a snapshot: a record written while it runs may be reported
// with its value before or after that write, or twice (the older value
// first), and one created, changed or deleted meanwhile may be missed.
// Callers that need each record once keep the later of two with one ID.
//
// Errors: fn's error, returned unchanged, stops the scan; a stored value
// that is not a record is "task: decode <id>: …" (as [Store.Get] reports
// it); the end of ctx, a watcher that could not start (transient NATS
// errors are retried for RetryFor) or one closed before the last record
// (the connection closed) are "task: scan: …" errors wrapping the cause.
func (s *Store) Scan(ctx context.Context, fn func(*Record) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("task: scan: %w", err)
	}
	var w jetstream.KeyWatcher
	err := s.retry(ctx, func() (err error) {
		w, err = s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		return err
	})
	if err != nil {
		return fmt.Errorf("task: scan: watch %s: %w", Bucket, err)
	}
	defer func() {
		_ = w.Stop()
		// The client blocks delivering into Updates until it is read;
		// it closes Updates once the subscription is gone.
		for range w.Updates() {
		}
	}()
	for {
		if err := ctx.Err(); err != nil { // before the next value, even one at hand
			return fmt.Errorf("task: scan: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("task: scan: %w", ctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return fmt.Errorf("task: scan: %w", errWatcherClosed)
			case e == nil:
				return nil // every value stored when the watcher started came
			case e.Operation() != jetstream.KeyValuePut:
				continue
			}
			r, err := decode(e.Value())
			if err != nil {
				return fmt.Errorf("task: decode %s: %w", e.Key(), err)
			}
			if err := fn(r); err != nil {
				return err
			}
		}
	}
}

// errWatcherClosed is a KV watcher that ended before its initial values did.
var errWatcherClosed = errors.New("KV watcher closed before the last stored value")

// validKey reports whether id can be a KV key of this store (the task ids
// a2ad issues are single NATS tokens).
func validKey(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// Ping checks that the bucket's stream answers (a JetStream stream info
// through its leader): what /readyz calls reachable.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.kv.Status(ctx); err != nil {
		return fmt.Errorf("task: KV bucket %s: %w", Bucket, err)
	}
	return nil
}

// revCache holds, per task, the value and revision this process last wrote
// (Create, Update), kept current by the store's watcher until the task ends:
// the tracker's read before its compare-and-swap ([Store.Update]) is then
// served from memory when the previous write was this process's own, as it
// is for each event after the first. Only reads whose context carries
// [withCachedReads] use it: a value another instance has just overwritten
// may still be here until the watcher delivers the newer one, so it serves
// only reads that a compare-and-swap guards. A lost race (a revision
// mismatch) drops the entry, so the retry reads the store.
type revCache struct {
	mu sync.Mutex
	m  map[string]revValue
}

type revValue struct {
	rev uint64
	val []byte
}

// maxCached bounds revCache; a new write past it evicts another task.
const maxCached = 4096

type cachedReadKey struct{}

// withCachedReads marks ctx: [Store.Get] may answer from the values this
// process last wrote (revCache).
func withCachedReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, cachedReadKey{}, true)
}

// WithCachedReads marks ctx for [Store.Update]: its read before the
// compare-and-swap may be served from the value this process last wrote
// or its watcher last saw (no KV read), which the swap guards — a stale
// value loses the swap, and the retry reads the store. Only for an Update
// whose mutate decides on what the record says at the swap; never for a
// plain [Store.Get] whose answer a caller acts on unguarded.
func WithCachedReads(ctx context.Context) context.Context { return withCachedReads(ctx) }

func (c *revCache) get(id string) (uint64, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[id]
	return v.rev, v.val, ok
}

// wrote records a write of this process: value val at revision rev.
func (c *revCache) wrote(id string, rev uint64, val []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]revValue{}
	}
	old, ok := c.m[id]
	if ok && old.rev >= rev {
		return
	}
	if !ok && len(c.m) >= maxCached {
		for k := range c.m { // an arbitrary one (map order is random): recent writes are read next
			delete(c.m, k)
			break
		}
	}
	c.m[id] = revValue{rev: rev, val: val}
}

// drop forgets id (a write failed or its outcome is unknown).
func (c *revCache) drop(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// observe applies a value the watcher delivered to a cached task: a newer
// one replaces it; gone (deleted, ended, or not a record) forgets it.
func (c *revCache) observe(id string, rev uint64, val []byte, gone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.m[id]
	switch {
	case !ok || rev < old.rev:
	case gone:
		delete(c.m, id)
	case rev > old.rev:
		c.m[id] = revValue{rev: rev, val: val}
	}
}

// writeThrough is the bucket as the store uses it: each successful create
// or compare-and-swap of this process goes into the cache; any other write,
// and every failed one, drops the key from it.
type writeThrough struct {
	jetstream.KeyValue
	cache *revCache
}

func (w writeThrough) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := w.KeyValue.Create(ctx, key, value, opts...)
	w.settled(key, rev, value, err)
	return rev, err
}

func (w writeThrough) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := w.KeyValue.Update(ctx, key, value, last)
	w.settled(key, rev, value, err)
	return rev, err
}

func (w writeThrough) settled(key string, rev uint64, value []byte, err error) {
	if err != nil {
		w.cache.drop(key)
		return
	}
	w.cache.wrote(key, rev, value)
}

func (w writeThrough) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	w.cache.drop(key)
	return w.KeyValue.Put(ctx, key, value)
}

func (w writeThrough) PutString(ctx context.Context, key string, value string) (uint64, error) {
	w.cache.drop(key)
	return w.KeyValue.PutString(ctx, key, value)
}

func (w writeThrough) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	w.cache.drop(key)
	return w.KeyValue.Delete(ctx, key, opts...)
}

func (w writeThrough) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	w.cache.drop(key)
	return w.KeyValue.Purge(ctx, key, opts...)
}
