package httpbind

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/lograte"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"
)

// DefaultLease is how long a follow lease lasts unless renewed
// ([Follower.Lease] zero); the owner renews it every third of it.
const DefaultLease = 15 * time.Second

// Follow modes, as the lease records them (task.FollowLease.Mode).
const (
	ModeStream = "stream" // SubscribeToTask (A2A 1.0 §3.1.6)
	ModePoll   = "poll"   // GetTask (A2A 1.0 §3.1.3)
	pushSuffix = "+push"  // push notifications registered too (A2A 1.0 §4.3)
)

// Follower follows the open tasks of HTTP agents: for each, exactly one
// a2ad instance at a time, under the lease in the task record
// (task.Record.Follow), observes the agent's task (SubscribeToTask,
// GetTask polls, push notifications) and publishes every change on the
// agent's JetStream events stream, where the tracker applies it
// (docs/http-binding.md).
//
// A task is followed while its record has a Binding, is not terminal, has
// the agent's task id (before that the broker's outbox owns it) and no
// other instance holds a live lease on it. Following ends when the STORE
// shows the task terminal (the tracker applied the end): the lease is then
// released. When Run's context ends, leases are not released: a stop
// looks like a crash, and another instance takes over once Until passed.
//
// Set the fields before Run; feed it with Track from the task store's
// change callback.
type Follower struct {
	// Binding gives the a2a-go client of each agent.
	Binding *Binding
	// Store holds the task records and their leases.
	Store *task.Store
	// JS publishes the observed changes (with acknowledgement).
	JS jetstream.JetStream
	// Owner is this instance's id, written in the leases it takes
	// (random per process).
	Owner string
	// Lease is the lease length; zero means DefaultLease.
	Lease time.Duration
	// PushBaseURL is the public base URL (scheme://host[:port], no
	// trailing slash) under which this daemon serves [Follower.PushHandler]
	// at /a2a/push/; "" registers no push notifications.
	PushBaseURL string
	// PushSecret keys the per-task push token ([PushToken]); needed when
	// PushBaseURL is set, and the same on every instance that serves the
	// webhook (a push may reach any of them); 32 random bytes or more.
	// Without it the webhook answers 404 to everything.
	PushSecret []byte
	Log        *slog.Logger

	// Poll bounds; zero means the defaults (tests shorten them).
	PollMin, PollMax, PushPoll time.Duration
	// BytesPerSecond bounds, per agent, the bytes of observed changes this
	// instance reads and publishes (a token bucket, golang.org/x/time/rate,
	// burst twice MaxEventBytes): an agent streaming large events as fast
	// as it can is read no faster (its stream waits, in TCP), so its
	// decoding and publishing cannot take the CPU other agents' tasks
	// need (docs/isolation.md). Zero means DefaultObservedBytesPerSecond.
	BytesPerSecond float64

	once    sync.Once
	mu      sync.Mutex
	pending map[string]task.Snapshot // handed over by Track, read by Run
	wake    chan struct{}

	following sync.Map // task id → *following, the tasks this instance follows now

	gate lograte.Gate // bounds log lines about what agents send

	limMu    sync.Mutex
	limiters map[string]*rate.Limiter // per agent: BytesPerSecond
}

// DefaultObservedBytesPerSecond is Follower.BytesPerSecond's default:
// 1 MiB a second per agent: one of the largest events.
const DefaultObservedBytesPerSecond = 1 << 20

// limiter is agentID's bucket of observed bytes.
func (f *Follower) limiter(agentID string) *rate.Limiter {
	f.limMu.Lock()
	defer f.limMu.Unlock()
	if f.limiters == nil {
		f.limiters = map[string]*rate.Limiter{}
	}
	l, ok := f.limiters[agentID]
	if !ok {
		l = rate.NewLimiter(rate.Limit(cmp.Or(f.BytesPerSecond, DefaultObservedBytesPerSecond)), 2*MaxEventBytes)
		f.limiters[agentID] = l
	}
	return l
}

// Default polling and stream backoffs (docs/http-binding.md §6).
const (
	DefaultPollMin  = 500 * time.Millisecond
	DefaultPollMax  = 5 * time.Second
	DefaultPushPoll = 30 * time.Second
	streamRetryMin  = 200 * time.Millisecond
	streamRetryMax  = 5 * time.Second
	// retryFollow is the pause before a task whose following ended
	// without its end in the store is looked at again.
	retryFollow = 2 * time.Second
	// followCallTimeout bounds one GetTask or CreateTaskPushConfig call.
	followCallTimeout = 5 * time.Second
)

