package daemon_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"github.com/a2ad/a2ad/internal/testlog"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
)

// registrar sends registrations over the connection of one agent
// (credential and inbox its own), as the agent sends them.
type registrar struct {
	t  *testing.T
	nc *nats.Conn
}

func newRegistrar(t *testing.T, d *daemon.Daemon, id string) registrar {
	t.Helper()
	// nats.go's 2 s connect timeout was too short once on a machine
	// running four builds beside the tests.
	nc, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions(id, mint(t, d, id, time.Hour)), nats.Timeout(10*time.Second))...)
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
	resp, ok := r.try(agentID, credential, body, 5*time.Second)
	if !ok {
		r.t.Fatalf("registration of %s: no answer", agentID)
	}
	return resp
}

// try is register that waits at most wait for the answer, and reports
// whether one came.
func (r registrar) try(agentID, credential string, body []byte, wait time.Duration) (natsbind.RegisterResponse, bool) {
	r.t.Helper()
	if body == nil {
		body, _ = json.Marshal(natsbind.RegisterRequest{AgentID: agentID, Card: a2ad.FraudReviewCard()})
	}
	m := nats.NewMsg(natsbind.RegisterSubject)
	m.Data = body
	if credential != "" {
		m.Header.Set("Authorization", "Bearer "+credential)
	}
	reply, err := r.nc.RequestMsg(m, wait)
	if errors.Is(err, nats.ErrTimeout) {
		return natsbind.RegisterResponse{}, false
	}
	if err != nil {
		r.t.Fatalf("registration of %s: %v", agentID, err)
	}
	var resp natsbind.RegisterResponse
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		r.t.Fatal(err)
	}
	return resp, true
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
// the answer is rate_limited with when to retry — once a second per
// budget; the others get no answer —, and nothing is logged or recorded.
func TestRegistrationsAreRateLimitedPerAgent(t *testing.T) {
	var logs testlog.Buffer
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
	if r := a.register("agent-a", forgedA, nil); r.Code != natsbind.RegisterRateLimited || r.AgentID != "" || r.RetryAfterSeconds < 1 || r.RetryAfterSeconds > 15 ||
		!strings.Contains(r.Error, "registrations without a verified agent credential, together, are limited to 4 a minute: retry in ") {
		t.Errorf("the shared budget spent: %+v, want %s within 15 s", r, natsbind.RegisterRateLimited)
	}
	if r, ok := a.try("agent-a", "", nil, 300*time.Millisecond); ok {
		t.Errorf("a second registration beyond the shared budget within the second got %+v, want no answer", r)
	}
	// agent-a's own budget is whole: agent_limits' 4 a minute.
	for i := range 4 {
		if r := a.register("agent-a", credA, nil); r.Code != "" || r.Status != "approved" {
			t.Fatalf("agent-a's registration %d: %+v", i+1, r)
		}
	}
	waitFor(t, "the audit records stored", func() bool { return d.Audit.Pending() == 0 })
	logLines, records := strings.Count(logs.String(), "\n"), d.Audit.Written()
	// Beyond it, not even the body is read: it is not JSON. One answer a
	// second says rate_limited; the others get none.
	answered := 0
	start := time.Now()
	for range 20 {
		r, ok := a.try("agent-a", credA, []byte("not JSON"), 40*time.Millisecond)
		if !ok {
			continue
		}
		answered++
		if r.Code != natsbind.RegisterRateLimited || r.AgentID != "agent-a" || r.RetryAfterSeconds < 1 || r.RetryAfterSeconds > 15 ||
			r.Error != "registrations of agent agent-a are limited to 4 a minute: retry in "+strconv.Itoa(r.RetryAfterSeconds)+"s" {
			t.Fatalf("agent-a beyond its rate: %+v", r)
		}
	}
	if most := int(time.Since(start)/time.Second) + 1; answered < 1 || answered > most {
		t.Errorf("%d of 20 registrations beyond the rate answered in %v, want one a second", answered, time.Since(start))
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
		if !strings.Contains(err.Error(), "registrations_per_minute -1: want at least 1") {
			t.Errorf("error %q does not name the setting", err)
		}
	}
}

