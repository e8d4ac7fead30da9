// Package natsbind implements the A2A-over-NATS binding, version 1
// (urn:a2ad:binding:nats:v1, written down in docs/nats-binding.md): subject
// names, headers, and the request side used by a2ad to call an agent.
//
// Subjects:
//
//	a2a.agent.<agentId>.rpc           daemon -> agent, JSON-RPC 2.0 request/reply
//	a2a.events.<agentId>.<taskId>     agent -> daemon, one A2A 1.0 stream item per message
//	a2a.registry.register             agent -> daemon, card registration (request/reply)
package natsbind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/nats-io/nats.go"
)

// BindingURI identifies this binding in an agent card's
// supportedInterfaces[].protocolBinding.
const BindingURI = "urn:a2ad:binding:nats:v1"

// Header names used by the binding.
const (
	HeaderA2AVersion  = "A2A-Version"
	HeaderMsgID       = nats.MsgIdHdr // "Nats-Msg-Id": deduplicates event redelivery
	HeaderTraceparent = "traceparent"
	// HeaderReplica, on an agent's reply to a SendMessage, names the
	// replica that holds the task (one NATS token): a2ad sends the task's
	// later requests (the answer, CancelTask) to [ReplicaSubject] first
	// (docs/nats-binding.md §5.8).
	HeaderReplica = "A2ad-Replica"
)

