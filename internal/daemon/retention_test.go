package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// startRetaining is start with retention and audit settings.
func startRetaining(t *testing.T, misbehave map[string]string, ret daemon.RetentionConfig, auditCfg audit.Config) *stack {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	dataDir := t.TempDir()
	d, err := daemon.Start(ctx, daemon.Config{
		NATSURL: ns.ClientURL(), HTTPAddr: "127.0.0.1:0", DataDir: dataDir, Retention: ret, Audit: auditCfg,
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}},
	}, log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	s := &stack{d: d, dataDir: dataDir}
	if s.nc, err = nats.Connect(ns.ClientURL(), refagent.ConnectOptions("fraud-review", "")...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.nc.Close)
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s.agent, err = refagent.New(s.nc, refagent.Config{AgentID: "fraud-review", Card: a2ad.FraudReviewCard(), Misbehave: misbehave, Logger: log, Credential: cred}); err != nil {
		t.Fatal(err)
	}
	if err := s.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.agent.Stop)
	waitFor(t, "agent approved", func() bool {
		r, err := d.Service.Agents.Get(ctx, "fraud-review")
		return err == nil && r.Delegable
	})
	token, err := mcpedge.MintDevToken(dataDir, d.Auth.Audience(), "test-host", "default", "a2a:read a2a:delegate", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil)
	if s.session, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.session.Close() })
	return s
}

