package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/httpbind"
	"github.com/nats-io/nats.go/jetstream"
)

// httpBinding is the HTTP binding as the daemon runs it
// (docs/http-binding.md): the a2a-go clients the broker sends through, and
// the follower that turns what HTTP agents report into events on their
// JetStream events streams.
type httpBinding struct {
	binding  *httpbind.Binding
	follower *httpbind.Follower
}

// newHTTPBinding builds the HTTP binding over the agents of cfg. The
// follower's Store is set, and it is run, once the task store exists; its
// push webhook needs PushBaseURL (set when public_url is).
func newHTTPBinding(ctx context.Context, cfg Config, agents *agentcard.Registry, js jetstream.JetStream, lockedDataDir bool, log *slog.Logger) (*httpBinding, error) {
	auth := map[string]httpbind.AgentConfig{}
	for _, a := range cfg.Agents {
		auth[a.ID] = a.HTTP
	}
	b := httpbind.New(httpbind.Config{Lookup: httpLookup(agents), Agents: auth, Log: log})
	// Push tokens are HMACs of the task id under a key every instance
	// shares: a push may reach any of them.
	pushKey, _, err := sharedSecret(ctx, js, cfg.Replicas, "http-push-token-hmac")
	if err != nil {
		return nil, err
	}
	// With an external NATS the data directory is not locked (instances
	// may share one): each process is then an owner of its own.
	owner := rand.Text()
	if lockedDataDir {
		if owner, err = instanceID(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	return &httpBinding{binding: b, follower: &httpbind.Follower{Binding: b, JS: js, Owner: owner, PushSecret: pushKey, Log: log}}, nil
}

// instanceID is this instance's id as follow leases name it: made once and
// kept in the data directory, which one process at a time holds (its
// lock, taken with the embedded NATS server), so that a restarted instance resumes its own follows at once
// instead of waiting for their leases to lapse.
func instanceID(dataDir string) (string, error) {
	p := filepath.Join(dataDir, "instance-id")
	if b, err := os.ReadFile(p); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	id := rand.Text()
	if err := os.WriteFile(p, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return id, nil
}

// httpLookup finds an HTTP agent's target in the registry, as approved
// now: a quarantined agent, or one whose card no longer offers a usable
// HTTP interface, gets nothing sent.
func httpLookup(agents *agentcard.Registry) httpbind.Lookup {
	return func(agentID string) (httpbind.Target, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := agents.HTTPTarget(ctx, agentID)
		if err != nil {
			return httpbind.Target{}, errors.Join(httpbind.ErrNotHTTP, err)
		}
		t := httpbind.Target{AgentID: agentID, Binding: h.Binding, URL: h.Interface.URL, Tenant: h.Interface.Tenant, CardOrigin: h.CardOrigin}
		if c := h.Capabilities.Streaming; c != nil {
			t.Streaming = *c
		}
		if c := h.Capabilities.PushNotifications; c != nil {
			t.PushNotifications = *c
		}
		return t, nil
	}
}
