package task

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"
)

// Each agent's events go to a JetStream stream of its own,
// EventsStreamPrefix + agent id, capturing a2a.events.<agentId>.>, with a
// durable consumer EventsConsumer that every a2ad instance shares
// (docs/isolation.md). Apart, one agent's events can never wait behind
// another's in a consumer's window, its message ids can never suppress
// another's events (JetStream deduplicates Nats-Msg-Id per stream), and it
// can fill only its own stream's limits ([EventLimits]).
const (
	EventsStreamPrefix = "A2AD_EVENTS_"
	EventsConsumer     = "a2ad-tracker"
)

// LegacyEventsStream is the stream that captured every agent's events
// (a2a.events.>) before each agent had its own. [Tracker.EnsureStreams]
// retires it: its subjects are moved off a2a.events.> so that the agents'
// streams can take them, the events it still holds are applied, and it is
// deleted once empty.
const LegacyEventsStream = "A2AD_EVENTS"

// retiredSubject is what the legacy stream captures once retired: nothing
// publishes there.
const retiredSubject = "a2ad.retired.events"

// EventsStream is the name of agentID's events stream.
func EventsStream(agentID string) string { return EventsStreamPrefix + agentID }

// EventLimits bound one agent's events (docs/isolation.md): its stream's
// limits, over which JetStream refuses the agent's publishes (the agent
// retries), and the rate at which a2ad applies them.
type EventLimits struct {
	// PerSecond and Burst are the token bucket (golang.org/x/time/rate)
	// of the agent's events a2ad applies; the others wait in its stream.
	// Zero: DefaultEventLimits.
	PerSecond float64
	Burst     int
	// MaxEventBytes is the largest event, body and headers, in bytes (the
	// stream's max_msg_size).
	MaxEventBytes int32
	// MaxPending and MaxPendingBytes bound the events waiting in the
	// stream (its max_msgs and max_bytes, discard new); the bytes are
	// reserved in the JetStream store when the stream is created.
	MaxPending      int64
	MaxPendingBytes int64
	// RecordBytesPerSecond bounds the bytes of task records a2ad writes
	// a second applying the agent's events: a small event can make a2ad
	// rewrite a large record (pending artifacts), so events alone do not
	// bound the work. Beyond it, the agent's next events wait.
	RecordBytesPerSecond int64
	// MaxOpenRecordBytes bounds the bytes of the agent's open tasks'
	// records, as far as its events grew them past 8 KiB each: beyond,
	// an event that would grow one further is not applied, only counted
	// (record_full). The tasks bucket is every tenant's: one agent must
	// not fill it.
	MaxOpenRecordBytes int64
}

// DefaultEventLimits fill the zero fields of an agent's EventLimits.
var DefaultEventLimits = EventLimits{PerSecond: 1000, Burst: 2000, MaxEventBytes: 1 << 20, MaxPending: 10_000, MaxPendingBytes: 64 << 20,
	RecordBytesPerSecond: 16 << 20, MaxOpenRecordBytes: 128 << 20}

func (l EventLimits) withDefaults() EventLimits {
	d := DefaultEventLimits
	l.PerSecond, l.Burst = cmp.Or(l.PerSecond, d.PerSecond), cmp.Or(l.Burst, d.Burst)
	l.MaxEventBytes, l.MaxPending, l.MaxPendingBytes = cmp.Or(l.MaxEventBytes, d.MaxEventBytes),
		cmp.Or(l.MaxPending, d.MaxPending), cmp.Or(l.MaxPendingBytes, d.MaxPendingBytes)
	l.RecordBytesPerSecond, l.MaxOpenRecordBytes = cmp.Or(l.RecordBytesPerSecond, d.RecordBytesPerSecond), cmp.Or(l.MaxOpenRecordBytes, d.MaxOpenRecordBytes)
	return l
}

// bigRecord is the size past which the bytes of an open record count
// against its agent's MaxOpenRecordBytes; an honest record is a few KiB.
const bigRecord = 8 << 10

// recordBytes keeps, from the store's watcher ([Tracker.Track]), the open
// records past bigRecord and their agents' totals.
type recordBytes struct {
	mu     sync.Mutex
	tasks  map[string]sizedRecord
	totals map[string]int64
}

type sizedRecord struct {
	agent string
	bytes int64
}