func (f *Follower) init() {
	f.once.Do(func() {
		f.pending = map[string]task.Snapshot{}
		f.wake = make(chan struct{}, 1)
		if f.Log == nil {
			f.Log = slog.New(slog.DiscardHandler)
		}
	})
}

func (f *Follower) lease() time.Duration { return cmp.Or(f.Lease, DefaultLease) }

// Track is the task store's change callback (task.NewStore's onChange):
// it hands sn to Run and never blocks. It may be called before Run.
func (f *Follower) Track(sn task.Snapshot) {
	f.init()
	if sn.Binding == "" && !sn.Deleted {
		return
	}
	f.mu.Lock()
	f.pending[sn.ID] = sn
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// followable reports whether sn is a task this instance should follow now,
// and, when another instance holds a live lease, when to look again.
func (f *Follower) followable(sn task.Snapshot, now time.Time) (ok bool, lookAt time.Time) {
	if sn.Deleted || sn.Binding == "" || sn.State.Terminal() || sn.AgentTaskID == "" {
		return false, time.Time{}
	}
	if l := sn.Follow; l != nil && l.Owner != f.Owner && l.Until.After(now) {
		// Its owner renews before Until; if it died, look then.
		return false, l.Until.Add(10 * time.Millisecond)
	}
	return true, time.Time{}
}

// Run follows tasks until ctx ends and returns once every goroutine it
// started has ended. It returns an error only for a Follower set up
// wrongly.
func (f *Follower) Run(ctx context.Context) error {
	f.init()
	if f.Binding == nil || f.Store == nil || f.JS == nil || f.Owner == "" {
		return errors.New("httpbind: Follower needs Binding, Store, JS and Owner")
	}
	if f.PushBaseURL != "" && len(f.PushSecret) == 0 {
		return errors.New("httpbind: Follower with a PushBaseURL needs a PushSecret")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	known := map[string]task.Snapshot{} // newest snapshot of each open HTTP task
	looks := map[string]time.Time{}     // when to look again at a task leased elsewhere
	running := map[string]context.CancelFunc{}
	ended := make(chan string, 16)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	consider := func(id string, now time.Time) {
		delete(looks, id)
		sn, ok := known[id]
		if !ok || running[id] != nil {
			return
		}
		follow, at := f.followable(sn, now)
		switch {
		case follow:
			fctx, cancel := context.WithCancel(ctx)
			running[id] = cancel
			wg.Go(func() {
				defer func() {
					select {
					case ended <- id:
					case <-ctx.Done():
					}
				}()
				f.follow(fctx, sn)
			})
		case !at.IsZero():
			looks[id] = at
		case sn.Deleted || sn.State.Terminal():
			delete(known, id)
		}
	}
	for {
		next := time.Time{}
		for _, at := range looks {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			for _, cancel := range running {
				cancel()
			}
			return nil // the deferred Wait; a goroutine's report of its end gives way to ctx
		case <-f.wake:
			f.mu.Lock()
			batch := f.pending
			f.pending = map[string]task.Snapshot{}
			f.mu.Unlock()
			now := time.Now()
			for id, sn := range batch {
				known[id] = sn
				consider(id, now)
			}
		case id := <-ended:
			if cancel := running[id]; cancel != nil {
				cancel()
			}
			delete(running, id)
			// Looked at again on the record's next write, or after a
			// pause: a stale snapshot must not restart it in a loop.
			looks[id] = time.Now().Add(retryFollow)
		case <-timer.C:
			now := time.Now()
			for id, at := range looks {
				if !at.After(now) {
					consider(id, now)
				}
			}
		}
	}
}

// errLeaseHeld: another instance holds a live lease on the task.
// errNotFollowable: the record no longer needs following here.
var (
	errLeaseHeld     = errors.New("httpbind: follow lease held by another instance")
	errNotFollowable = errors.New("httpbind: task not followed")
)

// take takes or renews the lease on task id for mode; it returns the
// record as written.
func (f *Follower) take(ctx context.Context, id, mode string) (*task.Record, error) {
	return f.Store.Update(ctx, id, func(r *task.Record) error {
		now := time.Now().UTC()
		if !r.HTTP() || r.State.Terminal() || r.AgentTaskID == "" {
			return errNotFollowable
		}
		if l := r.Follow; l != nil && l.Owner != f.Owner && l.Until.After(now) {
			return fmt.Errorf("%w (%s until %s)", errLeaseHeld, l.Owner, l.Until.Format(time.RFC3339Nano))
		}
		if l := r.Follow; l != nil && l.Owner != f.Owner {
			f.Log.Info("following an HTTP agent's task whose follower's lease lapsed", "task", r.ID, "agent", r.AgentID,
				"previous_owner", l.Owner, "lapsed", now.Sub(l.Until).Round(time.Millisecond))
		}
		r.Follow = &task.FollowLease{Owner: f.Owner, Until: now.Add(f.lease()), Mode: mode}
		return nil
	})
}

// release drops this instance's lease on an ended task.
func (f *Follower) release(ctx context.Context, id string) {
	_, err := f.Store.Update(ctx, id, func(r *task.Record) error {
		if r.Follow == nil || r.Follow.Owner != f.Owner {
			return errNotFollowable
		}
		r.Follow = nil
		return nil
	})
	if err != nil && !errors.Is(err, errNotFollowable) && !errors.Is(err, task.ErrNotFound) {
		f.Log.Debug("follow lease not released; it lapses", "task", id, "err", err)
	}
}

// following is one task this instance follows.
type following struct {
	f         *Follower
	id        string
	agentID   string
	agentTask string
	// poke asks the observer to GetTask now (a push arrived).
	poke chan struct{}

	mu       sync.Mutex
	lastSnap []byte // the last Task snapshot published, to skip repeats
	// ended is set once a terminal state is published: nothing more is,
	// and the lease is held until the store shows the end.
	ended atomic.Bool
	// mode is the lease's mode now (a refused stream turns it to poll).
	mode atomic.Value
}

// follow follows one task for as long as this instance holds its lease
// and the store shows it open.
func (f *Follower) follow(ctx context.Context, sn task.Snapshot) {
	_, target, err := f.Binding.Client(ctx, sn.AgentID)
	if err != nil {
		if ok, held := f.gate.Allow("client/"+sn.AgentID, time.Now()); ok {
			f.Log.Warn("HTTP agent's task not followed: no client", "agent", sn.AgentID, "task", sn.ID, "err", err, "similar_not_logged", held)
		}
		// Looked at again after retryFollow, at the next write of the
		// record, or by another instance.
		return
	}
	mode := ModePoll
	if target.Streaming {
		mode = ModeStream
	}
	push := f.PushBaseURL != "" && target.PushNotifications
	if push {
		mode += pushSuffix
	}
	r, err := f.take(ctx, sn.ID, mode)
	if err != nil {
		if !errors.Is(err, errLeaseHeld) && !errors.Is(err, errNotFollowable) && ctx.Err() == nil {
			f.Log.Warn("follow lease not taken", "task", sn.ID, "err", err)
		}
		return
	}
	fl := &following{f: f, id: r.ID, agentID: r.AgentID, agentTask: r.AgentTaskID, poke: make(chan struct{}, 1)}
	fl.mode.Store(mode)
	f.following.Store(r.ID, fl)
	defer f.following.CompareAndDelete(r.ID, fl)

	octx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stop()
		// Every request of the following carries the task's trace, as
		// the broker's do (docs/http-binding.md §3).
		fl.observe(WithTraceparent(octx, r.TraceParent), target, push)
	})
	f.hold(octx, stop, r, fl)
	stop()
	wg.Wait()
}

