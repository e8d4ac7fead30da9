package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/nats-io/nats.go"
)

// mintCredential mints agent id's credential with the real binary through
// d's admin API, --json: the credential and its jti.
func mintCredential(t *testing.T, d *daemonProc, id string) admin.Credential {
	t.Helper()
	out, err := exec.Command(bin, "agents", "credential", id, "--out", "-", "--data-dir", d.DataDir, "--server", d.HTTP, "--ttl", "1h", "--json").Output()
	if err != nil {
		t.Fatalf("a2ad agents credential %s: %v", id, err)
	}
	var c admin.Credential
	if err := json.Unmarshal(out, &c); err != nil || c.Credential == "" || len(c.JTI) != 32 {
		t.Fatalf("a2ad agents credential --json: %s (%v)", out, err)
	}
	return c
}

// revokeCLI runs `a2ad agents revoke` against d and returns its stdout.
func revokeCLI(t *testing.T, d *daemonProc, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"agents", "revoke", "--data-dir", d.DataDir, "--server", d.HTTP}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("a2ad agents revoke %v: %v %s", args, err, stderr)
	}
	return string(out)
}

// agentConn is one connection of agent fraud-review with credential cred,
// without reconnects: disconnected receives the time the connection was
// lost (the server closed it) and is closed then.
func agentConn(t *testing.T, natsURL, cred string) (*nats.Conn, chan time.Time) {
	t.Helper()
	disconnected := make(chan time.Time, 1)
	var once sync.Once
	nc, err := nats.Connect(natsURL, append(refagent.ConnectOptions("fraud-review", cred), nats.MaxReconnects(0),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			once.Do(func() { disconnected <- time.Now(); close(disconnected) })
		}))...)
	if err != nil {
		t.Fatalf("agent connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc, disconnected
}

// registerWith sends fraud-review's registration over nc with credential
// cred in its Authorization header and returns a2ad's answer.
func registerWith(t *testing.T, nc *nats.Conn, cred string) natsbind.RegisterResponse {
	t.Helper()
	card, _ := json.Marshal(map[string]any{"agentId": "fraud-review", "card": json.RawMessage(a2ad.FraudReviewCard())})
	m := nats.NewMsg(natsbind.RegisterSubject)
	m.Header.Set("Authorization", "Bearer "+cred)
	m.Data = card
	reply, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("registration: %v", err)
	}
	var res natsbind.RegisterResponse
	if err := json.Unmarshal(reply.Data, &res); err != nil {
		t.Fatalf("registration answer %s: %v", reply.Data, err)
	}
	return res
}

// refusedAtConnect connects once to natsURL with opts and returns nil if
// the server refused it with an authorization violation, else what
// happened instead.
func refusedAtConnect(natsURL string, opts ...nats.Option) error {
	nc, err := nats.Connect(natsURL, append(opts, nats.MaxReconnects(0))...)
	if nc != nil {
		nc.Close()
	}
	if errors.Is(err, nats.ErrAuthorization) {
		return nil
	}
	return fmt.Errorf("connect: %v, want an authorization violation", err)
}

// closedWithin waits for the connection's loss and returns how long after
// since it was lost.
func closedWithin(t *testing.T, what string, lost chan time.Time, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	select {
	case at := <-lost:
		return at.Sub(since)
	case <-time.After(within - time.Since(since)):
		t.Fatalf("%s still open %s after the revocation", what, within)
		return 0
	}
}

