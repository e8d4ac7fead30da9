package daemon_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
)

// lockedLog is a log destination tests read while a2ad writes to it.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// registrar sends registrations over the connection of one agent
// (credential and inbox its own), as the agent sends them.
type registrar struct {
	t  *testing.T
	nc *nats.Conn
}

func newRegistrar(t *testing.T, d *daemon.Daemon, id string) registrar {
	t.Helper()
	nc, err := nats.Connect(d.NATSURL, refagent.ConnectOptions(id, mint(t, d, id, time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return registrar{t, nc}
}

// register sends body for agentID with credential ("": none) and returns
// a2ad's answer.
func (r registrar) register(agentID, credential string, body []byte) natsbind.RegisterResponse {
	r.t.Helper()
	if body == nil {
		body, _ = json.Marshal(natsbind.RegisterRequest{AgentID: agentID, Card: a2ad.FraudReviewCard()})
	}
	m := nats.NewMsg(natsbind.RegisterSubject)
	m.Data = body
	if credential != "" {
		m.Header.Set("Authorization", "Bearer "+credential)
	}
	reply, err := r.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		r.t.Fatalf("registration of %s: %v", agentID, err)
	}
	var resp natsbind.RegisterResponse
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		r.t.Fatal(err)
	}
	return resp
}

// counter is the value of a2ad's counter name with labels, 0 if absent.
func counter(t *testing.T, d *daemon.Daemon, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := d.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return max(0, value(m, name, labels))
}

// Registrations are rate-limited per agent before a2ad reads them: an
// agent's own credential spends its own budget (its configured
// registrations_per_minute over agent_limits over the default), and
// registrations without a verified credential — none, or a forged one
// naming another agent — share one budget, never that agent's. Beyond it
// the answer is rate_limited with when to retry, and nothing is logged or
// recorded.
func TestRegistrationsAreRateLimitedPerAgent(t *testing.T) {
	var logs lockedLog
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		AgentLimits: daemon.AgentLimits{RegistrationsPerMinute: 4},
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "agent-a", Tenants: []string{"default"}, TrustOnFirstUse: true}},
			{AgentConfig: agentcard.AgentConfig{ID: "agent-b", Tenants: []string{"default"}, TrustOnFirstUse: true},
				Limits: daemon.AgentLimits{RegistrationsPerMinute: 2}},
		}}, slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	credA, credB, credC := mint(t, d, "agent-a", time.Hour), mint(t, d, "agent-b", time.Hour), mint(t, d, "agent-c", time.Hour)
	other, _ := agentcred.NewKeys(bytes.Repeat([]byte{7}, 32))
	forgedA, _, _ := other.Mint("agent-a", time.Hour, time.Now())
	a, b, c := newRegistrar(t, d, "agent-a"), newRegistrar(t, d, "agent-b"), newRegistrar(t, d, "agent-c")

	// Registrations without a verified credential spend the shared
	// budget of agent_limits (4 a minute), whatever agent they claim.
	for i, cred := range []string{forgedA, "", forgedA, ""} {
		if r := a.register("agent-a", cred, nil); r.Code != natsbind.RegisterUnauthenticated {
			t.Fatalf("registration %d without a verified credential: %+v, want %s", i+1, r, natsbind.RegisterUnauthenticated)
		}
	}
	for _, cred := range []string{forgedA, ""} {
		r := a.register("agent-a", cred, nil)
		if r.Code != natsbind.RegisterRateLimited || r.AgentID != "" || r.RetryAfterSeconds < 1 || r.RetryAfterSeconds > 15 ||
			!strings.Contains(r.Error, "without a verified agent credential may register 4 times a minute: retry in ") {
			t.Errorf("the shared budget spent: %+v, want %s within 15 s", r, natsbind.RegisterRateLimited)
		}
	}
	// agent-a's own budget is whole: agent_limits' 4 a minute.
	for i := range 4 {
		if r := a.register("agent-a", credA, nil); r.Code != "" || r.Status != "approved" {
			t.Fatalf("agent-a's registration %d: %+v", i+1, r)
		}
	}
	waitFor(t, "the audit records stored", func() bool { return d.Audit.Pending() == 0 })
	logLines, records := strings.Count(logs.String(), "\n"), d.Audit.Written()
	// Beyond it, not even the body is read: it is not JSON.
	for range 20 {
		r := a.register("agent-a", credA, []byte("not JSON"))
		if r.Code != natsbind.RegisterRateLimited || r.AgentID != "agent-a" || r.RetryAfterSeconds < 1 || r.RetryAfterSeconds > 15 ||
			r.Error != "agent agent-a may register 4 times a minute: retry in "+strconv.Itoa(r.RetryAfterSeconds)+"s" {
			t.Fatalf("agent-a beyond its rate: %+v", r)
		}
	}
	if got := strings.Count(logs.String(), "\n"); got != logLines {
		t.Errorf("rate-limited registrations logged %d lines:\n%s", got-logLines, logs.String())
	}
	if got := d.Audit.Written() + uint64(d.Audit.Pending()); got != records {
		t.Errorf("rate-limited registrations wrote %d audit records", got-records)
	}
	// agent-b's own limit (2) overrides agent_limits; agent-c, not
	// configured, has agent_limits'.
	for i, want := range []string{"approved", "approved", natsbind.RegisterRateLimited} {
		if r := b.register("agent-b", credB, nil); cmp.Or(r.Code, r.Status) != want {
			t.Errorf("agent-b's registration %d: %+v, want %s", i+1, r, want)
		}
	}
	for i := range 5 {
		want := "pending"
		if i == 4 {
			want = natsbind.RegisterRateLimited
		}
		if r := c.register("agent-c", credC, nil); cmp.Or(r.Code, r.Status) != want {
			t.Errorf("agent-c's registration %d: %+v, want %s", i+1, r, want)
		}
	}
	for labels, want := range map[[2]string]float64{
		{"agent-a", "approved"}: 4, {"agent-a", natsbind.RegisterRateLimited}: 20,
		{"", natsbind.RegisterUnauthenticated}: 4, {"", natsbind.RegisterRateLimited}: 2,
		{"agent-c", natsbind.RegisterRateLimited}: 1,
	} {
		if got := counter(t, d, "a2ad_registrations_total", map[string]string{"agent": labels[0], "outcome": labels[1]}); got != want {
			t.Errorf("a2ad_registrations_total{agent=%q,outcome=%q} = %v, want %v", labels[0], labels[1], got, want)
		}
	}
}

// A negative registrations_per_minute is refused at start.
func TestNegativeRegistrationLimitIsRefused(t *testing.T) {
	for _, cfg := range []daemon.Config{
		{AgentLimits: daemon.AgentLimits{RegistrationsPerMinute: -1}},
		{Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "agent-a"}, Limits: daemon.AgentLimits{RegistrationsPerMinute: -1}}}},
	} {
		cfg.DataDir, cfg.NATSListen = t.TempDir(), "127.0.0.1:-1"
		d, err := daemon.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), false)
		if err == nil {
			d.Stop()
			t.Fatal("started")
		}
		if !strings.Contains(err.Error(), "registrations_per_minute -1: want a positive number") {
			t.Errorf("error %q does not name the setting", err)
		}
	}
}
