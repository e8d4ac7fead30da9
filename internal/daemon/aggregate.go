package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"golang.org/x/time/rate"
)

// PerAgentRecordsPerMinute bounds what one agent's registrations and card
// fetches — and refused NATS connections, per refusal code — write: this
// many audit records and as many log lines a minute (token buckets: as many
// at once, then one every 12 s; over t minutes at most 5 + 5t), so that an
// agent retrying a bad card, or a flood of registrations, cannot push other
// tenants' records out of a capped audit stream or bury the log. Beyond,
// records and lines are only counted; the next one of their kind that is
// written carries the count of those not written since the last
// (audit.Record.Suppressed, log attribute similar_not_logged), and when none
// has been for a minute the last one held back is written then, with the
// count of the others (docs/operations.md, audit trail).
const PerAgentRecordsPerMinute = 5

// aggregateSweep is how often held-back records and lines are looked at,
// and aggregateAfter how long they wait for one of their kind to carry
// their count before the last of them is written anyway.
const (
	aggregateSweep = 10 * time.Second
	aggregateAfter = time.Minute
)

// maxAggregates bounds the sources aggregated apart (agents, NATS refusal
// codes); beyond, new ones share the aggregate of registrations without
// a verified credential.
const maxAggregates = 10_000

// aggregator applies PerAgentRecordsPerMinute. A source is an agent id a
// credential proved or a2ad fetches the card of, "" for registrations
// without a verified credential, or a NATS refusal's code. Records are
// alike when they have the same kind, actor, code, status and fingerprint
// (not the agent id: without a verified credential it is only a claim),
// lines when they have the same level and message.
type aggregator struct {
	audit func(audit.Record) // audit.Log.Append once the trail is open
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	sources map[string]*aggregate
}

type aggregate struct {
	records, lines *rate.Limiter
	heldRecords    map[string]*heldRecord
	heldLines      map[string]*heldLine
}

type heldRecord struct {
	last  audit.Record // the last held back
	n     int          // held back since the last of their kind written
	since time.Time    // when the first of them was held back
}

type heldLine struct {
	last  slog.Record
	n     int
	since time.Time
}

func newAggregator(log *slog.Logger) *aggregator {
	return &aggregator{audit: func(audit.Record) {}, log: log, now: time.Now, sources: map[string]*aggregate{}}
}

// source is source's aggregate, made on first use; a.mu is held.
func (a *aggregator) source(source string) *aggregate {
	if g := a.sources[source]; g != nil {
		return g
	}
	if source != "" && len(a.sources) >= maxAggregates-1 { // room for ""
		return a.source("")
	}
	every := rate.Every(time.Minute / PerAgentRecordsPerMinute)
	g := &aggregate{records: rate.NewLimiter(every, PerAgentRecordsPerMinute), lines: rate.NewLimiter(every, PerAgentRecordsPerMinute),
		heldRecords: map[string]*heldRecord{}, heldLines: map[string]*heldLine{}}
	a.sources[source] = g
	return g
}

// record appends r to the audit trail unless source has written its share
// this minute; then r is counted (see [PerAgentRecordsPerMinute]).
func (a *aggregator) record(source string, r audit.Record) {
	now := a.now()
	if r.At.IsZero() {
		r.At = now.UTC()
	}
	like := strings.Join([]string{r.Kind, r.Actor.Type, r.Actor.Subject, r.Code, r.Status, r.Fingerprint}, "\x00")
	a.mu.Lock()
	g := a.source(source)
	h := g.heldRecords[like]
	if !g.records.AllowN(now, 1) {
		if h == nil {
			h = &heldRecord{since: now}
			g.heldRecords[like] = h
		}
		h.last, h.n = r, h.n+1
		a.mu.Unlock()
		return
	}
	if h != nil {
		r.Suppressed = h.n
		delete(g.heldRecords, like)
	}
	a.mu.Unlock()
	a.audit(r)
}

// logAttrs logs msg with args at level unless source has logged its share
// this minute; then the line is counted (see [PerAgentRecordsPerMinute]).
func (a *aggregator) logAttrs(source string, level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !a.log.Enabled(ctx, level) {
		return
	}
	now := a.now()
	line := slog.NewRecord(now, level, msg, 0)
	line.Add(args...)
	like := level.String() + "\x00" + msg
	a.mu.Lock()
	g := a.source(source)
	h := g.heldLines[like]
	if !g.lines.AllowN(now, 1) {
		if h == nil {
			h = &heldLine{since: now}
			g.heldLines[like] = h
		}
		h.last, h.n = line, h.n+1
		a.mu.Unlock()
		return
	}
	if h != nil {
		line.AddAttrs(slog.Int("similar_not_logged", h.n))
		delete(g.heldLines, like)
	}
	a.mu.Unlock()
	_ = a.log.Handler().Handle(ctx, line)
}

// sweep writes, of the records and lines held back, the last of each kind
// whose first has waited aggregateAfter (all of them if all), with the
// count of the others, and forgets the sources that hold nothing back and
// whose buckets are full again (what a new source's would be).
func (a *aggregator) sweep(all bool) {
	now := a.now()
	var records []audit.Record
	var lines []slog.Record
	a.mu.Lock()
	for source, g := range a.sources {
		for like, h := range g.heldRecords {
			if all || now.Sub(h.since) >= aggregateAfter {
				h.last.Suppressed = h.n - 1
				records = append(records, h.last)
				delete(g.heldRecords, like)
			}
		}
		for like, h := range g.heldLines {
			if all || now.Sub(h.since) >= aggregateAfter {
				if h.n > 1 {
					h.last.AddAttrs(slog.Int("similar_not_logged", h.n-1))
				}
				lines = append(lines, h.last)
				delete(g.heldLines, like)
			}
		}
		if len(g.heldRecords) == 0 && len(g.heldLines) == 0 &&
			g.records.TokensAt(now) >= PerAgentRecordsPerMinute && g.lines.TokensAt(now) >= PerAgentRecordsPerMinute {
			delete(a.sources, source)
		}
	}
	a.mu.Unlock()
	for _, r := range records {
		a.audit(r)
	}
	for _, l := range lines {
		_ = a.log.Handler().Handle(context.Background(), l)
	}
}

// run sweeps every aggregateSweep until ctx ends.
func (a *aggregator) run(ctx context.Context) {
	t := time.NewTicker(aggregateSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.sweep(false)
		}
	}
}
