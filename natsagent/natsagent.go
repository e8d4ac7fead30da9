// Package natsagent serves an A2A agent built with the official Go SDK,
// github.com/a2aproject/a2a-go/v2 (v2.4.0), over a2ad's A2A-over-NATS
// binding, urn:a2ad:binding:nats:v1 (docs/nats-binding.md).
//
// An agent author writes an a2asrv.AgentExecutor, builds a request handler
// with a2asrv.NewHandler, and hands it to a [Server]: the same handler a2asrv
// serves over HTTP with a2asrv.NewJSONRPCHandler. The Server does what the
// binding asks of an agent so that the author does not:
//
//   - it subscribes to a2a.agent.<agentId>.rpc in a queue group (replicas
//     share requests) and to its replica's own subject
//     a2a.agent.<agentId>.rpc.<replicaId> (docs/nats-binding.md §5.8);
//   - it registers the card on a2a.registry.register with the agent
//     credential, retrying until a2ad answers, and again after every
//     reconnection (§9);
//   - it answers SendMessage at once with the task, and publishes every
//     later event of the task to the events subject a2ad named, as a
//     JetStream publish with Nats-Msg-Id <a2adTaskId>.<seq>, retrying each
//     until the stream acknowledges it (§6);
//   - it recognises a redelivered messageId and answers it with the task's
//     current state without running the executor again (§5.4);
//   - it answers GetTask, CancelTask and a2ad's liveness probe (§5.5-5.7);
//   - it marks its replies to SendMessage with its replica id, so a2ad sends
//     a task's answer and CancelTask to the replica that holds it (§5.8);
//   - [Server.Shutdown] stops taking requests, lets running tasks publish
//     what they have, and abandons the rest when its context ends.
package natsagent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures a [Server].
type Config struct {
	// AgentID is the agent's id on the binding: one NATS token of 1-128
	// bytes of [A-Za-z0-9_-], the sub of its credential. Required.
	AgentID string
	// Card is the agent's card (A2A 1.0 §4.4.1) as JSON, sent byte for
	// byte in the registration: a2ad fingerprints the bytes it receives.
	// Required; a JSON object. `a2ad agents check-card FILE` checks it
	// offline as a2ad would.
	Card json.RawMessage
	// Credential is the agent credential a2ad minted for AgentID (`a2ad
	// agents credential ID`), sent with every registration as
	// Authorization: Bearer. Empty: the registration carries none and a2ad
	// refuses it (code unauthenticated); the Server serves regardless.
	Credential string
	// QueueGroup is the queue group of the shared RPC subscription, so
	// that replicas of one agent share its requests. Default: AgentID.
	QueueGroup string
	// ReplicaID names this replica: one NATS token. Default: 16 random
	// hex digits, new at every start.
	ReplicaID string
	// MaxLiveTasks bounds the tasks whose events the Server is still
	// publishing (executions running). A SendMessage that would start one
	// more is refused with JSON-RPC -32603 and a message saying so.
	// Default 10,000.
	MaxLiveTasks int
	// RememberMessages bounds the messageIds remembered for deduplication
	// and the tasks remembered for routing (oldest first). Default 100,000.
	RememberMessages int
	// MaxRequestDepth bounds the nesting of arrays and objects in a
	// request: a deeper one is refused with JSON-RPC -32600 before the
	// handler sees it (a2a-go deep-copies each task with encoding/gob,
	// whose cost grows with the square of the depth: 490 MB at 4,000
	// levels). a2ad's briefs nest their evidence at most
	// brief.MaxEvidenceDepth levels (32 by default) inside 6 of the request;
	// raise this with it. Default 128.
	MaxRequestDepth int
	// Logger receives the Server's logs; nil discards them.
	Logger *slog.Logger
}

// ConnectOptions are the NATS options an agent connection needs (A2A over
// NATS §10): the credential as the CONNECT token, the inbox prefix its
// permissions allow (_INBOX_<agentId>), and reconnection forever, from
// the first connection on: an agent started while a2ad is down (or
// restarting) gets from nats.Connect a connection that comes up with
// a2ad's server, rather than an error; [Server.Start] takes it as it is
// and [Server.WaitRegistered] waits for a2ad's answer (A2A over NATS §9).
// A credential the server refuses is then no error of nats.Connect: set
// nats.ErrorHandler or nats.ReconnectErrHandler to see why.
//
// ReconnectWait is 1 s (NATS's default is 2 s): a2ad's embedded server
// restarts in about a second, and the agent re-registers on reconnection.
func ConnectOptions(agentID, credential string) []nats.Option {
	return []nats.Option{
		nats.Token(credential),
		nats.CustomInboxPrefix("_INBOX_" + agentID),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
	}
}