// A flood of bad registrations — 30,000 from a client with its own agent
// credential (whose operator allowed it far more registrations than the
// default, so that every one reaches the card check), 30,000 without a
// credential and 1,000 with a forged one naming another agent — leaves a
// tenant's audit records in a capped audit stream: what reaches the trail
// and the log about the flood is aggregated, and every refusal is still
// accounted for. Beyond the rate, registrations are answered rate_limited
// without being looked at, and an honest agent registering meanwhile gets
// its normal answer from its own budget.
func TestRegistrationFloodKeepsTenantsAuditRecords(t *testing.T) {
	var logs testlog.Buffer
	dir := t.TempDir()
	cfg := daemon.Config{DataDir: dir, NATSListen: "127.0.0.1:-1",
		Audit: audit.Config{MaxBytes: 256 << 10}, // 30,000 records are about 10 MiB
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}},
			// Every registration reaches the card check (and the
			// aggregation), however fast they come.
			{AgentConfig: agentcard.AgentConfig{ID: "flood", Tenants: []string{"default"}},
				Limits: daemon.AgentLimits{RegistrationsPerMinute: 100_000, MaxPublishesPerSecond: 1e7}},
		}}
	ctx := context.Background()
	d, err := daemon.Start(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	// Tenant "default" delegates to the honest agent first.
	credHonest := mint(t, d, "fraud-review", time.Hour)
	ncHonest, err := nats.Connect(d.NATSURL, refagent.ConnectOptions("fraud-review", credHonest)...)
	if err != nil {
		t.Fatal(err)
	}
	defer ncHonest.Close()
	agent, err := refagent.New(ncHonest, refagent.Config{AgentID: "fraud-review", Card: a2ad.FraudReviewCard(), Credential: credHonest,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	waitFor(t, "fraud-review approved", func() bool {
		r, err := d.Service.Agents.Get(ctx, "fraud-review")
		return err == nil && r.Delegable
	})
	ev, _ := json.Marshal(evidence("C-1", 1999))
	host := broker.Principal{Tenant: "default", Subject: "host-1"}
	tk, err := d.Service.Delegate(ctx, host, broker.DelegateRequest{Agent: "fraud-review", Skill: "assess_refund_risk",
		Brief: brief.Request{Objective: "Assess this refund.", Evidence: ev, OutputSchema: "risk_assessment"}})
	if err != nil {
		t.Fatal(err)
	}
	tk, err = d.Service.WaitUntil(ctx, host, tk.ID, 20*time.Second, func(r *task.Record) bool { return r.State.Terminal() }, nil)
	if err != nil || tk.State != task.Completed {
		t.Fatalf("the tenant's delegation: %v %v", tk, err)
	}
	transitions := len(tk.History)
	logsBefore := strings.Count(logs.String(), "\n")

	// The flooding client: a2ad-minted credential of its own, its own inbox.
	credFlood := mint(t, d, "flood", time.Hour)
	nc, err := nats.Connect(d.NATSURL, refagent.ConnectOptions("flood", credFlood)...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	answers := map[string]map[string]int{} // class → code → answers
	var rateLimitedErr string
	window := make(chan struct{}, 256) // requests in flight
	sub, err := nc.Subscribe("_INBOX_flood.flood.*", func(m *nats.Msg) {
		var r natsbind.RegisterResponse
		_ = json.Unmarshal(m.Data, &r)
		class := strings.TrimLeft(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], "0123456789")
		mu.Lock()
		if answers[class] == nil {
			answers[class] = map[string]int{}
		}
		answers[class][cmp.Or(r.Code, r.Status)]++
		if r.Code == natsbind.RegisterRateLimited {
			rateLimitedErr = r.Error
		}
		paced := class != "c"
		mu.Unlock()
		if !paced {
			<-window
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	badCard := []byte(`{"name":"flood","description":"not a card a2ad accepts"}`)
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: "flood", Card: badCard})
	other, _ := agentcred.NewKeys(bytes.Repeat([]byte{7}, 32))
	forged, _, _ := other.Mint("fraud-review", time.Hour, time.Now())
	// Within the flood's rate every registration is answered: 256 wait
	// for their answers at a time. Beyond a rate, only one answer a second
	// comes: those are sent at a pace instead (perSecond), and the answers
	// that come are counted.
	send := func(class string, n int, credential string, perSecond int) {
		t.Helper()
		start := time.Now()
		for i := range n {
			if perSecond == 0 {
				window <- struct{}{}
			} else if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(perSecond))); wait > 0 {
				time.Sleep(wait)
			}
			m := &nats.Msg{Subject: natsbind.RegisterSubject, Reply: "_INBOX_flood.flood." + strconv.Itoa(i) + class, Data: body, Header: nats.Header{}}
			if credential != "" {
				m.Header.Set("Authorization", "Bearer "+credential)
			}
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	began := time.Now()
	written := d.Audit.Written()
	send("c", 30_000, credFlood, 0)
	tookC := time.Since(began)
	send("f", 1_000, forged, 400)
	// The honest agent registers during the flood with its own credential:
	// the forged ones naming it spent the shared budget, not its own.
	honest := nats.NewMsg(natsbind.RegisterSubject)
	honest.Data, _ = json.Marshal(natsbind.RegisterRequest{AgentID: "fraud-review", Card: a2ad.FraudReviewCard()})
	honest.Header.Set("Authorization", "Bearer "+credHonest)
	reply, err := ncHonest.RequestMsg(honest, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var hr natsbind.RegisterResponse
	if err := json.Unmarshal(reply.Data, &hr); err != nil || hr.Code != "" || hr.Status != "approved" {
		t.Errorf("the honest agent's registration during the flood: %s %v", reply.Data, err)
	}
	beganN := time.Now()
	send("n", 30_000, "", 20_000)
	waitFor(t, "every registration within the flood's rate answered", func() bool { return len(window) == 0 })
	time.Sleep(time.Second) // the last answers beyond the rate
	took := time.Since(began)
	t.Logf("30,000 with the flood's credential sent in %v, 30,000 without a credential in %v", tookC.Round(time.Millisecond), time.Since(beganN).Round(time.Millisecond))
	minutes := int(took/time.Minute) + 1 // minute windows the flood touched, at most
	mu.Lock()
	t.Logf("61,000 registrations answered in %v: %v", took.Round(time.Millisecond), answers)
	if answers["c"][natsbind.RegisterInvalid] != 30_000 {
		t.Errorf("registrations with the flood's credential: %v, want 30000 %s (its limit is 100,000 a minute)", answers["c"], natsbind.RegisterInvalid)
	}
	unauthenticated := answers["n"][natsbind.RegisterUnauthenticated] + answers["f"][natsbind.RegisterUnauthenticated]
	if answers["n"][natsbind.RegisterRateLimited] == 0 || answers["f"][natsbind.RegisterRateLimited] == 0 ||
		unauthenticated > (minutes+1)*daemon.DefaultAgentLimits.RegistrationsPerMinute {
		t.Errorf("registrations without a verified credential: %v %v, want at most %d a minute refused, the others %s",
			answers["n"], answers["f"], daemon.DefaultAgentLimits.RegistrationsPerMinute, natsbind.RegisterRateLimited)
	}
	if !regexp.MustCompile(`retry in \d+s`).MatchString(rateLimitedErr) {
		t.Errorf("rate_limited error %q does not say when to retry", rateLimitedErr)
	}
	mu.Unlock()

	// Stopping writes what is still held back; the records are read after a
	// restart on the same data directory.
	agent.Stop()
	d.Stop()
	t.Logf("audit records written during the flood and at stop: %d", d.Audit.Written()-written)
	logLines := strings.Split(logs.String(), "\n")[logsBefore:]
	d2, err := daemon.Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.Stop)
	js, _ := jetstream.New(operatorConn(t, d2))
	query := func(f audit.Filter) []audit.Record {
		t.Helper()
		f.Limit = 1000
		page, err := audit.Query(ctx, js, f)
		if err != nil {
			t.Fatal(err)
		}
		return page.Records
	}

	if got := query(audit.Filter{Tenant: "default", Kind: audit.KindDelegationAccepted}); len(got) != 1 || got[0].TaskID != tk.ID {
		t.Errorf("the tenant's delegation.accepted records after the flood: %d, want the one of %s", len(got), tk.ID)
	}
	if got := query(audit.Filter{TaskID: tk.ID, Kind: audit.KindTransition}); len(got) != transitions {
		t.Errorf("the task's transition records after the flood: %d, want %d", len(got), transitions)
	}
	// Per agent (and for registrations without a verified credential)
	// at most PerAgentRecordsPerMinute records a minute, plus a summary per
	// kind of record when the minute ends or a2ad stops; together they
	// account for every refusal.
	bound := (minutes + 1) * (daemon.PerAgentRecordsPerMinute + 1)
	refused := map[string][2]int{} // actor subject → records, refusals they stand for
	for _, r := range query(audit.Filter{Kind: audit.KindAgentCardRefused}) {
		n := refused[r.Actor.Subject]
		refused[r.Actor.Subject] = [2]int{n[0] + 1, n[1] + 1 + r.Suppressed}
	}
	t.Logf("card_refused records (records, refusals) by actor: %v", refused)
	for actor, want := range map[string]int{"flood": 30_000, "": unauthenticated} {
		if got := refused[actor]; got[0] > bound || got[1] != want {
			t.Errorf("card_refused records of actor %q: %d standing for %d refusals, want at most %d standing for %d", actor, got[0], got[1], bound, want)
		}
	}
	notLogged := regexp.MustCompile(`similar_not_logged=(\d+)`)
	lines, stood := 0, 0
	for _, l := range logLines {
		if !strings.Contains(l, "registration") {
			continue
		}
		lines++
		stood++
		if m := notLogged.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			stood += n
		}
	}
	t.Logf("log lines about registrations: %d standing for %d (of %d lines in all)", lines, stood, len(logLines))
	if lines > 2*bound || stood != 30_000+unauthenticated {
		t.Errorf("log lines about registrations: %d standing for %d, want at most %d standing for %d", lines, stood, 2*bound, 30_000+unauthenticated)
	}
}

// An agent retrying a connection without a credential is logged a few
// times a minute, each kind of refusal apart (not each user name a client
// chose), and the lines say how many like them were not.
func TestRefusedNATSConnectionsAreAggregatedInTheLog(t *testing.T) {
	var logs testlog.Buffer
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1"},
		slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	credA := mint(t, d, "agent-a", time.Hour)
	for _, tok := range []string{"", "forged", credA} {
		for i := range 30 {
			opts := []nats.Option{nats.MaxReconnects(0)}
			switch tok {
			case "":
			case credA: // under user names that are not its agent id
				opts = append(opts, nats.UserInfo("user-"+strconv.Itoa(i), tok))
			default:
				opts = append(opts, nats.Token(tok))
			}
			if nc, err := nats.Connect(d.NATSURL, opts...); err == nil {
				nc.Close()
				t.Fatalf("connection with %q accepted", tok)
			}
		}
	}
	d.Stop()                     // writes the lines held back
	lines := map[string][2]int{} // reason → lines, refusals they stand for
	notLogged := regexp.MustCompile(`similar_not_logged=(\d+)`)
	reason := regexp.MustCompile(`reason="?(no agent credential|agent credential invalid|user )`)
	for _, l := range strings.Split(logs.String(), "\n") {
		m := reason.FindStringSubmatch(l)
		if !strings.Contains(l, `msg="NATS connection refused"`) || m == nil {
			continue
		}
		n := 1
		if k := notLogged.FindStringSubmatch(l); k != nil {
			s, _ := strconv.Atoi(k[1])
			n += s
		}
		lines[m[1]] = [2]int{lines[m[1]][0] + 1, lines[m[1]][1] + n}
	}
	for _, r := range []string{"no agent credential", "agent credential invalid", "user "} {
		if got := lines[r]; got[0] > daemon.PerAgentRecordsPerMinute+1 || got[1] != 30 {
			t.Errorf("%q: %d lines standing for %d refusals, want at most %d standing for 30:\n%s", r, got[0], got[1],
				daemon.PerAgentRecordsPerMinute+1, logs.String())
		}
	}
}

// The agent id a registration without a verified credential claims is
// agent text: the log names it only if it is a valid agent id.
func TestRefusedRegistrationLogsNoClaimedText(t *testing.T) {
	var logs testlog.Buffer
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1"},
		slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	claim := "agent-a\n" + strings.Repeat("level=ERROR msg=forged ", 1000)
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: claim, Card: a2ad.FraudReviewCard()})
	m := &nats.Msg{Subject: natsbind.RegisterSubject, Reply: "_INBOX_agent-a.x", Data: body}
	nc := newRegistrar(t, d, "agent-a").nc
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "agent registration refused") })
	if strings.Contains(logs.String(), "msg=forged") || len(logs.String()) > 4096 {
		t.Errorf("the log quotes the claimed agent id:\n%.500s", logs.String())
	}
}
