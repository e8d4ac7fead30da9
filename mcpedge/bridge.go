package mcpedge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// JSON-RPC error codes of [Bridge] (the implementation-defined server-error
// range, -32000 to -32099), in its answers to a host when the daemon cannot
// take the request.
const (
	// CodeDaemonUnavailable: no a2ad answers at the bridge's URL, or the
	// connection to it ended before it answered.
	CodeDaemonUnavailable = -32010
	// CodeHostTokenRefused: the daemon refused the bridge's host token
	// (HTTP 401 or 403), or the bridge has no token to send.
	CodeHostTokenRefused = -32011
)

// TokenSource gives the bearer token of the next request to the daemon;
// it is called once per HTTP request, so a token that was rotated (a file
// rewritten, a token re-minted) is sent from the next request on. An
// error is reported to the host as [CodeHostTokenRefused] with its text.
type TokenSource func() (string, error)

// Bridge is the stdio MCP server of `a2ad mcp`: it reads the host's
// JSON-RPC messages on stdio and forwards them, unchanged, to a running
// a2ad's Streamable HTTP endpoint (MCP 2025-11-25 basic/transports), with
// a bearer token from Token; what the daemon sends back (responses,
// progress, elicitation requests, list_changed on the standalone SSE
// stream) goes to the host unchanged. It holds no NATS connection and no
// principal of its own: the daemon authorizes every call by the token.
//
// Both protocol eras pass through: a host that sends `initialize`
// (2025-11-25 and earlier) gets a daemon session (Mcp-Session-Id) and its
// standalone SSE stream; a host that speaks 2026-07-28 (server/discover,
// per-request _meta, input requests in results) is forwarded request by
// request to the daemon's stateless handler.
//
// When the daemon cannot take a call, the host gets a JSON-RPC error in
// a2ad's words that names the fix ([CodeDaemonUnavailable],
// [CodeHostTokenRefused]), also logged on Log, and the bridge goes on: the
// next call connects again, and a host session whose daemon session was
// lost (the daemon restarted) is re-established by replaying the host's
// initialize, so the host window needs no restart. A call in flight when
// the connection breaks is answered with [CodeDaemonUnavailable].
type Bridge struct {
	// Endpoint is the daemon's MCP URL, e.g. http://127.0.0.1:8080/mcp.
	Endpoint string
	// Locate, when set, gives the daemon's MCP URL at each new connection
	// instead of Endpoint (a daemon restarted on another port is found);
	// its error is reported to the host as [CodeDaemonUnavailable].
	Locate func() (string, error)
	// Client sends the HTTP requests (its Transport carries TLS roots);
	// nil: http.DefaultClient. Its Transport is wrapped, not changed.
	Client *http.Client
	// Token gives the bearer token of each request; nil sends none.
	Token TokenSource
	// Host is the host's transport; nil: [StdioTransport] on stdin and
	// stdout (its guarantees hold: every call read is answered, no answer
	// after notifications/cancelled, unreadable lines answered). Another
	// transport must drop answers to cancelled calls as it does: the
	// bridge writes one ([CodeRequestCancelled]) to settle the call.
	Host mcp.Transport
	// Log receives what the bridge tells the operator (stderr); nil: none.
	Log *slog.Logger
	// StartHint and TokenHint complete the errors: how to start the
	// daemon ("start it: a2ad serve --data-dir ./a2ad-data") and how to
	// get a token the daemon accepts.
	StartHint, TokenHint string
}