// Server serves one request handler as one replica of an agent. Build it
// with [NewServer]; it is safe for concurrent use.
type Server struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	h       a2asrv.RequestHandler
	cfg     Config
	card    []byte
	log     *slog.Logger
	replica string

	base   context.Context // cancelled when Shutdown gives up: ends every execution and publish
	cancel context.CancelFunc
	reqs   sync.WaitGroup // requests being answered
	execs  sync.WaitGroup // executions publishing events
	bg     sync.WaitGroup // registration
	slots  chan struct{}  // bounds requests answered at once

	mu       sync.Mutex
	started  bool
	stopped  bool
	subs     []*nats.Subscription
	status   chan nats.Status
	live     int
	tasks    *lru[*task]     // by agent task id
	seen     *lru[*delivery] // by SendMessage messageId
	reg      Registration
	stats    Stats
	shutOnce sync.Once
	shutErr  error
	done     chan struct{}
	kick     chan struct{} // asks the registration loop to register (again)
	answered chan struct{} // closed at a2ad's first answer other than rate_limited
	ansOnce  sync.Once
	regStop  chan struct{} // closed by Shutdown: registration ends
}

// NewServer returns a Server for handler on nc. It checks cfg (AgentID a
// valid token, Card a JSON object, ReplicaID a valid token when set).
//
// Errors wrap [ErrConfig].
func NewServer(nc *nats.Conn, handler a2asrv.RequestHandler, cfg Config) (*Server, error) {
	return newServer(nc, handler, cfg)
}

// Start subscribes and starts registering the card in the background. When
// the connection is up it returns once the server has the subscriptions.
// The Server runs until [Server.Shutdown], or until ctx is done (then it
// shuts down as Shutdown with an already-ended context does).
func (s *Server) Start(ctx context.Context) error { return s.start(ctx) }

// Shutdown drains: it unsubscribes (requests sent afterwards get no
// responders, or reach another replica), answers the requests already
// received, lets running tasks go on publishing their events until ctx is
// done, then cancels them and returns ctx's error if any were cut short.
// It does not close the connection. Idempotent.
func (s *Server) Shutdown(ctx context.Context) error { return s.shutdown(ctx) }

// ReplicaID is this replica's id ([Config.ReplicaID] or the one made).
func (s *Server) ReplicaID() string { return s.replica }

// Registration is the outcome of the last registration a2ad answered.
type Registration struct {
	// Status is approved, pending or quarantined; "" when a2ad refused
	// the registration or has not answered yet.
	Status string
	// Fingerprint is the card's fingerprint as a2ad computed it
	// ("sha256:…").
	Fingerprint string
	// Code and Error say why a2ad refused it (docs/nats-binding.md §9:
	// unauthenticated, forbidden, revoked, invalid, rate_limited).
	Code, Error string
}

// ErrRegistrationRefused is wrapped by the error [Server.WaitRegistered]
// returns when a2ad refused the registration.
var ErrRegistrationRefused = errors.New("natsagent: registration refused")

// WaitRegistered blocks until a2ad has answered this Server's first
// registration with anything but rate_limited (which the Server waits out
// and retries), and returns the last outcome; or until ctx is done, then
// with ctx's error. A refusal (Status "") comes with an error wrapping
// [ErrRegistrationRefused] that names a2ad's code: an agent can fail at
// start on a credential a2ad does not take, instead of serving requests
// that never come.
func (s *Server) WaitRegistered(ctx context.Context) (Registration, error) {
	select {
	case <-s.answered:
	case <-ctx.Done():
		return s.Registration(), ctx.Err()
	}
	r := s.Registration()
	if r.Status == "" {
		return r, fmt.Errorf("%w: %s: %s", ErrRegistrationRefused, cmp.Or(r.Code, "unreadable"), cmp.Or(r.Error, "a2ad's answer is not a registration response"))
	}
	return r, nil
}

// Registration returns the last registration outcome.
func (s *Server) Registration() Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg
}

// Stats counts what the Server did since it started.
type Stats struct {
	// Tasks counts SendMessage requests that started a task.
	Tasks int
	// Redeliveries counts SendMessage requests whose messageId was already
	// taken: answered with the task's state, the executor not run again.
	Redeliveries int
	// Cancels counts CancelTask requests for a task the Server holds.
	Cancels int
	// EventsPublished counts events the stream acknowledged;
	// PublishRetries the attempts that were not acknowledged and retried.
	EventsPublished, PublishRetries int
	// Registrations counts registrations a2ad answered.
	Registrations int
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