// Two a2ad instances on one NATS (the first one's embedded server; the
// second connects to it as a2ad's user). A credential revoked with `a2ad
// agents revoke --credential JTI` through the second instance is cut off
// on the first within seconds: its live connection is closed, it is
// refused at connect (authorization violation) and at registration
// (code revoked), while another credential of the same agent keeps
// working. `a2ad agents revoke ID` through the first then cuts off every
// credential issued before, a credential minted afterwards works, and
// the audit trail has both revocations with their exact fields.
func TestRevokedCredentialIsCutOffOnEveryInstance(t *testing.T) {
	a := startDaemon(t, nil, "--config", configFile(t, ""), "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0")
	pw, err := os.ReadFile(filepath.Join(a.DataDir, "nats", "daemon-password"))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(a.NATS)
	u.User = url.UserPassword("a2ad", strings.TrimSpace(string(pw)))
	b := startDaemon(t, nil, external(t, u.String())...)

	first, second := mintCredential(t, a, "fraud-review"), mintCredential(t, b, "fraud-review")
	firstConn, firstClosed := agentConn(t, a.NATS, first.Credential)
	secondConn, secondClosed := agentConn(t, a.NATS, second.Credential)
	if res := registerWith(t, firstConn, first.Credential); res.Code != "" || res.Status != "approved" {
		t.Fatalf("registration before the revocation: %+v", res)
	}

	// One credential, revoked through b: a closes its connection.
	revoked := time.Now()
	if out, want := revokeCLI(t, b, "fraud-review", "--credential", first.JTI), "revoked credential "+first.JTI+" of agent fraud-review\n"; out != want {
		t.Fatalf("revoke --credential printed %q, want %q", out, want)
	}
	took := closedWithin(t, "the revoked credential's connection", firstClosed, revoked, 5*time.Second)
	t.Logf("connection with the revoked credential closed %s after revoking on the other instance", took.Round(time.Millisecond))
	if err := refusedAtConnect(a.NATS, refagent.ConnectOptions("fraud-review", first.Credential)...); err != nil {
		t.Fatalf("connect with the revoked credential: %v", err)
	}
	want := natsbind.RegisterResponse{AgentID: "fraud-review", Code: "revoked",
		Error: "agent credential invalid: agent credential revoked (credential " + first.JTI + ")"}
	// Registrations go to either instance (one queue group): every one is refused.
	for range 4 {
		if res := registerWith(t, secondConn, first.Credential); res != want {
			t.Fatalf("registration with the revoked credential: %+v, want %+v", res, want)
		}
	}
	select {
	case <-secondClosed:
		t.Fatal("the agent's other credential was cut off too")
	default:
	}
	if res := registerWith(t, secondConn, second.Credential); res.Code != "" || res.Status != "approved" {
		t.Fatalf("registration with the agent's other credential: %+v, want approved", res)
	}

	// Every credential issued so far, revoked through a, with quarantine.
	revoked = time.Now()
	out := revokeCLI(t, a, "fraud-review", "--quarantine")
	var res admin.Revocation
	raw, err := exec.Command(bin, "agents", "show", "fraud-review", "--json", "--data-dir", a.DataDir, "--server", a.HTTP).Output()
	if err != nil {
		t.Fatal(err)
	}
	var agent struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &agent)
	took = closedWithin(t, "the agent's other connection", secondClosed, revoked, 5*time.Second)
	t.Logf("connection closed %s after revoking every credential", took.Round(time.Millisecond))
	recs := auditOf(t, a, "kind=agent.credential_revoked")
	if len(recs) != 2 {
		t.Fatalf("%d agent.credential_revoked records, want 2: %+v", len(recs), recs)
	}
	before := recs[1]["revoked_before"]
	if s, _ := before.(string); s == "" {
		t.Fatalf("second record has no revoked_before: %+v", recs[1])
	} else if tb, err := time.Parse(time.RFC3339, s); err != nil || tb.Before(revoked.Truncate(time.Second)) || tb.After(revoked.Add(2*time.Second)) {
		t.Fatalf("revoked_before %s, want the revocation's time rounded up to a second (revoked at %s)", s, revoked.UTC().Format(time.RFC3339Nano))
	} else {
		res.RevokedBefore = &tb
	}
	if want := "revoked every credential of agent fraud-review issued before " + res.RevokedBefore.UTC().Format(time.RFC3339) + "\nagent fraud-review quarantined\n"; out != want {
		t.Errorf("revoke printed %q, want %q", out, want)
	}
	if agent.Status != "quarantined" {
		t.Errorf("agent status %q after revoke --quarantine, want quarantined", agent.Status)
	}
	for i, want := range []map[string]any{
		{"kind": "agent.credential_revoked", "actor": map[string]any{"type": "operator", "subject": "a2ad-cli"}, "tenant": "default", "agent_id": "fraud-review", "jti": first.JTI},
		{"kind": "agent.credential_revoked", "actor": map[string]any{"type": "operator", "subject": "a2ad-cli"}, "tenant": "default", "agent_id": "fraud-review", "revoked_before": before},
	} {
		got := recs[i]
		for _, k := range []string{"id", "at", "instance"} {
			if got[k] == nil || got[k] == "" {
				t.Errorf("record %d has no %s", i, k)
			}
			delete(got, k)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("record %d:\n%s\nwant\n%s", i, g, w)
		}
	}
	issued := auditOf(t, a, "kind=agent.credential_issued")
	if len(issued) != 2 || issued[0]["jti"] != first.JTI || issued[1]["jti"] != second.JTI {
		t.Errorf("agent.credential_issued records do not carry the jtis %s, %s: %+v", first.JTI, second.JTI, issued)
	}
	for _, cred := range []string{first.Credential, second.Credential} {
		if err := refusedAtConnect(a.NATS, refagent.ConnectOptions("fraud-review", cred)...); err != nil {
			t.Fatalf("connect with a credential issued before the revocation: %v", err)
		}
	}
	if got := metricOf(t, a, "a2ad_agent_disconnects_total", `agent="fraud-review"`, `reason="revoked"`); got != 2 {
		t.Errorf("a2ad_agent_disconnects_total{reason=revoked} = %v, want 2", got)
	}
	if got := metricOf(t, a, "a2ad_auth_failures_total", `edge="nats"`, `reason="revoked"`); got != 3 {
		t.Errorf("a2ad_auth_failures_total{edge=nats,reason=revoked} = %v, want 3", got)
	}

	// A credential minted after the revocation works, through either instance.
	for _, d := range []*daemonProc{b, a} {
		fresh := mintCredential(t, d, "fraud-review")
		nc, _ := agentConn(t, a.NATS, fresh.Credential)
		if res := registerWith(t, nc, fresh.Credential); res.Code != "" || res.Status != "quarantined" {
			t.Fatalf("registration with a credential minted after the revocation: %+v, want accepted (status quarantined)", res)
		}
	}
}

