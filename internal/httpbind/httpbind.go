// Package httpbind is a2ad's binding to standard A2A 1.0 agents over HTTP
// (JSON-RPC and HTTP+JSON, A2A 1.0 §9 and §11), built on the official Go
// SDK, github.com/a2aproject/a2a-go/v2 (docs/http-binding.md).
//
// It sits beside natsbind: the broker sends briefs, answers and
// cancellations through [Binding.Send] (broker.Binding) and, because
// standard agents do not deduplicate messageId, asks [Binding.Reconcile]
// before it sends again a message whose earlier delivery has an unknown
// outcome. What the agent reports is observed by the [Follower] (one a2ad
// instance per task, under a lease in the task record: SubscribeToTask,
// GetTask polls, push notifications) and published on the agent's
// JetStream events stream with deterministic Nats-Msg-Ids, so the tracker
// applies each change once, exactly as it applies a NATS agent's events.
package httpbind

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// Target is where and how a2ad reaches one HTTP agent, from its approved
// card (agentcard.Record.Interface and the card's capabilities).
type Target struct {
	AgentID string
	// Binding is the interface's protocolBinding: agentcard.BindingJSONRPC
	// or agentcard.BindingHTTPJSON.
	Binding string
	// URL is the interface's url; Tenant its tenant ("" for none).
	URL    string
	Tenant string
	// Streaming and PushNotifications are the card's capabilities.
	Streaming         bool
	PushNotifications bool
	// CardOrigin is the origin (scheme://host[:port], RFC 6454) the card
	// was fetched from; "" for a card registered over NATS.
	CardOrigin string
}

// ErrNotHTTP: the agent has no approved card with an HTTP interface a2ad
// delegates over now (it is a NATS agent, quarantined, or unknown).
var ErrNotHTTP = errors.New("agent has no HTTP interface a2ad delegates over")

// Lookup returns agentID's [Target], or an error wrapping [ErrNotHTTP].
type Lookup func(agentID string) (Target, error)

// Config configures a [Binding].
type Config struct {
	// Lookup finds each agent's target (the daemon reads its registry).
	Lookup Lookup
	// Agents is each HTTP agent's own configuration, by agent id.
	Agents map[string]AgentConfig
	// Limits bound responses and waits (zero fields: the Default* values).
	Limits Limits
	// RootCAs verifies agents' and token endpoints' TLS certificates
	// (nil: the system's roots).
	RootCAs *x509.CertPool
	Log     *slog.Logger
}

// AgentConfig is one agent's configuration for the HTTP binding: the
// `http` key of its entry in the configuration file's agents list.
type AgentConfig struct {
	// Auth is how a2ad authenticates to the agent (never with a host's
	// token).
	Auth Auth `yaml:"auth"`
}

// Auth is outbound authentication to one agent: at most one of a bearer
// token read from a file, or OAuth 2.0 client credentials (RFC 6749
// §4.4). Zero: no Authorization header.
type Auth struct {
	// BearerTokenFile holds the token sent as "Authorization: Bearer"
	// (RFC 6750); surrounding whitespace is ignored.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// OAuth2 is the client-credentials grant whose access token is sent.
	OAuth2 *OAuth2 `yaml:"oauth2"`
}

// OAuth2 is an OAuth 2.0 client-credentials grant (golang.org/x/oauth2/clientcredentials).
type OAuth2 struct {
	TokenURL         string   `yaml:"token_url"`
	ClientID         string   `yaml:"client_id"`
	ClientSecretFile string   `yaml:"client_secret_file"`
	Scopes           []string `yaml:"scopes"`
}

// Binding is the HTTP binding: one a2a-go client per agent, rebuilt when
// the agent's target changes.
type Binding struct {
	cfg Config

	mu      sync.Mutex
	clients map[string]*agentClient
}

type agentClient struct {
	target Target
	client *a2aclient.Client
	http   *http.Client
}

// New returns a Binding.
func New(cfg Config) *Binding {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return &Binding{cfg: cfg, clients: map[string]*agentClient{}}
}

// Client returns the a2a-go client for agentID and the target it was
// built for. The client's *http.Client is a2ad's (newHTTPClient): TLS 1.2
// at least, https only (plain http only to loopback), every request to
// the interface URL's origin and no other, no redirects followed, bodies
// and stream events bounded by [Limits], a2ad's own Authorization
// ([Auth]) and never another, User-Agent "a2ad", A2A-Version 1.0 (set by
// a2a-go), and traceparent when the call's context has one
// ([WithTraceparent]).
//
// Errors: wrapping [ErrNotHTTP]; a *[URLError] (the target's URL is not
// one a2ad sends to); an error naming the agent's auth key when its
// configuration is invalid; an *[AuthError] when a credential file cannot
// be read. The last two wrap a2a.ErrAgentUnreachable where nothing could
// be sent.
func (b *Binding) Client(ctx context.Context, agentID string) (*a2aclient.Client, Target, error) {
	t, err := b.cfg.Lookup(agentID)
	if err != nil {
		return nil, Target{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.clients[agentID]; ok && c.target == t {
		return c.client, t, nil
	}
	c, hc, err := b.build(ctx, t)
	if err != nil {
		return nil, Target{}, err
	}
	if old, ok := b.clients[agentID]; ok {
		_ = old.client.Destroy()
		old.http.CloseIdleConnections()
	}
	b.clients[agentID] = &agentClient{target: t, client: c, http: hc}
	return c, t, nil
}

// build makes the hardened a2a-go client of target t.
func (b *Binding) build(ctx context.Context, t Target) (*a2aclient.Client, *http.Client, error) {
	u, err := checkURL(t.AgentID, t.URL)
	if err != nil {
		return nil, nil, err
	}
	auth := b.cfg.Agents[t.AgentID].Auth
	var tokenClient *http.Client
	if auth.OAuth2 != nil {
		if tokenClient, err = newTokenClient(t.AgentID, auth.OAuth2.TokenURL, b.cfg.Limits, b.cfg.RootCAs); err != nil {
			return nil, nil, err
		}
	}
	cred, err := newCredential(t.AgentID, auth, tokenClient)
	if err != nil {
		return nil, nil, err
	}
	hc := newHTTPClient(t.AgentID, origin(u), cred, b.cfg.Limits, b.cfg.RootCAs)
	var opt a2aclient.FactoryOption
	switch t.Binding {
	case string(a2a.TransportProtocolJSONRPC):
		opt = a2aclient.WithJSONRPCTransport(hc)
	case string(a2a.TransportProtocolHTTPJSON):
		opt = a2aclient.WithRESTTransport(hc)
	default:
		return nil, nil, fmt.Errorf("%w: agent %s: binding %q is neither JSONRPC nor HTTP+JSON", ErrNotHTTP, t.AgentID, t.Binding)
	}
	iface := &a2a.AgentInterface{URL: t.URL, ProtocolBinding: a2a.TransportProtocol(t.Binding), ProtocolVersion: a2a.Version, Tenant: t.Tenant}
	c, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{iface}, a2aclient.WithDefaultsDisabled(), opt)
	if err != nil {
		return nil, nil, fmt.Errorf("agent %s: no a2a-go client for its interface", t.AgentID)
	}
	return c, hc, nil
}
