package embedded

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// CloseRefused closes the live connections whose credential is refused
// now, and only those: another connection of the same agent, with another
// credential, stays; the refused credential cannot connect again.
func TestCloseRefusedClosesOnlyRefusedCredentials(t *testing.T) {
	var mu sync.Mutex
	revoked := map[string]bool{}
	verify := func(token string) (string, time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		agent, _, _ := strings.Cut(token, ":")
		if revoked[token] {
			return "", time.Time{}, errors.New("revoked")
		}
		return agent, time.Now().Add(time.Hour), nil
	}
	sessions := &Sessions{}
	s, err := Start(Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", MaxStore: 64 << 20, DaemonPassword: strings.Repeat("p", 32),
		VerifyAgent: verify, Sessions: sessions})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	connect := func(token string) (*nats.Conn, chan struct{}) {
		t.Helper()
		closed := make(chan struct{})
		nc, err := nats.Connect(s.ClientURL(), nats.Token(token), nats.MaxReconnects(0),
			nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
		if err != nil {
			t.Fatalf("connect with %s: %v", token, err)
		}
		t.Cleanup(nc.Close)
		return nc, closed
	}
	_, oldClosed := connect("fraud-review:old")
	newConn, _ := connect("fraud-review:new")
	_, otherClosed := connect("mallory:one")

	if got := CloseRefused(s, sessions, verify); len(got) != 0 {
		t.Fatalf("closed %v with nothing refused", got)
	}
	mu.Lock()
	revoked["fraud-review:old"] = true
	mu.Unlock()
	got := CloseRefused(s, sessions, verify)
	if len(got) != 1 || got["fraud-review"] != 1 {
		t.Fatalf("closed %v, want map[fraud-review:1]", got)
	}
	select {
	case <-oldClosed:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection with the refused credential is still open")
	}
	select {
	case <-otherClosed:
		t.Fatal("another agent's connection was closed")
	default:
	}
	if err := newConn.Flush(); err != nil || !newConn.IsConnected() {
		t.Fatalf("the same agent's connection with another credential: %v", err)
	}
	if nc, err := nats.Connect(s.ClientURL(), nats.Token("fraud-review:old"), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("connect with the refused credential: %v, want an authorization violation", err)
	}
}

// The sessions of closed connections are forgotten: the map holds the
// connections open, not every one ever made.
func TestSessionsOfClosedConnectionsAreForgotten(t *testing.T) {
	verify := func(token string) (string, time.Time, error) { return token, time.Now().Add(time.Hour), nil }
	sessions := &Sessions{}
	s, err := Start(Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", MaxStore: 64 << 20, DaemonPassword: strings.Repeat("p", 32),
		VerifyAgent: verify, Sessions: sessions})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	for range 20 {
		nc, err := nats.Connect(s.ClientURL(), nats.Token("agent-a"), nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	keep, err := nats.Connect(s.ClientURL(), nats.Token("agent-b"), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	if n := sessions.len(); n != 21 {
		t.Fatalf("%d sessions after 21 connections, want 21", n)
	}
	for deadline := time.Now().Add(5 * time.Second); s.NumClients() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients, want 1", s.NumClients())
		}
	}
	// Past the grace period, forget keeps the open connection's only.
	sessions.mu.Lock()
	for addr, ses := range sessions.byAddr {
		ses.at = ses.at.Add(-2 * sessionGrace)
		sessions.byAddr[addr] = ses
	}
	sessions.mu.Unlock()
	CloseRefused(s, sessions, verify)
	if n := sessions.len(); n != 1 {
		t.Fatalf("%d sessions with one connection open, want 1", n)
	}
}