// Run serves the host until its input ends (then nil, once every call
// read is answered) or ctx is done.
func (b *Bridge) Run(ctx context.Context) error {
	ht := b.Host
	if ht == nil {
		ht = &StdioTransport{}
	}
	host, err := ht.Connect(ctx)
	if err != nil {
		return err
	}
	log := b.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &bridgeRun{b: b, host: host, log: log, ctx: ctx}
	defer func() {
		r.mu.Lock()
		l := r.link
		r.link = nil
		r.mu.Unlock()
		if l != nil {
			l.close()
		}
		_ = host.Close()
	}()
	for {
		msg, err := host.Read(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		r.fromHost(msg)
	}
}

// bridgeRun is one host connection of a [Bridge].
type bridgeRun struct {
	b    *Bridge
	host mcp.Connection
	log  *slog.Logger
	ctx  context.Context

	mu sync.Mutex
	// init is the host's initialize (nil until it sent one: the
	// 2026-07-28 era has none), replayed on a new daemon session.
	init        *jsonrpc.Request
	initialized bool // the host sent notifications/initialized
	link        *daemonLink
	reinits     atomic.Int64
	url         atomic.Value // string: the daemon's MCP URL last located
}

// isInit reports whether id is the host's initialize.
func (r *bridgeRun) isInit(id jsonrpc.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.init != nil && r.init.ID == id
}

// endpoint is the daemon's URL as last located (for messages).
func (r *bridgeRun) endpoint() string {
	if u, _ := r.url.Load().(string); u != "" {
		return u
	}
	return r.b.Endpoint
}

// fromHost forwards one message of the host.
func (r *bridgeRun) fromHost(msg jsonrpc.Message) {
	switch m := msg.(type) {
	case *jsonrpc.Request:
		switch {
		case m.IsCall() && m.Method == "initialize":
			// In order: the host's next messages need the session id the
			// answer to this one carries.
			r.mu.Lock()
			r.init, r.initialized = m, false
			old := r.link
			r.link = nil
			r.mu.Unlock()
			if old != nil {
				old.close()
			}
			r.call(m, true)
		case m.IsCall():
			go r.call(m, false)
		default:
			r.notify(m)
		}
	case *jsonrpc.Response:
		r.mu.Lock()
		l := r.link
		r.mu.Unlock()
		if l == nil || !l.askedHost(m.ID) {
			r.log.Warn("a2ad mcp: the host answered a request of a daemon session that has ended; answer dropped", "id", m.ID.Raw())
			return
		}
		if err := l.write(r.ctx, m); err != nil {
			r.log.Warn("a2ad mcp: the host's answer did not reach a2ad", "id", m.ID.Raw(), "err", r.describe(err, nil))
		}
	}
}

// call forwards a call; its answer comes from the link's reader, or from
// here if the daemon did not take it.
func (r *bridgeRun) call(req *jsonrpc.Request, isInit bool) {
	for attempt := 0; ; attempt++ {
		l, err := r.connected(!isInit)
		if err != nil {
			r.answerError(req.ID, err, nil)
			return
		}
		out, err := l.forward(r.ctx, req)
		if err == nil {
			return
		}
		if errors.Is(err, mcp.ErrSessionMissing) && attempt == 0 && !isInit {
			// The daemon restarted: its session is gone, the call was not
			// taken. A new session, then the call once more.
			r.drop(l)
			continue
		}
		if !out.rewritten {
			r.drop(l)
		}
		r.answerError(req.ID, err, out)
		return
	}
}

// notify forwards a notification; one that cannot be delivered is logged
// (a notification has no answer).
func (r *bridgeRun) notify(req *jsonrpc.Request) {
	if req.Method == "notifications/initialized" {
		r.mu.Lock()
		r.initialized = true
		r.mu.Unlock()
	}
	l, replayed, err := r.connectedReplayed(true)
	if err != nil {
		r.log.Warn("a2ad mcp: notification not delivered", "method", req.Method, "err", r.describe(err, nil))
		return
	}
	if replayed && req.Method == "notifications/initialized" {
		return // sent with the replayed initialize
	}
	out, err := l.forward(r.ctx, req)
	if err != nil {
		if !out.rewritten {
			r.drop(l)
		}
		r.log.Warn("a2ad mcp: notification not delivered", "method", req.Method, "err", r.describe(err, out))
		return
	}
	if req.Method == "notifications/initialized" {
		l.listen()
	}
}

// connected is the live link to the daemon, a new one if there is none;
// with replay, a new link first replays the host's initialize (when the
// host sent one) so the host's session goes on.
func (r *bridgeRun) connected(replay bool) (*daemonLink, error) {
	l, _, err := r.connectedReplayed(replay)
	return l, err
}

// connectedReplayed is connected, and whether the host's initialize (and
// initialized) were replayed on a new link.
func (r *bridgeRun) connectedReplayed(replay bool) (*daemonLink, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.link != nil && !r.link.broken() {
		return r.link, false, nil
	}
	if r.link != nil {
		r.link.close()
		r.link = nil
	}
	l, err := r.dial()
	if err != nil {
		return nil, false, err
	}
	replayed := replay && r.init != nil
	if replayed {
		if err := l.replayInit(r.ctx, r.init, r.initialized, r.reinits.Add(1)); err != nil {
			l.close()
			return nil, false, err
		}
		r.log.Info("a2ad mcp: the daemon session was re-established (a2ad restarted?)", "url", l.url)
	}
	r.link = l
	return l, replayed, nil
}

// drop closes l if it is still the live link: the next message connects
// again.
func (r *bridgeRun) drop(l *daemonLink) {
	r.mu.Lock()
	if r.link == l {
		r.link = nil
	}
	r.mu.Unlock()
	l.close()
}

// answerError answers the host's call id with the a2ad error for err.
func (r *bridgeRun) answerError(id jsonrpc.ID, err error, out *httpOutcome) {
	je := r.wireError(err, out)
	r.log.Error("a2ad mcp: call not forwarded", "id", id.Raw(), "err", je.Message)
	if werr := r.host.Write(r.ctx, &jsonrpc.Response{ID: id, Error: je}); werr != nil {
		r.log.Warn("a2ad mcp: answer to the host not written", "err", werr)
	}
}

// wireError is err (from the HTTP exchange with the daemon) as a JSON-RPC
// error in a2ad's words, naming the fix.
func (r *bridgeRun) wireError(err error, out *httpOutcome) *jsonrpc.Error {
	var je *jsonrpc.Error
	var te *bridgeTokenError
	switch {
	case errors.As(err, &te):
		return &jsonrpc.Error{Code: CodeHostTokenRefused, Message: r.describe(err, out)}
	case out == nil || !out.answered || !errors.As(err, &je) || je.Code == codeRejectedByTransport:
		// No answer from the daemon (the go-sdk's "rejected by
		// transport" is its wrapping of a failed send).
	case out.rewritten || out.status == http.StatusBadRequest:
		return je // a refused token, or a message the daemon refused, in its words
	}
	return &jsonrpc.Error{Code: CodeDaemonUnavailable, Message: r.describe(err, out)}
}

// describe says in a2ad's words what went wrong and what fixes it.
func (r *bridgeRun) describe(err error, out *httpOutcome) string {
	url := r.endpoint()
	var le *locateError
	if errors.As(err, &le) {
		return fmt.Sprintf("a2ad_unavailable: %v; %s", le.err, r.b.StartHint)
	}
	var te *bridgeTokenError
	if errors.As(err, &te) {
		return fmt.Sprintf("unauthorized: a2ad mcp has no host token to send: %v; %s", te.err, r.b.TokenHint)
	}
	if out != nil {
		switch {
		case out.status == http.StatusUnauthorized:
			return fmt.Sprintf("unauthorized: a2ad at %s refused the host token (HTTP 401%s); %s", url, out.detail(), r.b.TokenHint)
		case out.status == http.StatusForbidden:
			return fmt.Sprintf("insufficient_scope: a2ad at %s refused the host token (HTTP 403%s); mint a token with the scopes the tools need (a2a:read, a2a:delegate); %s", url, out.detail(), r.b.TokenHint)
		case out.status == http.StatusNotFound:
			return fmt.Sprintf("a2ad_unavailable: %s answers 404: no a2ad MCP endpoint there; pass --url with the daemon's MCP URL (http://HOST:PORT/mcp), or --data-dir of the running daemon", url)
		case out.status >= 400:
			return fmt.Sprintf("a2ad_unavailable: %s answered HTTP %d%s; check that --url is the a2ad daemon's /mcp", url, out.status, out.detail())
		}
		if out.sent && !out.answered {
			return fmt.Sprintf("a2ad_unavailable: no a2ad answers at %s (%s); %s, or pass --url with the running daemon's MCP URL; a2ad mcp connects again on the next request", url, rootCause(err), r.b.StartHint)
		}
	}
	if errors.Is(err, errStreamEnded) {
		return fmt.Sprintf("a2ad_unavailable: the connection to a2ad at %s ended before it answered (the daemon stopped or restarted); a task it started goes on: follow it with task_get; a2ad mcp connects again on the next request", url)
	}
	return fmt.Sprintf("a2ad_unavailable: a2ad at %s did not take the request (%s); %s; a2ad mcp connects again on the next request", url, rootCause(err), r.b.StartHint)
}

// rootCause is the innermost error's text: "connection refused", not the
// go-sdk's and net/http's wrapping of it.
func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
				next = j.Unwrap()[len(j.Unwrap())-1]
			}
		}
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// codeRejectedByTransport is the go-sdk's code for a message its transport
// did not send (jsonrpc2.ErrRejected, internal to the go-sdk).
const codeRejectedByTransport = -32005