// Track is the task store's change callback for the tracker: it keeps the
// size of each agent's open records (see EventLimits.MaxOpenRecordBytes).
// It may be called before Run.
func (t *Tracker) Track(sn Snapshot) {
	b := &t.records
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tasks == nil {
		b.tasks, b.totals = map[string]sizedRecord{}, map[string]int64{}
	}
	if old, ok := b.tasks[sn.ID]; ok {
		if b.totals[old.agent] -= old.bytes; b.totals[old.agent] <= 0 {
			delete(b.totals, old.agent)
		}
		delete(b.tasks, sn.ID)
	}
	if !sn.Deleted && !sn.State.Terminal() && sn.Bytes > bigRecord {
		b.tasks[sn.ID] = sizedRecord{agent: sn.AgentID, bytes: int64(sn.Bytes)}
		b.totals[sn.AgentID] += int64(sn.Bytes)
	}
}

// recordBudget is what the record of task taskID may grow to with
// agentID's next event: MaxAgentRecordBytes, less what its agent's other
// open records take past MaxOpenRecordBytes; never less than bigRecord.
func (t *Tracker) recordBudget(agentID, taskID string) int {
	quota := t.Agents[agentID].withDefaults().MaxOpenRecordBytes
	b := &t.records
	b.mu.Lock()
	others := b.totals[agentID] - b.tasks[taskID].bytes
	b.mu.Unlock()
	return int(max(min(int64(MaxAgentRecordBytes), quota-others), bigRecord))
}

// charge counts n bytes of records written for agentID's event against
// its RecordBytesPerSecond; its next events wait while it is over.
func (t *Tracker) charge(agentID string, n int) {
	if lim := t.writes[agentID]; lim != nil {
		lim.ReserveN(time.Now(), min(n, lim.Burst()))
	}
}

// eventsStreamConfig is agentID's events stream: work-queue retention (an
// event stays until an instance applied it), discard new at the limits,
// deduplication on Nats-Msg-Id within 2 minutes, 7 days maximum age.
func eventsStreamConfig(agentID string, l EventLimits, replicas int) jetstream.StreamConfig {
	l = l.withDefaults()
	return jetstream.StreamConfig{
		Name:        EventsStream(agentID),
		Description: "A2A events of agent " + agentID + ", kept until an a2ad instance applied them",
		Subjects:    []string{natsbind.EventsSubject(agentID, ">")},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		Storage:     jetstream.FileStorage,
		Replicas:    max(1, replicas),
		Duplicates:  2 * time.Minute,
		MaxAge:      7 * 24 * time.Hour,
		MaxMsgSize:  l.MaxEventBytes,
		MaxMsgs:     l.MaxPending,
		MaxBytes:    l.MaxPendingBytes,
	}
}

// EnsureStreams creates or updates the events stream of every agent in
// t.Agents, first retiring [LegacyEventsStream], whose subjects would
// overlap theirs. Errors name the agent; a store that cannot reserve an
// agent's MaxPendingBytes is refused by JetStream ("insufficient storage
// resources").
func (t *Tracker) EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	_, err := t.ensureStreams(ctx, js)
	return err
}

// ensureStreams is EnsureStreams; it returns the legacy stream while it
// still holds events to apply.
func (t *Tracker) ensureStreams(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	legacy, err := retireLegacy(ctx, js)
	if err != nil {
		return nil, err
	}
	t.warnUnserved(ctx, js)
	for _, id := range slices.Sorted(maps.Keys(t.Agents)) {
		cfg := eventsStreamConfig(id, t.Agents[id], t.Replicas)
		err := jsretry.Do(ctx, time.Minute, func() error {
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("task: events stream %s of agent %s (max_pending_bytes %d): %w", cfg.Name, id, cfg.MaxBytes, err)
		}
	}
	return legacy, nil
}

// warnUnserved logs the events streams of agents not in t.Agents: their
// events are not applied by this instance, and their max_bytes stay
// reserved in the store. An agent taken out of the configuration leaves
// its stream behind, since another instance may still serve it.
func (t *Tracker) warnUnserved(ctx context.Context, js jetstream.JetStream) {
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		id, ok := strings.CutPrefix(name, EventsStreamPrefix)
		if !ok {
			continue
		}
		if _, served := t.Agents[id]; !served {
			t.Log.Warn("events stream of an agent this a2ad is not configured for: its events are not applied here and its max_pending_bytes stay reserved; "+
				"if no a2ad serves the agent any more, delete the stream (nats stream rm, as a2ad's NATS user)", "stream", name, "agent", id)
		}
	}
}

