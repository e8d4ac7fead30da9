package daemon

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
)

// aggregatorAt is an aggregator on a clock the test moves, writing
// records to recs and lines to logs.
func aggregatorAt(now *time.Time, recs *[]audit.Record, logs *bytes.Buffer) *aggregator {
	a := newAggregator(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{
		// Lines are told apart by their times, in seconds from the epoch.
		ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
			if at.Key == slog.TimeKey {
				return slog.Int64(slog.TimeKey, at.Value.Time().Unix())
			}
			return at
		}})))
	a.now = func() time.Time { return *now }
	a.audit = func(r audit.Record) { *recs = append(*recs, r) }
	return a
}

// standsFor is how many records recs stand for: each itself and those it
// says were not written before it.
func standsFor(recs []audit.Record) int {
	n := 0
	for _, r := range recs {
		n += 1 + r.Suppressed
	}
	return n
}

var notLoggedAttr = regexp.MustCompile(`similar_not_logged=(\d+)`)

// linesStandFor is how many lines the log's lines with msg stand for.
func linesStandFor(log, msg string) (lines, n int) {
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "msg=\""+msg+"\"") {
			continue
		}
		lines++
		n++
		if m := notLoggedAttr.FindStringSubmatch(l); m != nil {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
	}
	return lines, n
}

// An agent's flood of records and lines is cut to PerAgentRecordsPerMinute
// of each a minute, and every one is still accounted for: the next one of
// its kind written carries the count of those held back, or, when none is
// written within a minute of the first held back, the last of them is
// written then with the count of the others. Other kinds, and other
// agents, are counted apart.
func TestAggregatorBoundsAFloodAndAccountsForIt(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var recs []audit.Record
	var logs bytes.Buffer
	a := aggregatorAt(&now, &recs, &logs)
	refused := audit.Record{Kind: audit.KindAgentCardRefused, Actor: audit.Actor{Type: audit.ActorAgent, Subject: "flood"}, AgentID: "flood", Code: "card_invalid"}
	flood := func(n int) {
		for range n {
			a.record("flood", refused)
			a.logAttrs("flood", slog.LevelWarn, "agent registration refused", "agent", "flood")
		}
	}

	flood(100) // a burst: the first PerAgentRecordsPerMinute go through
	if len(recs) != PerAgentRecordsPerMinute || standsFor(recs) != PerAgentRecordsPerMinute {
		t.Fatalf("after a burst of 100: %d records, want %d", len(recs), PerAgentRecordsPerMinute)
	}
	// Another agent and another kind are not held back by the flood.
	a.record("other", refused)
	fetch := refused
	fetch.Actor, fetch.Code = audit.Actor{Type: audit.ActorDaemon}, "fetch_failed"
	a.record("flood", fetch) // held: the flood spent the agent's share
	if len(recs) != PerAgentRecordsPerMinute+1 || recs[len(recs)-1].Actor.Subject != "flood" || recs[len(recs)-1].Suppressed != 0 {
		t.Fatalf("another agent's record: %+v", recs[len(recs)-1])
	}

	// The share comes back at PerAgentRecordsPerMinute a minute: the next
	// record written carries the count of the 95 held back.
	now = now.Add(time.Minute / PerAgentRecordsPerMinute)
	flood(3)
	last := recs[len(recs)-1]
	if len(recs) != PerAgentRecordsPerMinute+2 || last.Suppressed != 95 || !last.At.Equal(now) {
		t.Fatalf("the first record after the share came back: %+v, want suppressed 95 at %v", last, now)
	}
	// The flood stops. A minute after the first of a kind was held back,
	// the last of them is written with the count of the others: the
	// fetch failure, held since the burst...
	now = now.Add(50 * time.Second)
	a.sweep(false)
	if len(recs) != PerAgentRecordsPerMinute+3 || recs[len(recs)-1].Code != "fetch_failed" || recs[len(recs)-1].Suppressed != 0 {
		t.Fatalf("records a minute after the burst: %+v", recs[PerAgentRecordsPerMinute+2:])
	}
	// ...then the two refusals held back since the share came back.
	now = now.Add(11 * time.Second)
	a.sweep(false)
	if last := recs[len(recs)-1]; len(recs) != PerAgentRecordsPerMinute+4 || last.Code != "card_invalid" || last.Suppressed != 1 ||
		!last.At.Equal(now.Add(-61*time.Second)) {
		t.Errorf("records a minute after the flood stopped: %+v", recs[PerAgentRecordsPerMinute+3:])
	}
	// 103 refusals, one fetch failure, one of the other agent's.
	if got := standsFor(recs); got != 105 {
		t.Errorf("the records stand for %d, want 105", got)
	}
	lines, n := linesStandFor(logs.String(), "agent registration refused")
	if lines != PerAgentRecordsPerMinute+2 || n != 103 {
		t.Errorf("log: %d lines standing for %d, want %d standing for 103:\n%s", lines, n, PerAgentRecordsPerMinute+2, logs.String())
	}
	// The line written when the minute ended is the last held back, at
	// its own time.
	if want := fmt.Sprintf("time=%d level=WARN msg=\"agent registration refused\" agent=flood similar_not_logged=1\n", now.Add(-61*time.Second).Unix()); !strings.HasSuffix(logs.String(), want) {
		t.Errorf("last line:\n%s\nwant:\n%s", logs.String(), want)
	}

	// Quiet sources are forgotten once their share is whole again.
	now = now.Add(time.Minute)
	a.sweep(false)
	if len(a.sources) != 0 {
		t.Errorf("%d sources kept after a quiet minute", len(a.sources))
	}
}