var errStreamEnded = errors.New("the stream ended before the answer")

// locateError is a [Bridge.Locate] failure.
type locateError struct{ err error }

func (e *locateError) Error() string { return e.err.Error() }
func (e *locateError) Unwrap() error { return e.err }

// bridgeTokenError is a [TokenSource] failure.
type bridgeTokenError struct{ err error }

func (e *bridgeTokenError) Error() string { return "host token: " + e.err.Error() }
func (e *bridgeTokenError) Unwrap() error { return e.err }

// httpOutcome records, for one forwarded message, what the HTTP exchange
// with the daemon gave (the go-sdk's errors do not carry the status).
type httpOutcome struct {
	sent, answered bool
	status         int
	challenge      string // WWW-Authenticate
	body           string // the error body's message, bounded
	// rewritten: a 401 or 403 was turned into the JSON-RPC error the host
	// gets (see [bridgeRun.refusal]); the connection stays usable.
	rewritten bool
}

// refusalID is the id of the JSON-RPC error a refusal is rewritten to (the
// go-sdk reads only its error).
var refusalID, _ = jsonrpc.MakeID("a2ad-mcp-refusal")

// refusal is the JSON-RPC error for the daemon's 401 or 403 (code and
// message from its body).
func (r *bridgeRun) refusal(status int, code, msg string, out *httpOutcome) *jsonrpc.Error {
	if status == http.StatusForbidden && code == "insufficient_scope" {
		return &jsonrpc.Error{Code: CodeInsufficientScope, Message: fmt.Sprintf(
			"insufficient_scope: %s, which this principal does not have (a2ad at %s answered 403); give the principal that scope (--scope, or its scopes in the daemon's configuration)", msg, r.endpoint())}
	}
	return &jsonrpc.Error{Code: CodeHostTokenRefused, Message: r.describe(errors.New("refused"), out)}
}