// retireLegacy moves the legacy stream off a2a.events.> and returns it if
// it still holds events to apply; an empty one is deleted (nil).
func retireLegacy(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := jsretry.Do(ctx, time.Minute, func() (err error) { st, err = js.Stream(ctx, LegacyEventsStream); return err })
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("task: legacy events stream %s: %w", LegacyEventsStream, err)
	}
	info := st.CachedInfo()
	if info.State.Msgs == 0 {
		err := jsretry.Do(ctx, time.Minute, func() error { return js.DeleteStream(ctx, LegacyEventsStream) })
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("task: delete the empty legacy events stream %s: %w", LegacyEventsStream, err)
		}
		return nil, nil
	}
	if !slices.Equal(info.Config.Subjects, []string{retiredSubject}) {
		cfg := info.Config
		cfg.Subjects = []string{retiredSubject}
		err := jsretry.Do(ctx, time.Minute, func() (err error) { st, err = js.UpdateStream(ctx, cfg); return err })
		if err != nil {
			return nil, fmt.Errorf("task: retire the legacy events stream %s: %w", LegacyEventsStream, err)
		}
	}
	return st, nil
}

// Consumer settings of every events stream. A delivery that is never
// settled (the instance died) comes back after ackWait; maxAckPending is
// the agent's own window; maxDeliver bounds the deliveries of one event,
// and the tracker terminates an event at its last one (see handle).
const (
	ackWait       = 10 * time.Second
	maxAckPending = 1024
	maxDeliver    = 100
)

// Run applies the events of every agent in t.Agents, each from its own
// stream and consumer, at its own rate, on its own workers, until ctx
// ends; then it waits for the events being applied. It ensures the
// streams first ([Tracker.EnsureStreams]) and applies what the legacy
// stream still holds, deleting it once it is empty.
func (t *Tracker) Run(ctx context.Context, js jetstream.JetStream) error {
	legacy, err := t.ensureStreams(ctx, js)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	t.writes = map[string]*rate.Limiter{}
	for id, l := range t.Agents {
		l = l.withDefaults()
		// A burst of two whole records: one event's write is never more.
		t.writes[id] = rate.NewLimiter(rate.Limit(l.RecordBytesPerSecond), int(max(l.RecordBytesPerSecond, 2*MaxRecordBytes)))
	}
	for id, l := range t.Agents {
		l = l.withDefaults()
		lim := rate.NewLimiter(rate.Limit(l.PerSecond), l.Burst)
		writes := t.writes[id]
		wg.Go(func() { t.consume(ctx, js, EventsStream(id), lim, writes, l.Burst) })
	}
	if legacy != nil {
		lctx, done := context.WithCancel(ctx)
		wg.Go(func() { t.consume(lctx, js, LegacyEventsStream, rate.NewLimiter(rate.Inf, 1), nil, 256) })
		wg.Go(func() {
			defer done()
			t.retireWhenEmpty(lctx, js, legacy)
		})
	}
	wg.Wait()
	return nil
}

// retireWhenEmpty deletes the legacy stream once every event in it has
// been applied.
func (t *Tracker) retireWhenEmpty(ctx context.Context, js jetstream.JetStream, legacy jetstream.Stream) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		info, err := legacy.Info(ctx)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return // another instance deleted it
		}
		if err != nil || info.State.Msgs > 0 {
			continue
		}
		if err := js.DeleteStream(ctx, LegacyEventsStream); err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Log.Info("legacy events stream applied and deleted", "stream", LegacyEventsStream)
			return
		}
	}
}

