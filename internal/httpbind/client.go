package httpbind

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
)

// UserAgent is the User-Agent a2ad sends to agents.
const UserAgent = "a2ad"

// URLError: an agent's URL (or its OAuth 2.0 token endpoint) is not one
// a2ad sends to: not absolute https (plain http only to a loopback
// address or "localhost"), or it carries user info. Nothing was sent; it
// wraps a2a.ErrAgentUnreachable.
type URLError struct {
	AgentID string
	// Reason says, in a2ad's words, what is wrong.
	Reason string
}

func (e *URLError) Error() string {
	return fmt.Sprintf("agent %s: URL refused: %s", e.AgentID, e.Reason)
}

// Unwrap: nothing was sent.
func (e *URLError) Unwrap() error { return a2a.ErrAgentUnreachable }

// OriginError: a request's URL is not of the origin (RFC 6454: scheme,
// host, port) of the agent's interface URL. a2ad refuses it before
// dialing (no server-side request forgery through an agent's card or
// answers); it wraps a2a.ErrAgentUnreachable.
type OriginError struct {
	AgentID string
	// Want is the interface's origin, Got the request's.
	Want, Got string
}

func (e *OriginError) Error() string {
	return fmt.Sprintf("agent %s: request to origin %s refused: only %s, the origin of the agent's interface URL, is allowed", e.AgentID, e.Got, e.Want)
}

// Unwrap: nothing was sent.
func (e *OriginError) Unwrap() error { return a2a.ErrAgentUnreachable }

// RedirectError: the agent answered an RPC with an HTTP redirect (3xx),
// which a2ad never follows (A2A RPCs are not redirected; following one
// would let an agent point a2ad anywhere). The agent did not process the
// request (RFC 9110 §15.4), so the error unwraps to an *a2a.RPCError with
// code InvalidAgentResponse.
type RedirectError struct {
	AgentID string
	Status  int
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("agent %s answered with a redirect (HTTP %d); redirects are refused on RPCs", e.AgentID, e.Status)
}

// Unwrap: the agent answered without taking the request.
func (e *RedirectError) Unwrap() error {
	return &a2a.RPCError{Code: a2a.CodeInvalidAgentResponse, Message: "redirect refused"}
}

// origin is scheme://host:port of u, the port explicit.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// checkURL parses raw and refuses what a2ad does not send to: anything
// but an absolute https URL, plain http except to a loopback host.
func checkURL(agentID, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return nil, &URLError{AgentID: agentID, Reason: "not an absolute URL"}
	}
	if u.User != nil {
		return nil, &URLError{AgentID: agentID, Reason: "a URL with user info is not sent to"}
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return nil, &URLError{AgentID: agentID, Reason: "plain http is allowed only to a loopback address or localhost; want https"}
		}
	default:
		return nil, &URLError{AgentID: agentID, Reason: "scheme " + u.Scheme + " is not https"}
	}
	return u, nil
}

// loopbackHost reports whether host is "localhost" (RFC 6761 §6.3) or a
// loopback IP address literal.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// callInfo is what a2ad's transport saw of one call, for classifying its
// error: whether the request was written, and the response's status.
type callInfo struct {
	mu      sync.Mutex
	wrote   bool
	status  int
	bodyErr error
}

func (c *callInfo) setBodyErr(err error) {
	c.mu.Lock()
	if c.bodyErr == nil {
		c.bodyErr = err
	}
	c.mu.Unlock()
}

func (c *callInfo) snapshot() (wrote bool, status int, bodyErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wrote, c.status, c.bodyErr
}

type callKey struct{}
type traceparentKey struct{}

// withCall returns ctx carrying a fresh callInfo that a2ad's transport
// fills in, and traceparent for every request made with it.
func withCall(ctx context.Context, traceparent string) (context.Context, *callInfo) {
	ci := &callInfo{}
	ctx = context.WithValue(ctx, callKey{}, ci)
	if traceparent != "" {
		ctx = context.WithValue(ctx, traceparentKey{}, traceparent)
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				ci.mu.Lock()
				ci.wrote = true
				ci.mu.Unlock()
			}
		},
	})
	return ctx, ci
}

// WithTraceparent returns ctx whose requests through a [Binding]'s
// clients carry traceparent (W3C Trace Context §3.2) as their
// traceparent header; for callers of [Binding.Client] (Send takes it as
// an argument).
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceparentKey{}, traceparent)
}

