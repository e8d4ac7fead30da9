package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The measured attack: events for the agent's own task with 60 KB
// Nats-Msg-Ids grew the record past the KV value limit, and the event was
// then redelivered for ever. Each is now refused without keeping its id,
// the record stays small, and the task's honest events still apply.
func TestHugeEventIDsAreRefusedNotKept(t *testing.T) {
	tr := newTracker(t)
	create(t, tr, "t1")
	subj := "a2a.events.fraud-review.t1"
	huge := strings.Repeat("x", 60_000)
	for i := range 20 {
		err := apply(t, tr, subj, fmt.Sprintf("%s.%d", huge, i), working)
		if DropReason(err) != DropOutOfBounds {
			t.Fatalf("event %d: %v, want drop reason %s", i, err, DropOutOfBounds)
		}
	}
	r := get(t, tr, "t1")
	b, _ := json.Marshal(r)
	if len(b) > 16<<10 || strings.Contains(string(b), huge[:100]) {
		t.Fatalf("record is %d bytes and keeps the id: %.300s", len(b), b)
	}
	if r.State != Submitted || len(r.Applied) != 0 {
		t.Fatalf("state %s applied %v, want submitted with no id applied", r.State, r.Applied)
	}
	if last := r.History[len(r.History)-1]; !last.Refused || !strings.Contains(last.Reason, "Nats-Msg-Id longer than 256 bytes") || last.MsgID != "" {
		t.Fatalf("last history entry %+v, want the refusal without the id", last)
	}
	for i, ev := range []string{working, good, completed} {
		if err := apply(t, tr, subj, fmt.Sprintf("t1.%d", i+1), ev); err != nil {
			t.Fatalf("honest event %d: %v", i+1, err)
		}
	}
	if r := get(t, tr, "t1"); r.State != Completed {
		t.Fatalf("state %s, want completed", r.State)
	}
}