// consume applies the events of one stream until ctx ends: lim paces them,
// writes (if not nil) holds them back while the agent's record writes are
// over its RecordBytesPerSecond,
// and each task's go to the same worker, in the order delivered. A
// consumer that fails (deleted by an operator, a stream leader gone) is
// created again after a pause.
func (t *Tracker) consume(ctx context.Context, js jetstream.JetStream, stream string, lim, writes *rate.Limiter, burst int) {
	n := cmp.Or(t.Workers, DefaultWorkers)
	queues := make([]chan streamMsg, n)
	var wg sync.WaitGroup
	park := &parking{slots: make(chan struct{}, maxParked), lim: lim, stopped: make(chan struct{}), requeue: func(m streamMsg) bool {
		select {
		case queues[partition(m.Subject(), n)] <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}}
	for i := range queues {
		queues[i] = make(chan streamMsg, workerQueue)
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return // what is still queued is put back below
				case m := <-queues[i]:
					// Record writes are charged after each event: the
					// next waits while the agent is over its rate.
					if !waitWrites(ctx, writes, m.Msg) {
						park.putBack(ctx, m)
						return
					}
					t.handle(ctx, m, park)
				}
			}
		})
	}
	// On the way out, once nothing more is pulled (this instance's pull
	// requests withdrawn, so that what is put back goes to another
	// instance at once, not into a request of this one's that is then
	// dropped to wait out the ack wait): every parked event and every one
	// still queued is put back (nak).
	defer func() {
		park.close()
		wg.Wait()
		for _, q := range queues {
			for len(q) > 0 {
				m := <-q
				m.stopFollowing()
				_ = m.Nak()
			}
		}
	}()
	for ctx.Err() == nil {
		err := t.pull(ctx, js, stream, lim, burst, func(st jetstream.Stream, m jetstream.Msg) {
			// Nothing more is pulled while the agent is over its rate of
			// record writes: what is not delivered has no ack wait running.
			if !waitWrites(ctx, writes, m) {
				return
			}
			select {
			case queues[partition(m.Subject(), n)] <- streamMsg{Msg: m, st: st}:
			case <-ctx.Done():
				_ = m.Nak() // the drain puts it back again, should it come to this instance's pull
			}
		})
		if ctx.Err() != nil {
			return
		}
		if stream == LegacyEventsStream && (errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)) {
			return // applied and deleted
		}
		t.Log.Warn("events consumer stopped; starting it again", "stream", stream, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// waitWrites waits while writes (nil: no limit) is over its rate, telling
// the stream that m is in progress when that is long; false when ctx ended.
func waitWrites(ctx context.Context, writes *rate.Limiter, m jetstream.Msg) bool {
	if writes == nil {
		return true
	}
	r := writes.Reserve()
	d := r.Delay()
	if d <= 0 {
		return true
	}
	if d > ackWait/4 {
		_ = m.InProgress() // its ack wait starts again
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		r.Cancel()
		return false
	}
}

// streamMsg is a delivered event and the stream it came from; follow and
// until are set while it waits for an earlier event of its task (parking).
type streamMsg struct {
	jetstream.Msg
	st     jetstream.Stream
	follow *Follower // the task's changes, from the store's watcher
	seq    int       // the event's sequence (its Nats-Msg-Id's)
	until  time.Time // when this delivery stops waiting
}

// maxParked bounds the events of one agent that wait, off its workers, for
// an earlier event of their task (see parking); past it, an event waits in
// the stream (a delayed redelivery), as every one did before parking.
const maxParked = 256

// parking holds one agent's events that arrived before an earlier event of
// their task was applied (a gap), off the agent's workers, until the
// store's watcher shows the task's record changed — on this instance or
// another sharing the consumer, typically the missing event applied — and
// then hands them back to the task's worker. The wait of one delivery is
// at most its gap pause (gapPause), after which it is redelivered at once:
// the agent's patience (gapPatience) counts deliveries as before, but an
// event no longer waits out a fixed pause for a predecessor applied
// milliseconds after it came. The slots are the agent's own, and each
// event handed back takes a token of the agent's event rate (lim) as a
// delivery does, so an agent sending events out of order fills its own
// parking only and cannot make a2ad read its records faster than it may
// send events.
type parking struct {
	slots   chan struct{}
	lim     *rate.Limiter // the agent's events a second
	requeue func(streamMsg) bool

	mu      sync.Mutex
	closing bool           // the consumer is stopping: nothing more is parked
	wg      sync.WaitGroup // the parked events' goroutines
	stopped chan struct{}  // closed once nothing more is pulled
}

// park holds m until its task's record changes (then its worker applies it
// again) or its pause has passed since it first waited (then it is
// redelivered at once). Without a free slot, or without a follower, m
// waits in the stream for what is left of its pause.
func (p *parking) park(ctx context.Context, m streamMsg, pause time.Duration) {
	if m.until.IsZero() {
		m.until = time.Now().Add(pause)
	}
	left := time.Until(m.until)
	if m.follow == nil || p == nil || left <= 0 {
		m.stopFollowing()
		if left > 0 {
			_ = m.NakWithDelay(left)
		} else {
			_ = m.Nak() // its pause was spent waiting here
		}
		return
	}
	select {
	case p.slots <- struct{}{}:
	default:
		m.stopFollowing()
		_ = m.NakWithDelay(left)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		<-p.slots
		m.stopFollowing()
		_ = m.Nak() // nothing more is pulled
		return
	}
	p.wg.Go(func() {
		defer func() { <-p.slots }()
		if p.wait(m) && p.handBack(ctx, m) {
			return // its worker applies it again, still following
		}
		p.putBack(ctx, m)
	})
}

// wait waits until a change of m's task may have filled its gap: true
// then, false once its pause is over or the consumer stops. A change that
// leaves the gap (the record's sequence still short of m's predecessor) is
// not looked at again.
func (p *parking) wait(m streamMsg) bool {
	timer := time.NewTimer(time.Until(m.until))
	defer timer.Stop()
	for {
		select {
		case <-m.follow.C():
			if seq, ok := m.follow.eventSeq(); !ok || m.seq-1 <= seq { // not seq+1: it may be MaxInt
				return true
			}
		case <-timer.C:
			return false
		case <-p.stopped:
			return false
		}
	}
}

// handBack queues m for its task's worker once the agent's event rate
// allows, if that is within m's pause; false if not, or the consumer stops.
func (p *parking) handBack(ctx context.Context, m streamMsg) bool {
	r := p.lim.Reserve()
	d := r.Delay()
	if d >= time.Until(m.until) {
		r.Cancel()
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return ctx.Err() == nil && p.requeue(m)
	case <-p.stopped:
		return false
	}
}

// putBack ends m's wait here: it is redelivered at once, to any instance.
// While the consumer stops (ctx ended), that waits until nothing more is
// pulled: put back before, it could be redelivered into this instance's
// own pull request and dropped with it, to wait out the ack wait.
func (p *parking) putBack(ctx context.Context, m streamMsg) {
	m.stopFollowing()
	if ctx.Err() != nil {
		<-p.stopped
	}
	_ = m.Nak()
}

// close stops parking once nothing more is pulled, and returns when every
// parked event is put back or handed to its worker.
func (p *parking) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	close(p.stopped)
	p.wg.Wait()
}

