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
	d, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", Agents: agents,
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