func (o *httpOutcome) detail() string {
	switch {
	case o.body != "":
		return ": " + o.body
	case o.challenge != "":
		return ": WWW-Authenticate: " + o.challenge
	}
	return ""
}

type outcomeKey struct{}

// daemonLink is one connection to the daemon: a go-sdk streamable client
// connection (POSTs, their SSE streams, the session id, DELETE at close)
// and, in the 2025-11-25 era, the standalone SSE stream the go-sdk opens
// only for its own client sessions.
type daemonLink struct {
	r      *bridgeRun
	url    string
	conn   mcp.Connection
	ctx    context.Context
	cancel context.CancelFunc
	// version is the negotiated protocol version, sent as
	// Mcp-Protocol-Version when the go-sdk does not set it.
	version atomic.Value // string

	mu        sync.Mutex
	pending   map[jsonrpc.ID]*pendingCall // calls forwarded, not yet answered
	asked     map[jsonrpc.ID]bool         // daemon requests sent to the host, not yet answered
	initWait  map[jsonrpc.ID]chan *jsonrpc.Response
	listening bool
	dead      bool
}

// dial opens a link (no HTTP request is made until the first message).
func (r *bridgeRun) dial() (*daemonLink, error) {
	base := r.b.Client
	if base == nil {
		base = http.DefaultClient
	}
	url := r.b.Endpoint
	if r.b.Locate != nil {
		u, err := r.b.Locate()
		if err != nil {
			return nil, &locateError{err: err}
		}
		url = u
	}
	r.url.Store(url)
	l := &daemonLink{r: r, url: url, pending: map[jsonrpc.ID]*pendingCall{}, asked: map[jsonrpc.ID]bool{}, initWait: map[jsonrpc.ID]chan *jsonrpc.Response{}}
	l.version.Store("")
	next := base.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc := *base
	hc.Transport = &bridgeTransport{link: l, token: r.b.Token, next: next}
	l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(r.ctx))
	// DisableStandaloneSSE: the go-sdk would open it only for a client
	// session of its own; the link opens it (listen). MaxRetries -1: a
	// lost daemon is reported at once, and the next call connects again.
	conn, err := (&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &hc, DisableStandaloneSSE: true, MaxRetries: -1}).Connect(l.ctx)
	if err != nil {
		l.cancel()
		return nil, err
	}
	l.conn = conn
	go l.readDaemon()
	return l, nil
}

