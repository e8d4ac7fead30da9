package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/nats-io/nats.go"
)

// Measured before: on an external NATS a revoked credential's agent stayed
// connected (a2ad had no hold on its NATS user), so revoking could only
// quarantine it. With a2ad as the server's auth callout
// (deploy/nats-cluster/auth-callout.conf, nats_auth_callout), the agent
// connects with its a2ad credential alone, confined to its own subjects;
// a forged credential is refused at connect; a credential revoked through
// one instance has its live connection closed within seconds by the
// other, through the system account, and is refused at connect, while
// the agent's other credential keeps working; revoking all of them cuts
// off the rest without quarantining the agent.
func TestAuthCalloutCutsOffRevokedCredentialsOnExternalNATS(t *testing.T) {
	hostPort, seedFile := natstest.StartAuthCallout(t)
	natsURL := "nats://" + hostPort
	cfg := configFile(t, "nats_auth_callout:\n  issuer_seed_file: "+seedFile+"\n")
	// The system account's URL from the environment, as the docs say: it
	// holds a password.
	env := []string{"A2AD_NATS_SYSTEM_URL=nats://a2ad-system:system-secret@" + hostPort}
	instance := func() *daemonProc {
		return startDaemon(t, env, "--config", cfg, "--nats-url", "nats://a2ad:a2ad-secret@"+hostPort, "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0")
	}
	a, b := instance(), instance()
	for _, d := range []*daemonProc{a, b} {
		if !strings.Contains(d.log.String(), "NATS auth callout: agents connect with their a2ad credential") {
			t.Fatalf("a2ad did not say it serves the auth callout:\n%s", tail(d.log.String(), 20))
		}
	}

	first, second := mintCredential(t, a, "fraud-review"), mintCredential(t, b, "fraud-review")
	firstConn, firstClosed := agentConn(t, natsURL, first.Credential)
	secondConn, secondClosed := agentConn(t, natsURL, second.Credential)
	if res := registerWith(t, firstConn, first.Credential); res.Code != "" || res.Status != "approved" {
		t.Fatalf("registration through the callout: %+v, want approved", res)
	}

	// Confined to its own subjects, as on the embedded server.
	var mu sync.Mutex
	var violations []string
	confined, err := nats.Connect(natsURL, append(refagent.ConnectOptions("fraud-review", second.Credential),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, strings.ToLower(err.Error()))
			mu.Unlock()
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer confined.Close()
	for _, subj := range []string{"a2a.agent.other.rpc", "$KV.a2ad_tasks.>", "$SYS.REQ.USER.AUTH"} {
		if _, err := confined.Subscribe(subj, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	_ = confined.Publish("a2a.events.other.tsk-forged", []byte(`{}`))
	_ = confined.Flush()
	for _, want := range []string{`subscription to "a2a.agent.other.rpc"`, `subscription to "$kv.a2ad_tasks.>"`, `subscription to "$sys.req.user.auth"`, `publish to "a2a.events.other.tsk-forged"`} {
		waitUntil(t, "a permissions violation for "+want, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, v := range violations {
				if strings.Contains(v, "permissions violation for "+want) {
					return true
				}
			}
			return false
		})
	}
	confined.Close()

	for name, opts := range map[string][]nats.Option{
		"a forged credential":                     refagent.ConnectOptions("fraud-review", "eyJhbGciOiJFZERTQSJ9.e30.AAAA"),
		"no credential":                           nil,
		"a2ad's user with a wrong password":       {nats.UserInfo("a2ad", "guess")},
		"another agent's id with this credential": {nats.UserInfo("other", first.Credential)},
	} {
		if err := refusedAtConnect(natsURL, opts...); err != nil {
			t.Errorf("with %s: %v", name, err)
		}
	}

	// One credential, revoked through b.
	revoked := time.Now()
	if out, want := revokeCLI(t, b, "fraud-review", "--credential", first.JTI), "revoked credential "+first.JTI+" of agent fraud-review\n"; out != want {
		t.Fatalf("revoke --credential printed %q, want %q", out, want)
	}
	took := closedWithin(t, "the revoked credential's connection", firstClosed, revoked, 5*time.Second)
	t.Logf("connection with the revoked credential closed %s after revoking", took.Round(time.Millisecond))
	if err := refusedAtConnect(natsURL, refagent.ConnectOptions("fraud-review", first.Credential)...); err != nil {
		t.Fatalf("with the revoked credential: %v", err)
	}
	select {
	case <-secondClosed:
		t.Fatal("the agent's other credential was cut off too")
	default:
	}
	if res := registerWith(t, secondConn, second.Credential); res.Code != "" || res.Status != "approved" {
		t.Fatalf("registration with the agent's other credential: %+v, want approved", res)
	}

	// Every credential, revoked through a: the agent is cut off, not
	// quarantined (a2ad holds its connections now).
	revoked = time.Now()
	out := revokeCLI(t, a, "fraud-review")
	took = closedWithin(t, "the agent's other connection", secondClosed, revoked, 5*time.Second)
	t.Logf("connection closed %s after revoking every credential", took.Round(time.Millisecond))
	if strings.Contains(out, "quarantined") || !strings.HasPrefix(out, "revoked every credential of agent fraud-review issued before ") {
		t.Errorf("revoke printed %q, want every credential revoked and no quarantine", out)
	}
	disconnects := metricOf(t, a, "a2ad_agent_disconnects_total", `agent="fraud-review"`, `reason="revoked"`) +
		metricOf(t, b, "a2ad_agent_disconnects_total", `agent="fraud-review"`, `reason="revoked"`)
	if disconnects != 2 {
		t.Errorf("a2ad_agent_disconnects_total{reason=revoked} on both instances = %v, want 2 (one per connection closed)", disconnects)
	}
	// Each refusal at connect is counted by the instance that answered it.
	for reason, want := range map[string]float64{"invalid_credential": 1, "missing_credential": 1, "refused": 1, "revoked": 1} {
		got := metricOf(t, a, "a2ad_auth_failures_total", `edge="nats"`, `reason="`+reason+`"`) +
			metricOf(t, b, "a2ad_auth_failures_total", `edge="nats"`, `reason="`+reason+`"`)
		if got != want {
			t.Errorf("a2ad_auth_failures_total{edge=nats,reason=%s} on both instances = %v, want %v", reason, got, want)
		}
	}
	fresh := mintCredential(t, b, "fraud-review")
	nc, _ := agentConn(t, natsURL, fresh.Credential)
	if res := registerWith(t, nc, fresh.Credential); res.Code != "" || res.Status != "approved" {
		t.Fatalf("registration with a credential minted after the revocation: %+v, want approved", res)
	}
}
