package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/natscluster"
	"github.com/nats-io/nats-server/v2/server"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// At the smallest nats_limits.max_subscriptions_per_connection allowed
// (agents + ownSubscriptions), a2ad's own connection holds every
// subscription it needs: one events consumer per configured agent, and
// none refused.
func TestOwnConnectionFitsTheSmallestSubscriptionLimit(t *testing.T) {
	const n = 100
	var agents []AgentConfig
	for i := range n {
		agents = append(agents, AgentConfig{AgentConfig: agentcard.AgentConfig{ID: fmt.Sprintf("agent-%d", i), Tenants: []string{"default"}}})
	}
	var logs syncBuffer
	d, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0", Agents: agents,
		NATSLimits: NATSLimits{MaxSubscriptionsPerConnection: n + ownSubscriptions},
		// Room in the store for 100 agents' pending events.
		AgentLimits: AgentLimits{MaxPendingBytes: 1 << 20}}, slog.New(slog.NewTextHandler(&logs, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	own := func() int {
		cz, err := d.ns.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.Name == "a2ad" {
				return int(c.NumSubs)
			}
		}
		return -1
	}
	deadline := time.Now().Add(30 * time.Second)
	for own() < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := own(); got < n || got > n+ownSubscriptions {
		t.Fatalf("a2ad's own connection holds %d subscriptions, want %d (one per agent) to %d", got, n, n+ownSubscriptions)
	}
	if strings.Contains(strings.ToLower(logs.String()), "maximum subscriptions") {
		t.Fatalf("a2ad's own subscriptions were refused:\n%s", logs.String())
	}
}

// Measured before: a2ad on nats://127.0.0.1 (loopback, so plain text was
// allowed) added the servers the cluster advertised to its pool and,
// after a node died, reconnected to one at a non-loopback address with
// its password in plain text. In plain text a2ad now keeps to the URLs it
// was given (list every node in nats_url); over TLS, where each server
// must prove its name, it takes what the cluster advertises.
func TestPlainNATSKeepsToTheConfiguredURLs(t *testing.T) {
	c := natscluster.Start(t, 3)
	d, err := Start(context.Background(), Config{NATSURL: c.URL(0), DataDir: t.TempDir(), Replicas: 3}, slog.New(slog.DiscardHandler), false)
	if err != nil {
		t.Fatal(err)
	}
	servers := d.nc.Servers()
	d.Stop()
	if len(servers) != 1 || servers[0] != c.URL(0) {
		t.Errorf("a2ad's connection in plain text would use %q, want only the configured %s", servers, c.URL(0))
	}
}
