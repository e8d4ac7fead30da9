package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// asyncErrs collects a connection's asynchronous errors (the server's
// permission violations arrive that way).
type asyncErrs struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err.Error())
}

// violation waits for the server's permissions violation naming op
// ("Subscription" or "Publish") and subject.
func (a *asyncErrs) violation(t *testing.T, op, subject string) {
	t.Helper()
	want := strings.ToLower(`permissions violation for ` + op + ` to "` + subject + `"`)
	waitFor(t, "a permissions violation for "+op+" to "+subject, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, e := range a.errs {
			if strings.Contains(strings.ToLower(e), want) {
				return true
			}
		}
		return false
	})
}

func startEmbedded(t *testing.T, agents ...string) *daemon.Daemon {
	t.Helper()
	var cfg []daemon.AgentConfig
	for _, id := range agents {
		cfg = append(cfg, daemon.AgentConfig{AgentConfig: agentcard.AgentConfig{ID: id, Tenants: []string{"default"}, TrustOnFirstUse: true}})
	}
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", Agents: cfg},
		slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func mint(t *testing.T, d *daemon.Daemon, id string, ttl time.Duration) string {
	t.Helper()
	tok, _, err := d.AgentKeys.Mint(id, ttl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// On the embedded server an agent connects only with a credential a2ad
// minted, and gets its own subjects only: with agent-a's credential a
// client can neither read agent-b's briefs nor forge agent-b's events, nor
// reach JetStream, the KV buckets or the daemon's inbox.
func TestAgentCredentialConfinesAConnectionToItsOwnSubjects(t *testing.T) {
	d := startEmbedded(t, "agent-a", "agent-b")

	// No credential, a forged one, an expired one, a host-style token:
	// the server refuses the connection.
	other, _ := agentcred.NewKeys(bytes.Repeat([]byte{7}, 32))
	forged, _, _ := other.Mint("agent-a", time.Hour, time.Now())
	expired, _, _ := d.AgentKeys.Mint("agent-a", time.Hour, time.Now().Add(-2*time.Hour))
	for name, opts := range map[string][]nats.Option{
		"no credential":                        nil,
		"forged credential":                    {nats.Token(forged)},
		"expired credential":                   {nats.Token(expired)},
		"wrong daemon password":                {nats.UserInfo("a2ad", "guess")},
		"user name not the credential's agent": {nats.UserInfo("agent-b", mint(t, d, "agent-a", time.Hour))},
	} {
		nc, err := nats.Connect(d.NATSURL, append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}

	// agent-b is the real reference agent, with its own credential.
	credB := mint(t, d, "agent-b", time.Hour)
	ncB, err := nats.Connect(d.NATSURL, refagent.ConnectOptions("agent-b", credB)...)
	if err != nil {
		t.Fatal(err)
	}
	defer ncB.Close()
	agentB, err := refagent.New(ncB, refagent.Config{AgentID: "agent-b", Card: a2ad.FraudReviewCard(), Credential: credB})
	if err != nil {
		t.Fatal(err)
	}
	if err := agentB.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer agentB.Stop()

	// A client holding agent-a's credential.
	var errs asyncErrs
	ncA, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions("agent-a", mint(t, d, "agent-a", time.Hour)), nats.ErrorHandler(errs.handler))...)
	if err != nil {
		t.Fatal(err)
	}
	defer ncA.Close()
	for _, subj := range []string{
		natsbind.AgentSubjects("agent-b"), // agent-b's briefs
		natsbind.RPCSubject("agent-b"),
		"_INBOX_agent-b.>",      // agent-b's replies and acks
		"a2a.events.>",          // every agent's events
		"a2a.registry.register", // registrations, with their credentials
		"$KV.a2ad_tasks.>",      // task records
		"a2ad.audit.>",          // the audit trail
		"_A2AD_INBOX.>",         // the daemon's inbox, where KV watches deliver
		"$JS.API.>",             // JetStream's API
		">",
	} {
		if _, err := ncA.Subscribe(subj, func(*nats.Msg) { t.Errorf("agent-a received a message on %s", subj) }); err != nil {
			t.Fatal(err)
		}
		_ = ncA.Flush()
		errs.violation(t, "subscription", subj)
	}
	ajs, _ := jetstream.New(ncA)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := ajs.KeyValue(ctx, daemon.SecretsBucket); err == nil {
		t.Error("agent-a opened the secrets bucket")
	}

	// agent-a forges an event for agent-b's task: refused by the server,
	// never stored in the events stream.
	forgedEvent := natsbind.EventsSubject("agent-b", "tsk-forged")
	if err := ncA.Publish(forgedEvent, []byte(`{"statusUpdate":{"taskId":"x","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}}}`)); err != nil {
		t.Fatal(err)
	}
	_ = ncA.Flush()
	errs.violation(t, "publish", forgedEvent)
	// agent-a forges an audit record: refused too.
	forgedAudit := "a2ad.audit.agent.approved"
	_ = ncA.Publish(forgedAudit, []byte(`{"kind":"agent.approved","agent_id":"agent-a"}`))
	_ = ncA.Flush()
	errs.violation(t, "publish", forgedAudit)
	// Its own events are acknowledged by JetStream.
	own := nats.NewMsg(natsbind.EventsSubject("agent-a", "tsk-own"))
	own.Data = []byte(`{"statusUpdate":{"taskId":"x","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}`)
	own.Header.Set(natsbind.HeaderMsgID, "tsk-own.1")
	if _, err := ajs.PublishMsg(context.Background(), own); err != nil {
		t.Errorf("agent-a's own event: %v", err)
	}
	op := operatorConn(t, d)
	ojs, _ := jetstream.New(op)
	if _, err := ojs.KeyValue(context.Background(), daemon.SecretsBucket); err != nil {
		t.Errorf("the daemon's user cannot open the secrets bucket: %v", err)
	}
	stream, err := ojs.Stream(context.Background(), task.EventsStream("agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	streamB, err := ojs.Stream(context.Background(), task.EventsStream("agent-b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamB.GetLastMsgForSubject(context.Background(), forgedEvent); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the forged event is in the stream: %v", err)
	}
	if _, err := stream.GetLastMsgForSubject(context.Background(), own.Subject); err != nil {
		t.Errorf("agent-a's own event is not in the stream: %v", err)
	}

	// A request for agent-b is answered by agent-b; agent-a saw nothing
	// (its subscriptions above fail the test if they ever deliver).
	reply, err := natsbind.NewClient(op).Call(context.Background(), "agent-b", "GetTask", map[string]string{"id": "no-such-task"}, nil)
	var rpcErr *a2a.RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Code != a2a.CodeTaskNotFound {
		t.Errorf("GetTask to agent-b: %s %v, want agent-b's task-not-found error", reply, err)
	}
}

// A registration must carry the agent's credential and register the card
// under the credential's own id: a forged card for another agent's id is
// refused, and that agent's record is untouched.
func TestRegistrationNeedsTheAgentsOwnCredential(t *testing.T) {
	ns, _, _ := natstest.Start(t) // external NATS: the registry checks credentials there too
	d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: ns.ClientURL(), DataDir: t.TempDir(),
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "agent-a", Tenants: []string{"default"}, TrustOnFirstUse: true}},
			{AgentConfig: agentcard.AgentConfig{ID: "agent-b", Tenants: []string{"default"}, TrustOnFirstUse: true}},
		}}, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	// The answer goes to the inbox of the agent the credential names (or,
	// without a valid one, the agent the registration claims).
	conns := map[string]*nats.Conn{}
	for _, id := range []string{"agent-a", "agent-b"} {
		nc, err := nats.Connect(ns.ClientURL(), refagent.ConnectOptions(id, "")...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns[id] = nc
	}
	register := func(agentID, credential, inboxOf string) natsbind.RegisterResponse {
		t.Helper()
		body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: agentID, Card: a2ad.FraudReviewCard()})
		m := nats.NewMsg(natsbind.RegisterSubject)
		m.Data = body
		if credential != "" {
			m.Header.Set("Authorization", "Bearer "+credential)
		}
		reply, err := conns[inboxOf].RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r natsbind.RegisterResponse
		if err := json.Unmarshal(reply.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	credA := mint(t, d, "agent-a", time.Hour)
	other, _ := agentcred.NewKeys(bytes.Repeat([]byte{7}, 32))
	forged, _, _ := other.Mint("agent-b", time.Hour, time.Now())

	for name, tc := range map[string]struct {
		agentID, cred, inboxOf, code, msg string
	}{
		"agent-a's credential, agent-b's id": {"agent-b", credA, "agent-a", natsbind.RegisterForbidden, "the credential is for another agent id: it names agent-a, the registration agent-b"},
		"no credential":                      {"agent-b", "", "agent-b", natsbind.RegisterUnauthenticated, "registration needs the agent's credential"},
		"credential not minted by a2ad":      {"agent-b", forged, "agent-b", natsbind.RegisterUnauthenticated, "agent credential invalid: signature does not verify"},
	} {
		r := register(tc.agentID, tc.cred, tc.inboxOf)
		if r.Code != tc.code || !strings.Contains(r.Error, tc.msg) || r.Status != "" || r.Fingerprint != "" {
			t.Errorf("%s: %+v, want code %s and %q", name, r, tc.code, tc.msg)
		}
		if strings.Contains(r.Error, credA) || strings.Contains(r.Error, forged) {
			t.Errorf("%s: the answer quotes the credential", name)
		}
	}
	if rec, err := d.Service.Agents.Get(context.Background(), "agent-b"); err == nil && rec.Fingerprint != "" {
		t.Errorf("agent-b has a card after forged registrations: %s", rec.Fingerprint)
	}
	if r := register("agent-a", credA, "agent-a"); r.Code != "" || r.Status != "approved" || !strings.HasPrefix(r.Fingerprint, "sha256:") {
		t.Errorf("agent-a's own registration: %+v", r)
	}
	// The audit trail names as actor only the agent a credential proved:
	// agent-a for its own and for its forbidden registration, nobody for
	// the two without a credential that verifies (agent-b is only what
	// they claimed).
	ajs, _ := jetstream.New(natstest.Connect(t, ns))
	var got []string
	waitFor(t, "the registrations in the audit trail", func() bool {
		page, err := audit.Query(context.Background(), ajs, audit.Filter{Kind: "agent.>"})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, r := range page.Records {
			got = append(got, r.Kind+" actor="+r.Actor.Subject+" agent="+r.AgentID+" code="+r.Code+" status="+r.Status)
		}
		return len(got) == 4
	})
	slices.Sort(got)
	want := []string{
		"agent.card_refused actor= agent=agent-b code=unauthenticated status=",
		"agent.card_refused actor= agent=agent-b code=unauthenticated status=",
		"agent.card_refused actor=agent-a agent=agent-b code=forbidden status=",
		"agent.registered actor=agent-a agent=agent-a code= status=approved",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("registration records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A registration's reply subject is the sender's choice, and a2ad's own
// connection may publish anywhere: a2ad answers only into the agent's own
// inbox, and does nothing for a request whose reply subject is anything
// else — never a KV key, another agent's subjects or inbox.
func TestRegistrationAnswersOnlyIntoTheAgentsInbox(t *testing.T) {
	d := startEmbedded(t, "agent-a", "agent-b")
	op := operatorConn(t, d)
	ojs, _ := jetstream.New(op)
	kv, err := ojs.KeyValue(context.Background(), "a2ad_agents")
	if err != nil {
		t.Fatal(err)
	}
	// Everything a2ad publishes outside _INBOX_agent-a is watched, but
	// its liveness probes of the approved agent (a request, GetTask of
	// natsbind.ProbeTaskID on the agent's RPC subject).
	seen := make(chan string, 16)
	for _, subj := range []string{"_INBOX_agent-b.>", "a2a.agent.>", "a2a.events.>", "$KV.a2ad_agents.>", "$KV.a2ad_secrets.>", "$KV.a2ad_tasks.>"} {
		if _, err := op.Subscribe(subj, func(m *nats.Msg) {
			if m.Subject == natsbind.RPCSubject("agent-a") && m.Reply != "" && bytes.Contains(m.Data, []byte(`"id":"`+natsbind.ProbeTaskID+`"`)) {
				return
			}
			seen <- m.Subject
		}); err != nil {
			t.Fatal(err)
		}
	}
	_ = op.Flush()
	credA := mint(t, d, "agent-a", time.Hour)
	var errs asyncErrs
	nc, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions("agent-a", credA), nats.ErrorHandler(errs.handler))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: "agent-a", Card: a2ad.FraudReviewCard()})
	for _, reply := range []string{
		"$KV.a2ad_agents.agent-b", "$KV.a2ad_secrets.agent-credential-ed25519-seed", "$KV.a2ad_tasks.tsk-x",
		natsbind.RPCSubject("agent-b"), natsbind.EventsSubject("agent-b", "tsk-x"), "_INBOX_agent-b.x", "_INBOX_agent-a", "_INBOX_agent-a.*",
	} {
		for _, cred := range []string{credA, ""} {
			m := &nats.Msg{Subject: natsbind.RegisterSubject, Reply: reply, Data: body, Header: nats.Header{}}
			if cred != "" {
				m.Header.Set("Authorization", "Bearer "+cred)
			}
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = nc.Flush()
	// A proper registration afterwards is answered: the ones above were
	// processed (in order) before it.
	m := nats.NewMsg(natsbind.RegisterSubject)
	m.Data = body
	m.Header.Set("Authorization", "Bearer "+credA)
	reply, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r natsbind.RegisterResponse
	if err := json.Unmarshal(reply.Data, &r); err != nil || r.Status != "approved" {
		t.Fatalf("the proper registration: %s %v", reply.Data, err)
	}
	_ = op.Flush()
	select {
	case subj := <-seen:
		if !strings.HasPrefix(subj, "$KV.a2ad_agents.agent-a") { // the proper registration's own write
			t.Errorf("a2ad published on %s for a registration's reply subject", subj)
		}
	case <-time.After(500 * time.Millisecond):
	}
	for len(seen) > 0 {
		if subj := <-seen; !strings.HasPrefix(subj, "$KV.a2ad_agents.agent-a") {
			t.Errorf("a2ad published on %s for a registration's reply subject", subj)
		}
	}
	if _, err := kv.Get(context.Background(), "agent-b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("agent-b's record: %v, want none", err)
	}
	if _, err := daemon.AgentKeys(context.Background(), ojs, 1); err != nil {
		t.Errorf("the credential seed was damaged: %v", err)
	}
}

// A connection lasts no longer than its credential: the embedded server
// closes it at the credential's expiry.
func TestAgentConnectionEndsWhenItsCredentialExpires(t *testing.T) {
	d := startEmbedded(t)
	endsWithCredential(t, d, d.NATSURL, "agent-a")
}

// endsWithCredential connects to natsURL as agent id with a credential of
// d good for 2 s and waits for the server to close the connection with
// "authentication expired".
func endsWithCredential(t *testing.T, d *daemon.Daemon, natsURL, id string) {
	t.Helper()
	closed := make(chan error, 4)
	nc, err := nats.Connect(natsURL, append(refagent.ConnectOptions(id, mint(t, d, id, 2*time.Second)),
		nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { closed <- err }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case err := <-closed:
		if !errors.Is(err, nats.ErrAuthExpired) {
			t.Errorf("closed with %v, want %v", err, nats.ErrAuthExpired)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection outlived its credential")
	}
}

// operatorConn connects as a2ad's own user, with the password in the data
// directory, as operators' tools on the host do.
func operatorConn(t *testing.T, d *daemon.Daemon) *nats.Conn {
	t.Helper()
	pw, err := os.ReadFile(daemon.DaemonPasswordPath(d.Config.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(daemon.DaemonPasswordPath(d.Config.DataDir)); fi.Mode().Perm() != 0o600 {
		t.Errorf("password file mode %v, want 0600", fi.Mode().Perm())
	}
	nc, err := nats.Connect(d.NATSURL, nats.UserInfo("a2ad", strings.TrimSpace(string(pw))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startAccountsConf runs a NATS server (in this process) with
// deploy/nats-cluster/accounts.conf as shipped, the passwords from the
// environment as nats-server reads them: a2ad-secret for user a2ad,
// fraud-review-secret for the agent. It returns the server's host:port.
func startAccountsConf(t *testing.T) string {
	t.Helper()
	accounts, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats-cluster", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("A2AD_NATS_PASSWORD", "a2ad-secret")
	t.Setenv("FRAUD_REVIEW_NATS_PASSWORD", "fraud-review-secret")
	t.Setenv("SYS_NATS_PASSWORD", "sys-secret")
	return natstest.StartConfig(t, "include ./accounts.conf\n", map[string][]byte{"accounts.conf": accounts})
}

// runFraudReview runs the reference agent fraud-review on nc with
// credential cred until the test ends, and waits until d has it approved
// and delegable.
func runFraudReview(t *testing.T, d *daemon.Daemon, nc *nats.Conn, cred string) {
	t.Helper()
	agent, err := refagent.New(nc, refagent.Config{AgentID: "fraud-review", Card: a2ad.FraudReviewCard(), Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	waitFor(t, "fraud-review to register", func() bool {
		rec, err := d.Service.Agents.Get(context.Background(), "fraud-review")
		return err == nil && rec.Status == agentcard.StatusApproved && rec.Delegable
	})
}

// deploy/nats-cluster/accounts.conf gives an external NATS the same
// per-agent permissions: a2ad and the reference agent work through it, and
// the agent's NATS user cannot touch another agent's subjects or JetStream.
func TestDeployAccountsConfConfinesAgentsOnExternalNATS(t *testing.T) {
	hostPort := startAccountsConf(t)
	d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: "nats://a2ad:a2ad-secret@" + hostPort, DataDir: t.TempDir(),
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	agentURL := "nats://fraud-review:fraud-review-secret@" + hostPort
	cred := mint(t, d, "fraud-review", time.Hour)
	var errs asyncErrs
	nc, err := nats.Connect(agentURL, append(refagent.ConnectOptions("fraud-review", cred), nats.ErrorHandler(errs.handler))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	runFraudReview(t, d, nc, cred)
	for _, subj := range []string{natsbind.AgentSubjects("other"), "_INBOX_other.>", "$KV.a2ad_tasks.>", "_A2AD_INBOX.>"} {
		if _, err := nc.Subscribe(subj, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		errs.violation(t, "subscription", subj)
	}
	forged := natsbind.EventsSubject("other", "tsk-forged")
	_ = nc.Publish(forged, []byte(`{}`))
	_ = nc.Flush()
	errs.violation(t, "publish", forged)
	_ = nc.Publish("$JS.API.STREAM.LIST", nil)
	_ = nc.Flush()
	errs.violation(t, "publish", "$JS.API.STREAM.LIST")
	_ = nc.Publish("a2ad.audit.agent.approved", []byte(`{}`))
	_ = nc.Flush()
	errs.violation(t, "publish", "a2ad.audit.agent.approved")
	if _, err := nats.Connect("nats://fraud-review:guess@"+hostPort, nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("a wrong password: %v, want an authorization violation", err)
	}
}

// a2ad's own NATS user may do anything but erase the audit trail or
// change how long it is kept: on the embedded server and with
// deploy/nats-cluster/accounts.conf, updating A2AD_AUDIT (a max_age of a
// second would erase it at once), deleting or purging it, or deleting a
// record of it is a permissions violation, and the stream's configuration
// and records are the same afterwards.
func TestNoOneErasesTheAuditTrail(t *testing.T) {
	for _, setup := range []struct {
		name  string
		start func(t *testing.T) (d *daemon.Daemon, url string, user nats.Option)
	}{
		{"embedded", func(t *testing.T) (*daemon.Daemon, string, nats.Option) {
			d := startEmbedded(t)
			pw, err := os.ReadFile(daemon.DaemonPasswordPath(d.Config.DataDir))
			if err != nil {
				t.Fatal(err)
			}
			return d, d.NATSURL, nats.UserInfo("a2ad", strings.TrimSpace(string(pw)))
		}},
		{"accounts.conf", func(t *testing.T) (*daemon.Daemon, string, nats.Option) {
			hostPort := startAccountsConf(t)
			d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: "nats://a2ad:a2ad-secret@" + hostPort, DataDir: t.TempDir()},
				slog.New(slog.NewTextHandler(io.Discard, nil)), false)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Stop)
			return d, "nats://" + hostPort, nats.UserInfo("a2ad", "a2ad-secret")
		}},
	} {
		t.Run(setup.name, func(t *testing.T) {
			d, url, user := setup.start(t)
			d.Audit.Append(audit.Record{Kind: audit.KindAgentApproved, AgentID: "fraud-review", Actor: audit.Actor{Type: audit.ActorOperator, Subject: "ops"}})
			waitFor(t, "the record to be stored", func() bool { return d.Audit.Written() == 1 })
			var errs asyncErrs
			op, err := nats.Connect(url, user, nats.ErrorHandler(errs.handler))
			if err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			js, _ := jetstream.New(op)
			st, err := js.Stream(context.Background(), audit.Stream)
			if err != nil {
				t.Fatalf("the audit stream: %v", err)
			}
			before, err := st.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			try := func(what, subject string, f func(context.Context) error) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if err := f(ctx); err == nil {
					t.Errorf("a2ad's user could %s", what)
				}
				errs.violation(t, "publish", subject)
			}
			short := before.Config
			short.MaxAge, short.Duplicates = time.Second, time.Second
			try("shorten the audit stream's max_age", "$JS.API.STREAM.UPDATE.A2AD_AUDIT", func(ctx context.Context) error {
				_, err := js.UpdateStream(ctx, short)
				return err
			})
			try("delete the audit stream", "$JS.API.STREAM.DELETE.A2AD_AUDIT", func(ctx context.Context) error { return js.DeleteStream(ctx, audit.Stream) })
			try("purge the audit stream", "$JS.API.STREAM.PURGE.A2AD_AUDIT", func(ctx context.Context) error { return st.Purge(ctx) })
			try("delete an audit record", "$JS.API.STREAM.MSG.DELETE.A2AD_AUDIT", func(ctx context.Context) error {
				return st.DeleteMsg(ctx, before.State.FirstSeq)
			})
			after, err := st.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(after.Config, before.Config) {
				t.Errorf("the audit stream's configuration changed:\n got %+v\nwant %+v", after.Config, before.Config)
			}
			if after.State.FirstSeq != before.State.FirstSeq || after.State.Msgs != before.State.Msgs || after.State.Msgs == 0 {
				t.Errorf("records: first %d, %d of them; before: first %d, %d", after.State.FirstSeq, after.State.Msgs, before.State.FirstSeq, before.State.Msgs)
			}
			if _, err := st.GetMsg(context.Background(), before.State.FirstSeq); err != nil {
				t.Errorf("the first record: %v", err)
			}
			// Its other streams stay its own to manage.
			if _, err := js.Stream(context.Background(), "KV_a2ad_tasks"); err != nil {
				t.Errorf("a2ad's user lost its task bucket: %v", err)
			}
		})
	}
}