// pendingCall is a call forwarded on a link.
type pendingCall struct {
	cancel context.CancelFunc
	// written: the daemon took it (its answer comes on the link);
	// settled: answered, or cancelled by the host; internal: the bridge's
	// own (a replayed initialize), never answered to the host.
	written, settled, internal bool
}

// forward writes msg to the daemon; for a call, the answer arrives on the
// link's reader (unless err is not nil: then the caller answers). The
// outcome says what HTTP gave when err is not nil.
func (l *daemonLink) forward(ctx context.Context, msg *jsonrpc.Request) (*httpOutcome, error) {
	return l.forwardAs(ctx, msg, false)
}

func (l *daemonLink) forwardAs(ctx context.Context, msg *jsonrpc.Request, internal bool) (*httpOutcome, error) {
	if v := metaProtocolVersion(msg); v != "" && l.version.Load() == "" {
		l.version.Store(v)
	}
	out := &httpOutcome{}
	wctx := context.WithValue(l.ctx, outcomeKey{}, out)
	var pc *pendingCall
	if msg.IsCall() {
		// The call's SSE stream lives until its answer, the host's
		// cancellation or the link's end.
		cctx, cancel := context.WithCancel(wctx)
		pc = &pendingCall{cancel: cancel, internal: internal}
		l.mu.Lock()
		if l.dead {
			l.mu.Unlock()
			cancel()
			return out, errStreamEnded
		}
		l.pending[msg.ID] = pc
		l.mu.Unlock()
		wctx = cctx
	}
	if msg.Method == "notifications/cancelled" {
		defer l.cancelCall(msg)
	}
	err := l.conn.Write(wctx, msg)
	if pc == nil {
		return out, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case pc.settled:
		return out, nil // answered already (or cancelled by the host)
	case err != nil:
		delete(l.pending, msg.ID)
		pc.cancel()
		return out, err
	case l.dead:
		// The link ended while the call was being sent: no answer will
		// come on it.
		delete(l.pending, msg.ID)
		pc.cancel()
		return out, errStreamEnded
	}
	pc.written = true
	return out, nil
}

