package audit_test

import (
	"context"
	"fmt"
	"github.com/a2ad/a2ad/internal/testlog"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/natstest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestRecordsAreStoredOnceAndQueried(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	l, err := audit.Open(ctx, js, audit.Config{MaxAge: audit.Duration(time.Hour)}, 1, "test/1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC()
	for i := range 1000 {
		l.Append(audit.Record{Kind: audit.KindTransition, TaskID: fmt.Sprintf("tsk-%d", i%10), Tenant: []string{"a", "b"}[i%2],
			AgentID: "fraud-review", Actor: audit.Actor{Type: audit.ActorAgent, Subject: "fraud-review"}})
	}
	l.Append(audit.Record{Kind: audit.KindAgentApproved, AgentID: "fraud-review", Actor: audit.Actor{Type: audit.ActorOperator, Subject: "ops"}})
	l.Close(30 * time.Second)
	if l.Written() != 1001 || l.Dropped() != 0 || l.Pending() != 0 {
		t.Fatalf("written %d dropped %d pending %d, want 1001 0 0", l.Written(), l.Dropped(), l.Pending())
	}
	l.Append(audit.Record{Kind: audit.KindTransition}) // after Close: discarded, never a panic
	st, err := js.Stream(ctx, audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(ctx)
	cfg := info.Config
	if info.State.Msgs != 1001 || !cfg.DenyDelete || !cfg.DenyPurge || cfg.MaxAge != time.Hour || cfg.Subjects[0] != "a2ad.audit.>" {
		t.Errorf("stream: %d msgs, deny delete %v purge %v, max age %s, subjects %v", info.State.Msgs, cfg.DenyDelete, cfg.DenyPurge, cfg.MaxAge, cfg.Subjects)
	}
	for _, c := range []struct {
		f    audit.Filter
		want int
	}{
		{audit.Filter{Limit: 5000}, 1001},
		{audit.Filter{TaskID: "tsk-3", Limit: 1000}, 100},
		{audit.Filter{TaskID: "tsk-3", Tenant: "b", Limit: 1000}, 100},
		{audit.Filter{TaskID: "tsk-3", Tenant: "a", Limit: 1000}, 0},
		{audit.Filter{Kind: "agent.>", Limit: 1000}, 1},
		{audit.Filter{Kind: audit.KindTransition, Limit: 7}, 7},
		{audit.Filter{Kind: audit.KindTransition, Since: time.Now().Add(time.Hour)}, 0},
		{audit.Filter{Kind: audit.KindAgentApproved, Since: start.Add(-time.Second)}, 1},
	} {
		page, err := audit.Query(ctx, js, c.f)
		if err != nil || len(page.Records) != c.want {
			t.Errorf("Query(%+v): %d records, %v; want %d", c.f, len(page.Records), err, c.want)
		}
	}
	page, _ := audit.Query(ctx, js, audit.Filter{TaskID: "tsk-0", Limit: 2})
	recs := page.Records
	if len(recs) != 2 || !page.More || recs[0].Instance != "test/1" || recs[0].ID == recs[1].ID || recs[0].At.After(recs[1].At) || recs[0].At.Before(start) {
		t.Errorf("records: %+v", recs)
	}
}

func TestAFullQueueDropsAndCountsNeverBlocks(t *testing.T) {
	ns, _, js := natstest.Start(t)
	var logged testlog.Buffer
	l, err := audit.Open(context.Background(), js, audit.Config{QueueSize: 8}, 1, "test/1", slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ns.Shutdown() // JetStream unreachable: the writer holds its batch and retries
	l.Append(audit.Record{Kind: audit.KindTransition})
	deadline := time.Now().Add(30 * time.Second)
	for l.Retries() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Retries() == 0 {
		t.Fatal("the writer never retried")
	}
	for range 8 + 5 {
		l.Append(audit.Record{Kind: audit.KindTransition})
	}
	if l.Dropped() != 5 || l.Pending() != 9 {
		t.Errorf("dropped %d pending %d, want 5 and 9 (8 queued, 1 being published)", l.Dropped(), l.Pending())
	}
	// A stop that cannot store them says how many records it lost.
	l.Close(100 * time.Millisecond)
	if !strings.Contains(logged.String(), `msg="audit records not stored at shutdown" records=9`) {
		t.Errorf("log at shutdown:\n%s", logged.String())
	}
}

// Queries leave no consumer behind: a dashboard polling the trail never
// runs the stream into its consumer limit.
func TestQueriesLeaveNoConsumers(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	l, err := audit.Open(ctx, js, audit.Config{}, 1, "test/1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		l.Append(audit.Record{Kind: audit.KindTransition, TaskID: fmt.Sprintf("tsk-%d", i%5), Tenant: "acme"})
	}
	l.Close(10 * time.Second)
	for i := range 200 {
		f := []audit.Filter{{TaskID: "tsk-1"}, {Kind: "agent.>"}, {Tenant: "acme", Limit: 3}, {Since: time.Now().Add(-time.Hour)}}[i%4]
		if _, err := audit.Query(ctx, js, f); err != nil {
			t.Fatalf("query %d (%+v): %v", i, f, err)
		}
	}
	st, _ := js.Stream(ctx, audit.Stream)
	info, _ := st.Info(ctx)
	if info.State.Consumers != 0 {
		t.Errorf("%d consumers left on %s after 200 queries", info.State.Consumers, audit.Stream)
	}
}

func TestValidKind(t *testing.T) {
	for k, want := range map[string]bool{"task.transition": true, "agent.>": true, "delegation.refused": true, "task.>": true,
		"": false, "Task": false, "a..b": false, ">": false, "a.b.>.c": false, "task transition": false, "nope": false,
		"delegation.refuse": false, "nope.>": false, "agent.*": false} {
		if audit.ValidKind(k) != want {
			t.Errorf("ValidKind(%q) = %v", k, !want)
		}
	}
}

// No field a host or agent controls can make a record too large to store:
// the writer would otherwise retry it for ever, and every record behind it.
func TestHugeFieldsAreCutAndTheTrailGoesOn(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	l, err := audit.Open(ctx, js, audit.Config{}, 1, "test/1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("a", 1200<<10)
	viol := make([]string, 5000)
	for i := range viol {
		viol[i] = "/parts/0/data/" + huge[:300]
	}
	l.Append(audit.Record{Kind: audit.KindDelegationRefused, Skill: huge, Code: "skill_not_found", Field: huge,
		Verdict: &audit.Verdict{ArtifactID: huge, Violations: viol}})
	l.Append(audit.Record{Kind: audit.KindDelegationAccepted, TaskID: "tsk-after"})
	l.Close(30 * time.Second)
	if l.Written() != 2 || l.Dropped() != 0 {
		t.Fatalf("written %d dropped %d, want 2 0", l.Written(), l.Dropped())
	}
	page, err := audit.Query(ctx, js, audit.Filter{Kind: audit.KindDelegationRefused})
	if err != nil || len(page.Records) != 1 {
		t.Fatal(page, err)
	}
	r := page.Records[0]
	if len(r.Skill) != audit.MaxFieldBytes || !strings.HasSuffix(r.Skill, "…") || len(r.Verdict.Violations) != audit.MaxViolations+1 ||
		r.Verdict.Violations[audit.MaxViolations] != "… 4984 more" {
		t.Errorf("skill %d bytes, %d violations (last %q)", len(r.Skill), len(r.Verdict.Violations), r.Verdict.Violations[len(r.Verdict.Violations)-1])
	}
}

// The newest records come first to an operator's eye: a query without
// since returns the newest that match, and says older ones exist.
func TestQueryReturnsTheNewest(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	l, err := audit.Open(ctx, js, audit.Config{}, 1, "test/1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		kind := audit.KindTransition
		if i%1000 == 999 {
			kind = audit.KindAgentApproved
		}
		l.Append(audit.Record{Kind: kind, TaskID: fmt.Sprintf("tsk-%04d", i), Tenant: "acme"})
	}
	l.Close(30 * time.Second)
	page, err := audit.Query(ctx, js, audit.Filter{Limit: 3})
	if err != nil || len(page.Records) != 3 || !page.More || page.Records[0].TaskID != "tsk-2997" || page.Records[2].TaskID != "tsk-2999" {
		t.Errorf("newest 3: %+v more=%v %v", page.Records, page.More, err)
	}
	page, err = audit.Query(ctx, js, audit.Filter{Kind: audit.KindAgentApproved, Tenant: "acme", Limit: 2})
	if err != nil || len(page.Records) != 2 || !page.More || page.Records[0].TaskID != "tsk-1999" || page.Records[1].TaskID != "tsk-2999" {
		t.Errorf("newest 2 approvals: %+v more=%v %v", page.Records, page.More, err)
	}
	page, err = audit.Query(ctx, js, audit.Filter{Kind: audit.KindAgentApproved, Limit: 3})
	if err != nil || len(page.Records) != 3 || page.More {
		t.Errorf("all 3 approvals: %d more=%v %v", len(page.Records), page.More, err)
	}
	page, err = audit.Query(ctx, js, audit.Filter{TaskID: "tsk-0042", Tenant: "other"})
	if err != nil || len(page.Records) != 0 || page.More {
		t.Errorf("another tenant's task: %+v %v", page, err)
	}
}

// An operator who deletes the stream (with a user allowed to) loses what
// it held, but not what comes after: a2ad creates it again and says so.
func TestADeletedStreamIsCreatedAgain(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	l, err := audit.Open(ctx, js, audit.Config{}, 1, "test/1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(time.Second)
	l.Append(audit.Record{Kind: audit.KindTransition})
	for l.Written() != 1 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := js.DeleteStream(ctx, audit.Stream); err != nil {
		t.Fatal(err)
	}
	l.Append(audit.Record{Kind: audit.KindTransition, TaskID: "tsk-after"})
	deadline := time.Now().Add(30 * time.Second)
	for l.Written() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	page, err := audit.Query(ctx, js, audit.Filter{})
	if err != nil || len(page.Records) != 1 || page.Records[0].TaskID != "tsk-after" || l.Health() != "ok" {
		t.Errorf("after the delete: %+v %v, health %q", page, err, l.Health())
	}
}