// Ids an agent chooses are kept only within MaxAgentIDBytes: an event
// carrying a longer task, context, message or artifact id, or a longer
// artifact name, is refused and none of it is stored.
func TestOverlongAgentIDsAreRefused(t *testing.T) {
	long := strings.Repeat("a", MaxAgentIDBytes+1)
	cases := map[string]string{
		"taskId":       `{"statusUpdate":{"taskId":"` + long + `","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`,
		"contextId":    `{"statusUpdate":{"taskId":"a1","contextId":"` + long + `","status":{"state":"TASK_STATE_WORKING"}}}`,
		"messageId":    `{"statusUpdate":{"taskId":"a1","contextId":"c1","status":{"state":"TASK_STATE_INPUT_REQUIRED","message":{"messageId":"` + long + `","role":"ROLE_AGENT","parts":[{"text":"q"}]}}}}`,
		"artifactId":   `{"artifactUpdate":{"taskId":"a1","artifact":{"artifactId":"` + long + `","parts":[{"data":{}}]},"lastChunk":true}}`,
		"artifactName": `{"artifactUpdate":{"taskId":"a1","artifact":{"artifactId":"ra","name":"` + long + `","parts":[{"data":{}}]},"lastChunk":true}}`,
		"task snapshot": `{"task":{"id":"a1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"},"artifacts":[{"artifactId":"` + long +
			`","parts":[{"data":{}}]}]}}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			tr := newTracker(t)
			create(t, tr, "t1")
			err := apply(t, tr, "a2a.events.fraud-review.t1", "t1.1", body)
			if DropReason(err) != DropOutOfBounds {
				t.Fatalf("%v, want drop reason %s", err, DropOutOfBounds)
			}
			r := get(t, tr, "t1")
			b, _ := json.Marshal(r)
			if strings.Contains(string(b), long) || r.State != Submitted || r.EventSeq != 1 {
				t.Fatalf("state %s seq %d, record %.200s: want submitted, seq 1, the id not kept", r.State, r.EventSeq, b)
			}
			if last := r.History[len(r.History)-1]; !last.Refused || !strings.Contains(last.Reason, "longer than 256 bytes") {
				t.Fatalf("last history entry %+v, want the refusal", last)
			}
		})
	}
}

// An agent flapping between working and auth-required cannot grow the
// history without bound: beyond MaxHistory entries transitions are
// counted, the terminal one is still recorded, and the record stays small.
func TestFlappingAgentHistoryIsBounded(t *testing.T) {
	tr := newTracker(t)
	create(t, tr, "t1")
	subj := "a2a.events.fraud-review.t1"
	auth := `{"statusUpdate":{"taskId":"a1","contextId":"c1","status":{"state":"TASK_STATE_AUTH_REQUIRED"}}}`
	seq := 0
	next := func(body string) {
		seq++
		if err := apply(t, tr, subj, fmt.Sprintf("t1.%d", seq), body); err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
	}
	for range 150 {
		next(working)
		next(auth)
	}
	next(working)
	next(good)
	next(completed)
	r := get(t, tr, "t1")
	if r.State != Completed || len(r.History) != MaxHistory+1 || r.History[MaxHistory].To != Completed {
		t.Fatalf("state %s, %d history entries (last %+v), want completed with %d entries ending in completed", r.State, len(r.History), r.History[len(r.History)-1], MaxHistory+1)
	}
	if want := 300 + 1 - MaxHistory; r.HistoryUnrecorded != want { // 300 flaps and working; completed is recorded
		t.Fatalf("%d transitions counted, want %d", r.HistoryUnrecorded, want)
	}
	if b, _ := json.Marshal(r); len(b) > 64<<10 {
		t.Fatalf("record is %d bytes", len(b))
	}
}

// An event that would grow the record past MaxAgentRecordBytes is not
// applied: it is counted in the record and reported as record_full, and
// the record stays within what a KV value holds.
func TestEventOverTheRecordBudgetIsCounted(t *testing.T) {
	tr := newTracker(t)
	// The 300 KiB artifact below is within max_artifact_bytes, so it is
	// the record's budget that refuses it.
	tr.Policies = map[string]artifact.Policy{"fraud-review": {MaxArtifactBytes: 512 << 10}}
	now := time.Now().UTC()
	// A record already large: a brief of 700 KiB waits in its outbox.
	brief, _ := json.Marshal(map[string]string{"evidence": strings.Repeat("e", 700<<10)})
	if err := tr.Store.Create(context.Background(), &Record{ID: "t1", Tenant: "default", AgentID: "fraud-review", State: Working,
		OutputSchema: "risk_assessment", CreatedAt: now, UpdatedAt: now, Outbox: &Outbound{Method: "SendMessage", MessageID: "t1-m2", Params: brief}}); err != nil {
		t.Fatal(err)
	}
	big := `{"artifactUpdate":{"taskId":"a1","artifact":{"artifactId":"ra","parts":[{"text":"` + strings.Repeat("t", 300<<10) + `"}]},"lastChunk":true}}`
	err := apply(t, tr, "a2a.events.fraud-review.t1", "t1.1", big)
	if DropReason(err) != DropRecordFull {
		t.Fatalf("%v, want drop reason %s", err, DropRecordFull)
	}
	r := get(t, tr, "t1")
	if r.EventsUnrecorded != 1 || r.EventSeq != 1 || len(r.Pending) != 0 || r.State != Working {
		t.Fatalf("unrecorded %d seq %d pending %d state %s, want 1 1 0 working", r.EventsUnrecorded, r.EventSeq, len(r.Pending), r.State)
	}
	// The host's cancel still fits (the room between the two budgets).
	if _, err := tr.Store.Update(context.Background(), "t1", func(r *Record) error {
		return r.MoveBy(time.Now().UTC(), EventCancel, SourceHost, ReasonCanceledByHost, "", "host-1")
	}); err != nil {
		t.Fatalf("cancel of a full record: %v", err)
	}
	// And nothing is ever written past MaxRecordBytes.
	_, err = tr.Store.Update(context.Background(), "t1", func(r *Record) error {
		r.StatusMessage = strings.Repeat("s", MaxRecordBytes)
		return nil
	})
	if !errors.Is(err, ErrRecordFull) {
		t.Fatalf("oversized write: %v, want ErrRecordFull", err)
	}
}

// runTracker runs a tracker over agents' own streams until the test ends.
func runTracker(t *testing.T, agents ...string) (*Tracker, jetstream.JetStream, *nats.Conn, *sync.Map) {
	t.Helper()
	_, nc, js := natstest.Start(t)
	tr, drops := runTrackerOn(t, js, nil, agents...)
	return tr, js, nc, drops
}

// runTrackerOn runs a tracker with a store of its own (an a2ad instance)
// on js until the test ends; configure, if not nil, adjusts it first.
func runTrackerOn(t *testing.T, js jetstream.JetStream, configure func(*Tracker), agents ...string) (*Tracker, *sync.Map) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := trackerOn(t, s)
	tr.Agents = map[string]EventLimits{}
	for _, a := range agents {
		tr.Agents[a] = EventLimits{}
	}
	var drops sync.Map // "agent/reason" → *atomic.Int64
	tr.OnDrop = func(agentID, reason string) {
		n, _ := drops.LoadOrStore(agentID+"/"+reason, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if configure != nil {
		configure(tr)
	}
	if err := tr.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, js) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return tr, &drops
}

func publish(t *testing.T, js jetstream.JetStream, subject, msgID, body string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(nats.MsgIdHdr, msgID)
	m.Data = []byte(body)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish %s: %v", msgID, err)
	}
}

// Events that can never apply are terminated: they leave the agent's
// stream and are counted, and are never redelivered again. An event for
// a task that does not exist goes after its second delivery.
func TestEventsThatNeverApplyLeaveTheStream(t *testing.T) {
	tr, js, _, drops := runTracker(t, "fraud-review", "mallory")
	create(t, tr, "t1")
	publish(t, js, "a2a.events.fraud-review.no-such-task", "x.1", working)
	publish(t, js, "a2a.events.mallory.t1", "t1.1", completed) // t1 is fraud-review's
	publish(t, js, "a2a.events.fraud-review.t1", "t1.1", `{"nope":1}`)
	waitUntil(t, "every event terminated", func() bool {
		return natstest.Messages(t, js, EventsStream("fraud-review")) == 0 && natstest.Messages(t, js, EventsStream("mallory")) == 0
	})
	for key, want := range map[string]int{"fraud-review/unknown_task": 1, "mallory/foreign_task": 1, "fraud-review/malformed": 1} {
		n, ok := drops.Load(key)
		if !ok || n.(*atomic.Int64).Load() != int64(want) {
			t.Errorf("%s: %v drops, want %d", key, n, want)
		}
	}
	if r := get(t, tr, "t1"); r.State != Submitted || r.EventSeq != 1 {
		t.Errorf("t1: %s seq %d, want submitted with the malformed event's seq applied", r.State, r.EventSeq)
	}
}

// Each agent's events go to its own stream: its message ids cannot
// suppress another agent's events, even one that learnt the other's task
// id and published that task's next event ids first.
func TestMessageIDsCannotSuppressAnotherAgentsEvents(t *testing.T) {
	tr, js, _, _ := runTracker(t, "fraud-review", "mallory")
	create(t, tr, "t1")
	for i := 1; i <= 20; i++ {
		publish(t, js, "a2a.events.mallory.t1", fmt.Sprintf("t1.%d", i), working)
	}
	for i, ev := range []string{working, good, completed} {
		publish(t, js, "a2a.events.fraud-review.t1", fmt.Sprintf("t1.%d", i+1), ev)
	}
	waitUntil(t, "t1 completed", func() bool { return get(t, tr, "t1").State == Completed })
}

// A stream an earlier a2ad captured every agent's events in is retired:
// the events it holds are applied, the agents get streams of their own,
// and it is deleted once empty.
func TestLegacyEventsStreamIsDrainedAndDeleted(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: LegacyEventsStream, Subjects: []string{"a2a.events.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "a2a.events.fraud-review.t1", "t1.1", good)
	publish(t, js, "a2a.events.fraud-review.t1", "t1.2", completed)
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := trackerOn(t, s)
	tr.Agents = map[string]EventLimits{"fraud-review": {}}
	create(t, tr, "t1")
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, js) }()
	waitUntil(t, "the legacy events applied", func() bool { return get(t, tr, "t1").State == Completed })
	waitUntil(t, "the legacy stream deleted", func() bool {
		_, err := js.Stream(ctx, LegacyEventsStream)
		return errors.Is(err, jetstream.ErrStreamNotFound)
	})
	create(t, tr, "t2")
	publish(t, js, "a2a.events.fraud-review.t2", "t2.1", completed) // now into the agent's own stream
	waitUntil(t, "t2 applied from the agent's stream", func() bool { return get(t, tr, "t2").State == Failed })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// trackerWithStore is a tracker whose store's watcher feeds it
// (Tracker.Track), as the daemon wires it, for agents with limits.
func trackerWithStore(t *testing.T, agents map[string]EventLimits) (*Tracker, jetstream.JetStream) {
	t.Helper()
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Artifacts of up to 512 KiB, so that one update makes a large
	// record (past max_artifact_bytes it would fail the task at once).
	tr := &Tracker{Schemas: builtinSchemas(t), Log: newTracker(t).Log, Agents: agents,
		Policies: map[string]artifact.Policy{"fraud-review": {MaxArtifactBytes: 512 << 10}}}
	s, err := NewStore(ctx, js, 1, tr.Track)
	if err != nil {
		t.Fatal(err)
	}
	tr.Store = s
	return tr, js
}

// bigText is an artifact update of one text part of n bytes.
func bigText(n int) string {
	return `{"artifactUpdate":{"taskId":"a1","artifact":{"artifactId":"ra","parts":[{"text":"` + strings.Repeat("t", n) + `"}]},"lastChunk":true}}`
}

// An agent's open records together may take MaxOpenRecordBytes as far as
// its events grew them: past it, an event that would grow one further is
// only counted, and the tasks bucket stays every tenant's.
func TestOpenRecordBytesAreBoundedPerAgent(t *testing.T) {
	tr, _ := trackerWithStore(t, map[string]EventLimits{"fraud-review": {MaxOpenRecordBytes: 1 << 20}})
	for i := range 4 {
		id := fmt.Sprintf("t%d", i)
		create(t, tr, id)
		err := apply(t, tr, "a2a.events.fraud-review."+id, id+".1", bigText(300<<10))
		switch {
		case i < 3 && err != nil:
			t.Fatalf("task %d's artifact: %v", i, err)
		case i == 3 && DropReason(err) != DropRecordFull:
			t.Fatalf("task 3's artifact, past the agent's 1 MiB: %v, want %s", err, DropRecordFull)
		}
		waitUntil(t, "the watcher saw the record", func() bool {
			tr.records.mu.Lock()
			defer tr.records.mu.Unlock()
			return tr.records.tasks[id].bytes > 0 || i == 3
		})
	}
	if r := get(t, tr, "t3"); r.EventsUnrecorded != 1 || len(r.Pending) != 0 {
		t.Fatalf("t3: %d events unrecorded, %d pending, want 1 and 0", r.EventsUnrecorded, len(r.Pending))
	}
	// Small events of the same agent still apply, and a task that ends
	// gives its bytes back.
	if err := apply(t, tr, "a2a.events.fraud-review.t3", "t3.2", working); err != nil {
		t.Fatalf("a small event: %v", err)
	}
	if err := apply(t, tr, "a2a.events.fraud-review.t0", "t0.2", completed); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "t0's bytes given back", func() bool {
		tr.records.mu.Lock()
		defer tr.records.mu.Unlock()
		_, open := tr.records.tasks["t0"]
		return !open
	})
	if err := apply(t, tr, "a2a.events.fraud-review.t3", "t3.3", bigText(300<<10)); err != nil {
		t.Fatalf("t3's artifact once t0 ended: %v", err)
	}
}

// A small event can make a2ad rewrite a large record; an agent's record
// writes are paced by RecordBytesPerSecond, so that a flood of tiny
// status updates on its large records costs a bounded share of a2ad.
func TestRecordWritesArePacedPerAgent(t *testing.T) {
	tr, js := trackerWithStore(t, map[string]EventLimits{"fraud-review": {RecordBytesPerSecond: 1 << 20}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := tr.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	go func() { _ = tr.Run(ctx, js) }()
	create(t, tr, "t1")
	publish(t, js, "a2a.events.fraud-review.t1", "t1.1", bigText(400<<10))
	const updates = 20
	for i := range updates {
		body := fmt.Sprintf(`{"statusUpdate":{"taskId":"a1","contextId":"c1","status":{"state":"TASK_STATE_SUBMITTED","message":{"messageId":"m%d","role":"ROLE_AGENT","parts":[{"text":"update %d"}]}}}}`, i, i)
		publish(t, js, "a2a.events.fraud-review.t1", fmt.Sprintf("t1.%d", i+2), body)
	}
	// 21 writes of a 400 KiB record are 8 MiB: at 1 MiB a second (and a
	// burst of 2 MiB) they take about 6 s; unpaced, a fraction of one.
	time.Sleep(2 * time.Second)
	if seq := get(t, tr, "t1").EventSeq; seq >= updates+1 {
		t.Fatalf("all %d events applied within 2 s: record writes not paced", seq)
	}
	waitUntil(t, "every event applied in the end", func() bool { return get(t, tr, "t1").EventSeq == updates+1 })
}
