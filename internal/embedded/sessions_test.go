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