// HeaderValue is the first value of header name in h, the name matched
// case-insensitively: A2A service parameter names are (A2A 1.0 §3.2.6,
// docs/nats-binding.md §4), NATS header names are not, and an agent in
// another language may write "a2ad-replica". "" when absent.
func HeaderValue(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// RegisterSubject is where agents send their card registration.
const RegisterSubject = "a2a.registry.register"

// EventsWildcard matches every event subject; the events stream captures it.
const EventsWildcard = "a2a.events.>"

// ErrAgentOffline means no agent process is subscribed to the agent's RPC
// subject (NATS "no responders").
var ErrAgentOffline = fmt.Errorf("%w: no responder on its NATS subject", a2a.ErrAgentUnreachable)

// ErrBadSubject is returned for a subject or id that is not a valid single
// NATS token.
var ErrBadSubject = errors.New("natsbind: invalid subject token")

// RPCSubject returns a2a.agent.<agentId>.rpc.
func RPCSubject(agentID string) string { return "a2a.agent." + agentID + ".rpc" }

// ReplicaSubject returns a2a.agent.<agentId>.rpc.<replicaId>: the subject
// one replica of an agent serves alone (no queue group), beside the shared
// [RPCSubject] (docs/nats-binding.md §5.8).
func ReplicaSubject(agentID, replicaID string) string {
	return "a2a.agent." + agentID + ".rpc." + replicaID
}

// AgentSubjects returns the wildcard an agent subscribes under,
// a2a.agent.<agentId>.>.
func AgentSubjects(agentID string) string { return "a2a.agent." + agentID + ".>" }

// EventsSubject returns a2a.events.<agentId>.<taskId>.
func EventsSubject(agentID, taskID string) string {
	return "a2a.events." + agentID + "." + taskID
}

// ParseEventsSubject splits a2a.events.<agentId>.<taskId>.
func ParseEventsSubject(subj string) (agentID, taskID string, err error) {
	p := strings.Split(subj, ".")
	if len(p) != 4 || p[0] != "a2a" || p[1] != "events" || p[2] == "" || p[3] == "" {
		return "", "", fmt.Errorf("%w: %q is not a2a.events.<agentId>.<taskId>", ErrBadSubject, subj)
	}
	return p[2], p[3], nil
}

// ValidToken reports whether s can be one NATS subject token (and a KV key
// part): 1..128 bytes of [A-Za-z0-9_-].
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// RegisterRequest is the body of a registration request.
type RegisterRequest struct {
	AgentID string          `json:"agentId"`
	Card    json.RawMessage `json:"card"` // the exact bytes the agent sent: the fingerprint is over them
}

// RegisterResponse is the daemon's answer to a registration. When the
// registration is refused, Code is one of the Register* codes and Error
// says why.
type RegisterResponse struct {
	AgentID     string `json:"agentId"`
	Status      string `json:"status,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Code        string `json:"code,omitempty"`
	Error       string `json:"error,omitempty"`
	// RetryAfterSeconds comes with RegisterRateLimited: the agent may
	// register again after that many seconds (whole, at least 1), which
	// Error names too.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

// Registration refusal codes (RegisterResponse.Code).
const (
	// RegisterUnauthenticated: no credential, or one that does not verify.
	RegisterUnauthenticated = "unauthenticated"
	// RegisterForbidden: the credential is another agent's.
	RegisterForbidden = "forbidden"
	// RegisterInvalid: the request or the card is malformed or refused.
	RegisterInvalid = "invalid"
	// RegisterRateLimited: the agent registered more often than a2ad
	// allows it (registrations_per_minute); nothing of this registration
	// was read. Retry after RetryAfterSeconds.
	RegisterRateLimited = "rate_limited"
	// RegisterRevoked: the credential verifies but an operator revoked it
	// (`a2ad agents revoke`); a new one must be minted.
	RegisterRevoked = "revoked"
)

// Client calls agents over the binding. Its zero value is not usable; build
// one with NewClient.
type Client struct {
	nc        *nats.Conn
	seq       atomic.Uint64
	fallbacks atomic.Uint64
}

// NewClient returns a Client over an established connection.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

// Call sends one JSON-RPC request to agentID and returns the result bytes.
// Errors: [ErrAgentOffline] when nobody listens, context errors on timeout,
// *a2a.RPCError when the agent answered with an error, errors wrapping
// a2a.ErrDecode for a malformed reply.
func (c *Client) Call(ctx context.Context, agentID, method string, params any, hdr nats.Header) ([]byte, error) {
	res, _, err := c.call(ctx, agentID, "", method, params, hdr)
	return res, err
}

// call is [Client.Call] to replica (or, when replica is "", the shared
// subject), returning the reply's [HeaderReplica] as the agent sent it
// (unchecked). A replica that is gone (no responders on its subject) is
// asked on the shared subject at once, within the same ctx.
func (c *Client) call(ctx context.Context, agentID, replica, method string, params any, hdr nats.Header) ([]byte, string, error) {
	id := fmt.Sprintf("%d", c.seq.Add(1))
	req, err := a2a.NewRequest(id, method, params)
	if err != nil {
		return nil, "", err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	subject := RPCSubject(agentID)
	if replica != "" {
		subject = ReplicaSubject(agentID, replica)
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	for k, v := range hdr {
		msg.Header[k] = v
	}
	msg.Header.Set(HeaderA2AVersion, a2a.Version)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil && replica != "" && errors.Is(err, nats.ErrNoResponders) {
		// The replica is gone: any replica may answer for it now (§5.8).
		c.fallbacks.Add(1)
		msg.Subject = RPCSubject(agentID)
		reply, err = c.nc.RequestMsgWithContext(ctx, msg)
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, "", fmt.Errorf("%w (%s)", ErrAgentOffline, agentID)
		}
		return nil, "", err
	}
	resp, err := a2a.DecodeResponse(reply.Data)
	if err != nil {
		return nil, "", err
	}
	if resp.ID != id {
		// The agent's id is not quoted: it is agent text.
		return nil, "", fmt.Errorf("%w: the response's id is not the request's (%q)", a2a.ErrDecode, id)
	}
	return resp.Result, HeaderValue(reply.Header, HeaderReplica), nil
}

// Fallbacks is how many requests this Client sent to a replica's subject
// that found no responder there and went to the shared subject instead.
func (c *Client) Fallbacks() uint64 { return c.fallbacks.Load() }

// Send is [Client.Call] as the broker's binding interface has it
// (broker.Binding): params already encoded, the W3C traceparent (or "")
// sent as the traceparent header.
func (c *Client) Send(ctx context.Context, agentID, method string, params json.RawMessage, traceparent string) (json.RawMessage, error) {
	var hdr nats.Header
	if traceparent != "" {
		hdr = nats.Header{HeaderTraceparent: []string{traceparent}}
	}
	return c.Call(ctx, agentID, method, params, hdr)
}

// SendTo is [Client.Send] to one replica of the agent (broker.Router,
// docs/nats-binding.md §5.8): to [ReplicaSubject](agentID, replica) when
// replica is not "" — and, when nobody is subscribed there (NATS no
// responders: the replica is gone), at once to the shared [RPCSubject] —
// else to the shared subject. It also returns the reply's [HeaderReplica]
// when it is a valid token ([ValidToken]), "" when absent; an invalid
// value is dropped and reported by badReplica = true. Errors are
// [Client.Send]'s; [ErrAgentOffline] only when the shared subject has no
// responder either.
func (c *Client) SendTo(ctx context.Context, agentID, replica, method string, params json.RawMessage, traceparent string) (res json.RawMessage, replyReplica string, badReplica bool, err error) {
	var hdr nats.Header
	if traceparent != "" {
		hdr = nats.Header{HeaderTraceparent: []string{traceparent}}
	}
	if replica != "" && !ValidToken(replica) {
		replica = "" // never a subject built of an invalid token
	}
	res, rep, err := c.call(ctx, agentID, replica, method, params, hdr)
	if err != nil {
		return nil, "", false, err
	}
	if rep != "" && !ValidToken(rep) {
		return res, "", true, nil
	}
	return res, rep, false, nil
}

// ProbeTaskID is the task id a2ad's liveness probe asks for: GetTask of
// a task no agent holds (a2ad's own task ids begin "tsk-", and an agent's
// own ids are never asked with this one), which any agent following
// docs/nats-binding.md answers at once, doing no work: TaskNotFound (A2A
// 1.0 §8: -32001), or any other answer.
const ProbeTaskID = "a2ad-liveness-probe"

// ErrNoAnswer means a probe got no answer before its deadline: the agent
// may be subscribed, but it does not answer.
var ErrNoAnswer = fmt.Errorf("%w: no answer before the probe's deadline", a2a.ErrAgentUnreachable)

// Probe asks whether agentID answers on its RPC subject: one GetTask of
// [ProbeTaskID], bounded by ctx (5 s if it has no deadline). nil when
// anything came back (a result, a JSON-RPC error, even a reply that does
// not decode: a process is there); [ErrAgentOffline] when nobody is
// subscribed (NATS no responders, at once); [ErrNoAnswer] when no reply
// came before ctx's deadline; an error that does not wrap
// a2a.ErrAgentUnreachable while a2ad's own connection is down (nothing is
// learnt of the agent); another error wrapping a2a.ErrAgentUnreachable
// when the request could not be sent.
func (c *Client) Probe(ctx context.Context, agentID string) error {
	notUp := fmt.Errorf("natsbind: probe of %s: a2ad's NATS connection was not up throughout: nothing learnt", agentID)
	reconnects := c.nc.Stats().Reconnects
	if !c.nc.IsConnected() {
		return notUp
	}
	_, err := c.Call(ctx, agentID, a2a.MethodGetTask, map[string]string{"id": ProbeTaskID}, nil)
	var rpcErr *a2a.RPCError
	switch {
	case err == nil, errors.As(err, &rpcErr), errors.Is(err, a2a.ErrDecode):
		return nil
	case errors.Is(err, ErrAgentOffline):
		return err
	case !c.nc.IsConnected() || c.nc.Stats().Reconnects != reconnects:
		// a2ad's own connection went down meanwhile (a request buffered
		// while it reconnects times out): nothing is learnt of the agent.
		return notUp
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w (%s)", ErrNoAnswer, agentID)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return notUp
	}
	return fmt.Errorf("%w: the probe could not be sent (%s)", a2a.ErrAgentUnreachable, agentID)
}