// auditOf is d's audit records matching query, oldest first.
func auditOf(t *testing.T, d *daemonProc, query string) []map[string]any {
	t.Helper()
	r := &rig{t: t, d: d}
	return r.auditRecords(query)
}

// metricOf is the value of d's series name{labels…}.
func metricOf(t *testing.T, d *daemonProc, name string, labels ...string) float64 {
	t.Helper()
	r := &rig{t: t, d: d}
	return r.metric(name, labels...)
}

// Measured before: once revoked, the reference agent logged two
// authorization violations, stopped reconnecting and ran on without a
// connection, unseen by its supervisor. It now exits with an error that
// says what to do.
func TestRevokedAgentProcessExits(t *testing.T) {
	agentBin := fraudReviewAgent(t)
	d := startDaemon(t, nil, "--config", configFile(t, ""), "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0")
	credFile := filepath.Join(t.TempDir(), "fraud-review.jwt")
	if err := os.WriteFile(credFile, []byte(mintCredential(t, d, "fraud-review").Credential), 0o600); err != nil {
		t.Fatal(err)
	}
	agentLog, exited := startAgentProcess(t, agentBin, "--nats-url", d.NATS, "--credential-file", credFile)
	waitUntil(t, "the agent registered", func() bool { return strings.Contains(agentLog.String(), "connected") })
	if _, err := connectHost(t, d).delegateWhenAgentKnown(delegateArgs("C-5", 1999, "", 10)); err != nil {
		t.Fatal(err)
	}
	revokeCLI(t, d, "fraud-review")
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(agentLog.String(), "NATS connection closed for good") {
			t.Fatalf("the revoked agent ended with %v, want exit status 1 saying its connection closed for good:\n%s", err, agentLog.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the revoked agent still runs 30 s after the revocation:\n%s", agentLog.String())
	}
}

// Measured before: credentials minted straight from NATS (`a2ad agents
// credential ID --nats-url …`, the form for stdio set-ups and the systemd
// README) were missing from the audit trail the docs promise them in.
func TestCredentialMintedOverNATSIsAudited(t *testing.T) {
	d := startDaemon(t, nil, "--config", configFile(t, ""), "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0")
	out, err := exec.Command(bin, "agents", "credential", "fraud-review", "--out", "-", "--nats-url", d.NATS, "--data-dir", d.DataDir, "--ttl", "1h", "--json").Output()
	if err != nil {
		t.Fatalf("a2ad agents credential --nats-url: %v", err)
	}
	var c admin.Credential
	if err := json.Unmarshal(out, &c); err != nil || len(c.JTI) != 32 {
		t.Fatalf("a2ad agents credential --nats-url --json: %s (%v)", out, err)
	}
	var trail []byte
	waitUntil(t, "the issued record", func() bool {
		trail, _ = exec.Command(bin, "audit", "--data-dir", d.DataDir, "--server", d.HTTP, "--kind", "agent.credential_issued", "--json").Output()
		return strings.Contains(string(trail), c.JTI)
	})
	for _, want := range []string{`"agent_id":"fraud-review"`, `"type":"operator"`, `"subject":"nats-cli"`} {
		if !strings.Contains(strings.ReplaceAll(string(trail), " ", ""), want) {
			t.Errorf("the agent.credential_issued record lacks %s:\n%s", want, trail)
		}
	}
}