// adminTasks lists the task ids the admin API shows.
func (s *stack) adminTasks(t *testing.T) []string {
	t.Helper()
	code, b := s.adminGet(t, "/v1/tasks")
	var p admin.TaskPage
	if code != 200 || json.Unmarshal(b, &p) != nil {
		t.Fatalf("GET /v1/tasks: %d %s", code, b)
	}
	var ids []string
	for _, r := range p.Tasks {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

// As a host and an operator see it: an ended task is there until its
// retention passes, then gone everywhere (task_get, the admin API, the
// metrics' gauges) while an open task older than the retention stays; the
// idempotency key of a removed task is refused (its id is never reused); /metrics
// shows both ages and counts the removal.
func TestEndedTasksAreRemovedAfterTheirRetention(t *testing.T) {
	const keep = 3 * time.Second
	s := startRetaining(t, map[string]string{"C-OPEN": "silent"}, daemon.RetentionConfig{EndedTasks: audit.Duration(keep)},
		audit.Config{MaxAge: audit.Duration(48 * time.Hour)})
	m := scrape(t, s.d.HTTPURL)
	for name, want := range map[string]float64{"a2ad_task_retention_seconds": 3, "a2ad_audit_max_age_seconds": 172800,
		"a2ad_tasks_ended": 0, "a2ad_tasks_removal_lag_seconds": 0, "a2ad_tasks_removed_total": 0} {
		if got := value(m, name, nil); got != want {
			t.Errorf("%s = %v at start; want %v", name, got, want)
		}
	}
	open := delegateArgs(evidence("C-OPEN", 10))
	open["wait_seconds"] = 0
	openTask, errText := s.call(t, "delegate", open, nil) // the agent never answers: open until its 60 s deadline
	if errText != "" || (openTask.State != "submitted" && openTask.State != "working") {
		t.Fatalf("open delegation: %+v %s", openTask, errText)
	}
	ended := delegateArgs(evidence("C-DONE", 10))
	ended["idempotency_key"] = "case-C-DONE"
	first, errText := s.call(t, "delegate", ended, nil)
	if errText != "" || first.State != "completed" {
		t.Fatalf("delegation: %+v %s; want completed", first, errText)
	}
	endedAt := time.Now()
	waitFor(t, "the ended task in a2ad_tasks_ended", func() bool { return value(scrape(t, s.d.HTTPURL), "a2ad_tasks_ended", nil) == 1 })
	got, errText := s.call(t, "task_get", map[string]any{"task_id": first.TaskID}, nil)
	if time.Since(endedAt) < keep { // measured after the read: within its retention
		if errText != "" || got.State != "completed" {
			t.Fatalf("task_get within the retention: %+v %s; want the completed task", got, errText)
		}
	}
	waitFor(t, "the removal", func() bool {
		return value(scrape(t, s.d.HTTPURL), "a2ad_tasks_removed_total", nil) == 1
	})
	if _, errText := s.call(t, "task_get", map[string]any{"task_id": first.TaskID}, nil); errText != "task_not_found: task not found: no task of that id is visible to this principal (never delegated, another tenant's, or removed after its retention)" {
		t.Fatalf("task_get of the removed task = %q; want task_not_found", errText)
	}
	if ids := s.adminTasks(t); !slices.Equal(ids, []string{openTask.TaskID}) {
		t.Fatalf("admin API lists %v; want only the open task %s", ids, openTask.TaskID)
	}
	m = scrape(t, s.d.HTTPURL)
	for name, want := range map[string]float64{"a2ad_tasks_ended": 0, "a2ad_tasks_removal_lag_seconds": 0, "a2ad_tasks_removed_total": 1} {
		if got := value(m, name, nil); got != want {
			t.Errorf("%s = %v after the removal; want %v", name, got, want)
		}
	}
	if n := s.d.Service.Scheduled(); n != 1 {
		t.Errorf("the broker schedules %d tasks; want 1, the open one", n)
	}
	// Older than the retention, the open task is still there and open.
	time.Sleep(time.Until(endedAt.Add(keep + time.Second)))
	if again, errText := s.call(t, "task_get", map[string]any{"task_id": openTask.TaskID}, nil); errText != "" || again.State != openTask.State {
		t.Fatalf("task_get of the open task after the retention: %+v %s; want it %s", again, errText, openTask.State)
	}
	// The key's task is gone, and its id is never reused: a repeat of the
	// delegation is told so, and the agent gets no brief.
	briefs := s.agent.Stats().BriefsReceived
	_, errText = s.call(t, "delegate", ended, nil)
	const expired = "idempotency_key_expired: idempotency_key named a task that ended and was removed after its retention (retention.ended_tasks); use a new key"
	if errText != expired {
		t.Fatalf("delegate with the removed task's key = %q; want %q", errText, expired)
	}
	if n := s.agent.Stats().BriefsReceived; n != briefs {
		t.Fatalf("the agent received %d briefs for the expired key; want none", n-briefs)
	}
	ended["idempotency_key"] = "case-C-DONE-2"
	if again, errText := s.call(t, "delegate", ended, nil); errText != "" || again.State != "completed" || again.TaskID == first.TaskID {
		t.Fatalf("delegate with a new key: %+v %s; want a new completed task", again, errText)
	}
}

// Keeping ended tasks for ever is a negative ended_tasks; bad values are
// refused at start naming the key.
func TestRetentionConfig(t *testing.T) {
	s := startRetaining(t, nil, daemon.RetentionConfig{EndedTasks: audit.Duration(-time.Second)}, audit.Config{})
	m := scrape(t, s.d.HTTPURL)
	if got := value(m, "a2ad_task_retention_seconds", nil); !math.IsInf(got, 1) {
		t.Errorf("a2ad_task_retention_seconds = %v when kept for ever; want +Inf", got)
	}
	if got := value(m, "a2ad_audit_max_age_seconds", nil); got != 7776000 {
		t.Errorf("a2ad_audit_max_age_seconds = %v by default; want 7776000 (90 days)", got)
	}
	for _, c := range []struct {
		cfg  daemon.Config
		want string
	}{
		{daemon.Config{Retention: daemon.RetentionConfig{RemovalsPerSecond: -1}}, "config: retention.removals_per_second -1: want 0 (the default, 1000) or more"},
		{daemon.Config{Audit: audit.Config{MaxAge: audit.Duration(-time.Hour)}}, "config: audit.max_age -1h0m0s: want a duration such as 2160h (90 days, the default)"},
	} {
		c.cfg.DataDir = t.TempDir()
		_, err := daemon.Start(context.Background(), c.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		if err == nil || err.Error() != c.want {
			t.Errorf("Start: %v; want %q", err, c.want)
		}
	}
}