// write sends the host's answer to a daemon request.
func (l *daemonLink) write(ctx context.Context, resp *jsonrpc.Response) error {
	l.mu.Lock()
	delete(l.asked, resp.ID)
	l.mu.Unlock()
	return l.conn.Write(context.WithValue(l.ctx, outcomeKey{}, &httpOutcome{}), resp)
}

func (l *daemonLink) askedHost(id jsonrpc.ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asked[id]
}

// cancelCall ends the SSE stream of the call the host cancelled (its
// answer, if any comes, is dropped by [StdioTransport]).
func (l *daemonLink) cancelCall(n *jsonrpc.Request) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(n.Params, &p) != nil {
		return
	}
	if id, err := jsonrpc.MakeID(p.RequestID); err == nil && l.settle(id) {
		// The host's transport ([StdioTransport]) drops this answer, as
		// any after the cancellation, and so counts the call answered: no
		// wait for it when the host's input ends.
		_ = l.r.host.Write(l.r.ctx, &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: CodeRequestCancelled, Message: "cancelled by the host"}})
	}
}

// CodeRequestCancelled is the code of the answer [Bridge] gives itself
// for a call the host cancelled; [StdioTransport] never sends it (MCP
// 2025-11-25 basic/utilities/cancellation: no response after
// notifications/cancelled).
const CodeRequestCancelled = -32800

// settle forgets a pending call and ends its stream; false if it was
// not pending (answered already, or cancelled by the host).
func (l *daemonLink) settle(id jsonrpc.ID) bool {
	l.mu.Lock()
	pc, ok := l.pending[id]
	delete(l.pending, id)
	if ok {
		pc.settled = true
	}
	l.mu.Unlock()
	if ok {
		pc.cancel()
	}
	return ok
}

// replayInit sends the host's initialize (under a bridge id) and, if the
// host had sent it, notifications/initialized on a new link, so the
// host's session goes on over a new daemon session.
func (l *daemonLink) replayInit(ctx context.Context, init *jsonrpc.Request, initialized bool, n int64) error {
	id, _ := jsonrpc.MakeID(fmt.Sprintf("a2ad-mcp-reinitialize-%d", n))
	ch := make(chan *jsonrpc.Response, 1)
	l.mu.Lock()
	l.initWait[id] = ch
	l.mu.Unlock()
	if _, err := l.forwardAs(ctx, &jsonrpc.Request{ID: id, Method: init.Method, Params: init.Params}, true); err != nil {
		return err
	}
	select {
	case resp := <-ch:
		if resp == nil {
			return errStreamEnded
		}
		if resp.Error != nil {
			return resp.Error
		}
	case <-time.After(30 * time.Second):
		return errors.New("a2ad did not answer initialize within 30 s")
	case <-ctx.Done():
		return ctx.Err()
	}
	if !initialized {
		return nil
	}
	if _, err := l.forward(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		return err
	}
	l.listen()
	return nil
}

// readDaemon copies the daemon's messages to the host until the link
// ends; then every call still open on it is answered with an error.
func (l *daemonLink) readDaemon() {
	r := l.r
	for {
		msg, err := l.conn.Read(l.ctx)
		if err != nil {
			l.fail(err)
			return
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			l.mu.Lock()
			ch, isInit := l.initWait[m.ID]
			delete(l.initWait, m.ID)
			l.mu.Unlock()
			if isInit {
				l.settle(m.ID)
				l.learnVersion(m)
				ch <- m
				continue
			}
			if !l.settle(m.ID) {
				continue // cancelled by the host, or answered already
			}
			if r.isInit(m.ID) {
				l.learnVersion(m)
			}
			if m.Error != nil {
				if _, ok := m.Error.(*jsonrpc.Error); !ok {
					// The go-sdk's own answer for a stream that ended
					// without one: a2ad's words instead.
					m = &jsonrpc.Response{ID: m.ID, Error: &jsonrpc.Error{Code: CodeDaemonUnavailable, Message: r.describe(errStreamEnded, nil)}}
				}
			}
			if err := r.host.Write(r.ctx, m); err != nil {
				r.log.Warn("a2ad mcp: answer to the host not written", "err", err)
			}
		case *jsonrpc.Request:
			if m.IsCall() {
				l.mu.Lock()
				l.asked[m.ID] = true
				l.mu.Unlock()
			}
			if err := r.host.Write(r.ctx, m); err != nil {
				r.log.Warn("a2ad mcp: message to the host not written", "method", m.Method, "err", err)
			}
		}
	}
}