// hold renews the lease every third of its length until the store shows
// the task ended (then it releases the lease), the lease is lost, or ctx
// ends; then it calls stop.
func (f *Follower) hold(ctx context.Context, stop func(), r *task.Record, fl *following) {
	defer stop()
	w := f.Store.Follow(r.ID)
	defer w.Stop()
	until := r.Follow.Until
	renew := time.NewTicker(f.lease() / 3)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.C():
			cur, _, err := w.Latest()
			switch {
			case errors.Is(err, task.ErrNotFound):
				return
			case err != nil || cur == nil:
				continue
			case cur.State.Terminal():
				f.release(context.WithoutCancel(ctx), r.ID)
				return
			case cur.Follow != nil && cur.Follow.Owner != f.Owner:
				return // lapsed and taken over
			}
		case <-renew.C:
			got, err := f.take(ctx, r.ID, fl.mode.Load().(string))
			switch {
			case err == nil:
				until = got.Follow.Until
			case errors.Is(err, errNotFollowable):
				cur, _, gerr := f.Store.Get(ctx, r.ID)
				if gerr == nil && cur.State.Terminal() {
					f.release(context.WithoutCancel(ctx), r.ID)
				}
				return
			case errors.Is(err, errLeaseHeld):
				return
			case time.Now().After(until):
				f.Log.Warn("follow lease lapsed: store unreachable", "task", r.ID, "err", err)
				return
			}
		}
	}
}
