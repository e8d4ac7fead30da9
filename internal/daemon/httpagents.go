package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
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
func newHTTPBinding(ctx context.Context, cfg Config, agents *agentcard.Registry, js jetstream.JetStream, log *slog.Logger) (*httpBinding, error) {
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
	return &httpBinding{binding: b, follower: &httpbind.Follower{Binding: b, JS: js, Owner: rand.Text(), PushSecret: pushKey, Log: log}}, nil
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