func (m *streamMsg) stopFollowing() {
	if m.follow != nil {
		m.follow.Stop()
		m.follow = nil
	}
}

// pull binds the stream's durable consumer and passes its events to
// dispatch, paced by lim, until ctx ends or the consumer fails.
func (t *Tracker) pull(ctx context.Context, js jetstream.JetStream, stream string, lim *rate.Limiter, burst int, dispatch func(jetstream.Stream, jetstream.Msg)) error {
	var st jetstream.Stream
	var cons jetstream.Consumer
	err := jsretry.Do(ctx, time.Minute, func() (err error) {
		if st, err = js.Stream(ctx, stream); err != nil {
			return err
		}
		cons, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       EventsConsumer,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxAckPending: maxAckPending,
			MaxDeliver:    maxDeliver,
		})
		return err
	})
	if err != nil {
		return err
	}
	// Events fetched ahead wait for the limiter: no more than about a
	// burst's worth, so none waits out its ack wait.
	it, err := cons.Messages(jetstream.PullMaxMessages(min(max(burst, 16), 256)))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			if m != nil {
				_ = m.Nak()
			}
			drainPull(it)
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		if lim.Wait(ctx) != nil {
			_ = m.Nak()
			drainPull(it)
			return ctx.Err()
		}
		dispatch(st, m)
	}
}

// drainFor bounds how long a stopping consumer waits for its pull request
// to be withdrawn (drainPull): with NATS unreachable, the drain's flush
// would wait 10 s.
const drainFor = 2 * time.Second

// drainPull withdraws its pull request — drained, not stopped: the
// unsubscription is confirmed by the server — and puts back (nak) every
// event already delivered to it, so that another instance gets them at
// once rather than after their ack wait; for at most drainFor, after which
// what is left waits out its ack wait, as it would after a stop.
func drainPull(it jetstream.MessagesContext) {
	it.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), drainFor)
	defer cancel()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return
		}
		_ = m.Nak()
	}
}