// Stopping writes everything held back, whatever its age.
func TestAggregatorSweepAllWritesEverythingHeld(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var recs []audit.Record
	var logs bytes.Buffer
	a := aggregatorAt(&now, &recs, &logs)
	for range 40 {
		a.record("", audit.Record{Kind: audit.KindAgentCardRefused, Actor: audit.Actor{Type: audit.ActorAgent}, Code: "unauthenticated"})
		a.logAttrs("", slog.LevelWarn, "agent registration refused")
	}
	a.sweep(true)
	if len(recs) != PerAgentRecordsPerMinute+1 || standsFor(recs) != 40 || recs[len(recs)-1].Suppressed != 40-PerAgentRecordsPerMinute-1 {
		t.Errorf("records at stop: %+v", recs)
	}
	if lines, n := linesStandFor(logs.String(), "agent registration refused"); lines != PerAgentRecordsPerMinute+1 || n != 40 {
		t.Errorf("log at stop: %d lines standing for %d:\n%s", lines, n, logs.String())
	}
}

// Lines below the log's level are neither written nor counted.
func TestAggregatorIgnoresDisabledLevels(t *testing.T) {
	var logs bytes.Buffer
	a := newAggregator(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	for range 20 {
		a.logAttrs("agent-a", slog.LevelInfo, "agent registered")
	}
	a.sweep(true)
	if logs.Len() != 0 || len(a.sources) != 0 {
		t.Errorf("info lines at level warn: %q, %d sources", logs.String(), len(a.sources))
	}
}

// The sources kept are bounded: beyond maxAggregates, new ones share the
// aggregate of registrations without a verified credential.
func TestAggregatorSourcesAreBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var recs []audit.Record
	var logs bytes.Buffer
	a := aggregatorAt(&now, &recs, &logs)
	r := audit.Record{Kind: audit.KindAgentRegistered, Status: "approved"}
	for i := range maxAggregates + 100 {
		a.record("agent-"+strconv.Itoa(i), r)
	}
	if len(a.sources) > maxAggregates {
		t.Errorf("%d sources kept, want at most %d", len(a.sources), maxAggregates)
	}
	if len(recs) != maxAggregates-1+PerAgentRecordsPerMinute {
		t.Errorf("%d records written, want %d: one per source, and the overflow's share", len(recs), maxAggregates-1+PerAgentRecordsPerMinute)
	}
	a.sweep(true)
	if got := standsFor(recs); got != maxAggregates+100 {
		t.Errorf("the records stand for %d, want %d", got, maxAggregates+100)
	}
}