// transport is a2ad's RoundTripper for one agent: it refuses requests off
// the interface's origin before dialing, sets the headers a2ad sends
// (User-Agent, traceparent, its own Authorization and no other), turns
// 401/403 into an *AuthError, and bounds response bodies.
type transport struct {
	agentID string
	origin  string
	cred    credential
	// tokenEndpoint marks the client of an OAuth 2.0 token endpoint: the
	// request's own Authorization (its client authentication, RFC 6749
	// §2.3.1) stays, and its 401 is golang.org/x/oauth2's to read.
	tokenEndpoint bool
	limits        Limits
	base          http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if got := origin(req.URL); got != t.origin {
		closeBody(req)
		return nil, &OriginError{AgentID: t.agentID, Want: t.origin, Got: got}
	}
	ctx := req.Context()
	r := req.Clone(ctx)
	if !t.tokenEndpoint {
		r.Header.Del("Authorization")
	}
	r.Header.Del("Proxy-Authorization")
	r.Header.Del("Cookie")
	r.Header.Set("User-Agent", UserAgent)
	if tp, _ := ctx.Value(traceparentKey{}).(string); tp != "" {
		r.Header.Set("traceparent", tp)
	}
	if t.cred != nil {
		if err := t.cred.apply(ctx, r.Header); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	if ci != nil {
		ci.mu.Lock()
		ci.status = resp.StatusCode
		ci.wrote = true // an answer came: the request reached the agent
		ci.mu.Unlock()
	}
	kind := AuthKindNone
	if t.cred != nil {
		kind = t.cred.kind()
	}
	switch {
	case t.tokenEndpoint:
	case resp.StatusCode == http.StatusUnauthorized:
		_ = resp.Body.Close()
		return nil, &AuthError{AgentID: t.agentID, Kind: kind, Status: resp.StatusCode, Reason: "Unauthorized"}
	case resp.StatusCode == http.StatusForbidden:
		_ = resp.Body.Close()
		return nil, &AuthError{AgentID: t.agentID, Kind: kind, Status: resp.StatusCode, Reason: "Forbidden"}
	}
	// A stream's bound is per event, only for a request that asked for a
	// stream: an RPC's answer labelled text/event-stream is still bounded
	// as a whole (JSON whitespace has blank lines too).
	sse := strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream") &&
		strings.Contains(strings.ToLower(r.Header.Get("Accept")), "text/event-stream")
	lb := &limitedBody{rc: resp.Body, max: t.limits.MaxResponseBytes, call: ci,
		err: &LimitError{AgentID: t.agentID, What: "response body", Limit: t.limits.MaxResponseBytes}}
	if sse {
		lb.perEvent, lb.max = true, t.limits.MaxEventBytes
		lb.err = &LimitError{AgentID: t.agentID, What: "stream event", Limit: t.limits.MaxEventBytes}
	} else if resp.ContentLength > t.limits.MaxResponseBytes {
		_ = resp.Body.Close()
		return nil, lb.err
	}
	if sse {
		resp.Body = &checkedEvents{agentID: t.agentID, rc: lb}
		return resp, nil
	}
	body, err := checkedBody(t.agentID, lb)
	if err != nil {
		return nil, err
	}
	resp.Body = body
	return resp, nil
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// newHTTPClient is the *http.Client of one agent: TLS 1.2 at least, no
// redirects followed, dial, TLS handshake and response header time
// limits, requests only to origin. Proxies come from the environment
// (HTTPS_PROXY, NO_PROXY; net/http.ProxyFromEnvironment).
func newHTTPClient(agentID, origin string, cred credential, l Limits, rootCAs *x509.CertPool) *http.Client {
	base := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: l.DialTimeout}).DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: rootCAs},
		TLSHandshakeTimeout:    l.TLSHandshakeTimeout,
		ResponseHeaderTimeout:  l.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: l.MaxResponseHeaderBytes,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        DefaultIdleConnTimeout,
	}
	return &http.Client{
		Transport: &transport{agentID: agentID, origin: origin, cred: cred, limits: l, base: base},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			return &RedirectError{AgentID: agentID, Status: req.Response.StatusCode}
		},
	}
}

// newTokenClient is the *http.Client for an OAuth 2.0 token endpoint:
// the same limits, no redirects, requests only to the endpoint's origin,
// and no credential of a2ad's beyond the client authentication
// golang.org/x/oauth2 adds itself.
func newTokenClient(agentID, tokenURL string, l Limits, rootCAs *x509.CertPool) (*http.Client, error) {
	u, err := checkURL(agentID, tokenURL)
	if err != nil {
		return nil, err
	}
	c := newHTTPClient(agentID, origin(u), nil, l, rootCAs)
	c.Transport.(*transport).tokenEndpoint = true
	return c, nil
}

// DefaultIdleConnTimeout is how long an idle connection to an agent is
// kept for reuse: 90 s.
const DefaultIdleConnTimeout = 90 * time.Second
