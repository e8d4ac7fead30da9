package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
)

// registrations is a2ad's count of fraud-review's approved registrations
// (a2ad_registrations_total, counted per process since its start).
func registrations(t *testing.T, d *daemonProc) string {
	t.Helper()
	l := metricLine(t, d, `a2ad_registrations_total{agent="fraud-review",outcome="approved"}`)
	if l == "" {
		return "0"
	}
	return l[strings.LastIndexByte(l, ' ')+1:]
}

// awaitRegistrations waits up to 15 s (the agent reconnects within 1 s
// and registers every second until answered) for the count to be want.
func awaitRegistrations(t *testing.T, d *daemonProc, want, why string) {
	t.Helper()
	until := time.Now().Add(15 * time.Second)
	for {
		got := registrations(t, d)
		if got == want {
			return
		}
		if time.Now().After(until) {
			t.Fatalf("%s: a2ad_registrations_total{agent=\"fraud-review\",outcome=\"approved\"} = %s, want %s", why, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kickAgent closes, at the NATS server, every connection of the reference
// agent process (the name cmd/fraud-review-agent gives its connection), as
// a network cut would; it returns how many it closed.
func kickAgent(t *testing.T, srv *server.Server) int {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Name == "fraud-review-agent/fraud-review" {
			if err := srv.DisconnectClientByID(c.Cid); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	return n
}

// The reference agent process (cmd/fraud-review-agent) registers its card
// again after its NATS connection comes back (issue 18 point 1: "registers
// the card and re-registers it on reconnect"), seen from a2ad as one more
// registration in a2ad_registrations_total, and it is delegated to after:
//   - nats-kick: a2ad on an external NATS that closes the agent's
//     connection (the server's kick: a cut); a2ad runs on, so its count goes
//     from exactly 1 to exactly 2;
//   - a2ad-restart: a2ad with its embedded NATS stopped (SIGKILL) and
//     started on the same address; the new process counts exactly 1, the
//     registration the reconnected agent made.
func TestAgentReconnectReRegisters(t *testing.T) {
	t.Run("nats-kick", func(t *testing.T) {
		srv, _, _ := natstest.Start(t)
		d := startDaemon(t, nil, external(t, srv.ClientURL())...)
		credFile := filepath.Join(t.TempDir(), "cred")
		if err := os.WriteFile(credFile, []byte(credentialFor(t, srv.ClientURL(), "")), 0o600); err != nil {
			t.Fatal(err)
		}
		runAgent(t, "--nats-url", srv.ClientURL(), "--credential-file", credFile)
		h := connectHost(t, d)
		if got, err := h.delegateWhenAgentKnown(delegateArgs("C-501", 1999, "", 20)); err != nil || got.State != "completed" {
			t.Fatalf("delegate before the cut: %v %+v", err, got)
		}
		awaitRegistrations(t, d, "1", "after the agent started")
		if n := kickAgent(t, srv); n != 1 {
			t.Fatalf("closed %d connections of the agent, want 1", n)
		}
		awaitRegistrations(t, d, "2", "after the agent's connection was cut")
		// Its registration makes a2ad probe it at once (it went offline
		// when cut): reachable within the probe's round trip, not 1 s on.
		h.awaitReachability("fraud-review", "reachable", 5*time.Second)
		if got := h.mustCall("delegate", delegateArgs("C-502", 1999, "", 20)); got.State != "completed" {
			t.Errorf("delegate after the reconnect: %s %q", got.State, got.Reason)
		}
	})
	t.Run("a2ad-restart", func(t *testing.T) {
		flags := []string{"--config", configFile(t, ""), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"}
		d := startDaemon(t, nil, append(flags, "--nats-listen", "127.0.0.1:-1")...)
		flags = append(flags, "--nats-listen", strings.TrimPrefix(d.NATS, "nats://"))
		credFile := filepath.Join(t.TempDir(), "cred")
		if err := os.WriteFile(credFile, []byte(credentialFor(t, d.NATS, d.DataDir)), 0o600); err != nil {
			t.Fatal(err)
		}
		runAgent(t, "--nats-url", d.NATS, "--credential-file", credFile)
		awaitRegistrations(t, d, "1", "after the agent started")
		d.kill(t)
		d2 := startDaemon(t, nil, flags...)
		awaitRegistrations(t, d2, "1", "after a2ad (and its NATS) restarted")
		if got, err := connectHost(t, d2).delegateWhenAgentKnown(delegateArgs("C-503", 1999, "", 20)); err != nil || got.State != "completed" {
			t.Errorf("delegate after the restart: %v %+v", err, got)
		}
	})
}