// learnVersion keeps the protocol version an initialize answer names.
func (l *daemonLink) learnVersion(m *jsonrpc.Response) {
	if m.Error != nil || len(m.Result) == 0 {
		return
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(m.Result, &res) == nil && res.ProtocolVersion != "" {
		l.version.Store(res.ProtocolVersion)
	}
}

// fail marks the link broken and answers the calls the daemon took on
// it (a call still being sent is answered by its sender).
func (l *daemonLink) fail(err error) {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return
	}
	l.dead = true
	var open []jsonrpc.ID
	for id, pc := range l.pending {
		if pc.written {
			delete(l.pending, id)
			pc.settled = true
			pc.cancel()
			if !pc.internal {
				open = append(open, id)
			}
		}
	}
	waits := l.initWait
	l.initWait = map[jsonrpc.ID]chan *jsonrpc.Response{}
	l.mu.Unlock()
	for _, ch := range waits {
		ch <- nil
	}
	r := l.r
	if len(open) > 0 && l.ctx.Err() == nil {
		r.log.Warn("a2ad mcp: the connection to a2ad ended", "url", l.url, "err", err, "open_calls", len(open))
	}
	for _, id := range open {
		if werr := r.host.Write(r.ctx, &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: CodeDaemonUnavailable, Message: r.describe(errStreamEnded, nil)}}); werr != nil {
			r.log.Warn("a2ad mcp: answer to the host not written", "err", werr)
		}
	}
}

func (l *daemonLink) broken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// close ends the link: the daemon session is deleted (best effort) and
// open calls are answered.
func (l *daemonLink) close() {
	_ = l.conn.Close()
	l.fail(errors.New("closed"))
	l.cancel()
}

// listen opens the standalone SSE stream of a 2025-11-25 session (MCP
// 2025-11-25 basic/transports §"Listening for Messages from the Server"):
// notifications such as notifications/tools/list_changed come on it.
// Dropped streams are opened again while the link lives.
func (l *daemonLink) listen() {
	l.mu.Lock()
	if l.listening || l.conn.SessionID() == "" {
		l.mu.Unlock()
		return
	}
	l.listening = true
	l.mu.Unlock()
	go func() {
		delay := time.Second
		for l.ctx.Err() == nil && !l.broken() {
			done, err := l.stream()
			if done {
				return
			}
			if err != nil {
				l.r.log.Debug("a2ad mcp: standalone SSE stream", "err", err)
			}
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
		}
	}()
}

// stream reads one standalone SSE stream to its end; done: the daemon
// offers none (405) or the session is gone (404).
func (l *daemonLink) stream() (done bool, err error) {
	req, err := http.NewRequestWithContext(context.WithValue(l.ctx, outcomeKey{}, &httpOutcome{}), http.MethodGet, l.url, nil)
	if err != nil {
		return true, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", l.conn.SessionID())
	base := l.r.b.Client
	if base == nil {
		base = http.DefaultClient
	}
	next := base.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := (&bridgeTransport{link: l, token: l.r.b.Token, next: next}).RoundTrip(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotFound:
		return true, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return false, readEvents(resp.Body, mcp.DefaultMaxEventSize, func(data []byte) {
		msg, err := jsonrpc.DecodeMessage(data)
		if err != nil {
			l.r.log.Warn("a2ad mcp: unreadable message on the standalone SSE stream; skipped", "err", err)
			return
		}
		if req, ok := msg.(*jsonrpc.Request); ok {
			if req.IsCall() {
				l.mu.Lock()
				l.asked[req.ID] = true
				l.mu.Unlock()
			}
			if err := l.r.host.Write(l.r.ctx, req); err != nil {
				l.r.log.Warn("a2ad mcp: message to the host not written", "method", req.Method, "err", err)
			}
		}
	})
}

// readEvents calls fn with the data of each "message" event of an SSE
// stream (WHATWG HTML §9.2.6: data lines joined by newlines, blank line
// ends the event); an event larger than limit bytes ends the stream with
// an error.
func readEvents(body io.Reader, limit int, fn func([]byte)) error {
	br := bufio.NewReader(body)
	var data []byte
	event := ""
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(data)+len(line) > limit {
				return fmt.Errorf("an event is longer than %d bytes", limit)
			}
			// A long data line: keep its start, read on.
			rest := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				rest = append(rest, line...)
				if len(data)+len(rest) > limit {
					return fmt.Errorf("an event is longer than %d bytes", limit)
				}
			}
			line = rest
		}
		if err != nil && len(line) == 0 {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if len(data) > 0 && (event == "" || event == "message") {
				fn(data)
			}
			data, event = nil, ""
		case line[0] == ':':
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "data":
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, value...)
				if len(data) > limit {
					return fmt.Errorf("an event is longer than %d bytes", limit)
				}
			case "event":
				event = string(value)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// metaProtocolVersion is the _meta protocol version of a 2026-07-28
// request ("" if none).
func metaProtocolVersion(m *jsonrpc.Request) string {
	if len(m.Params) == 0 || !bytes.Contains(m.Params, []byte(mcp.MetaKeyProtocolVersion)) {
		return ""
	}
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return ""
	}
	v, _ := p.Meta[mcp.MetaKeyProtocolVersion].(string)
	return v
}

// bridgeTransport adds the bearer token and the negotiated protocol
// version to each request of a link, and records the outcome.
type bridgeTransport struct {
	link  *daemonLink
	token TokenSource
	next  http.RoundTripper
}

// maxErrorBody bounds what is read of a refusal's body.
const maxErrorBody = 4 << 10

func (t *bridgeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out, _ := req.Context().Value(outcomeKey{}).(*httpOutcome)
	if out == nil {
		out = &httpOutcome{}
	}
	req = req.Clone(req.Context())
	if t.token != nil {
		tok, err := t.token()
		if err != nil {
			return nil, &bridgeTokenError{err: err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if v, _ := t.link.version.Load().(string); v != "" && req.Header.Get("Mcp-Protocol-Version") == "" {
		req.Header.Set("Mcp-Protocol-Version", v)
	}
	if err := setTaskRouting(req); err != nil {
		return nil, err
	}
	out.sent = true
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	out.answered, out.status = true, resp.StatusCode
	if resp.StatusCode < 400 {
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			// The go-sdk reads a JSON answer whole (its SSE events are
			// bounded by MaxEventSize): bounded here like a host's line.
			resp.Body = &boundedBody{ReadCloser: resp.Body, left: mcp.DefaultMaxLineLength}
		}
		return resp, nil
	}
	out.challenge = resp.Header.Get("WWW-Authenticate")
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		out.body = e.Error.Code + ": " + e.Error.Message
	}
	if req.Method == http.MethodPost && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		// A refused token is the answer to this message only: as a
		// JSON-RPC error body the go-sdk reports it for this message and
		// keeps the connection (other calls' streams) open.
		je := t.link.r.refusal(resp.StatusCode, e.Error.Code, e.Error.Message, out)
		body, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: refusalID, Error: je})
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.Header.Set("Content-Type", "application/json")
		out.rewritten = true
	}
	return resp, nil
}

// boundedBody ends a response body with an error after left bytes.
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("a2ad's answer is longer than %d bytes", mcp.DefaultMaxLineLength)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
