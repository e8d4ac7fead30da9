package httpbind

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/task"
)

// askingAgent is a real a2a-go agent: a brief opens a task that asks a
// question (input-required) once hold is closed; an answer completes it;
// Cancel cancels it.
type askingAgent struct{ hold <-chan struct{} }

func (a askingAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		if ec.StoredTask == nil {
			if !yield(sdk.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
			select {
			case <-a.hold:
			case <-ctx.Done():
				return
			}
			q := sdk.NewMessageForTask(sdk.MessageRoleAgent, ec, sdk.NewTextPart("which year?"))
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateInputRequired, q), nil)
			return
		}
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil), nil)
	}
}

func (askingAgent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, nil), nil)
	}
}

// seen is one request as the agent's HTTP server got it.
type seen struct {
	Method, Path string
	Header       http.Header
	// RPC is the JSON-RPC method, or the REST path's operation.
	RPC string
}

// testAgent is an httptest server on 127.0.0.1:0 serving a2asrv's
// JSON-RPC or REST handler around askingAgent, recording each request.
type testAgent struct {
	*httptest.Server
	binding string
	mu      sync.Mutex
	seen    []seen
}

func (a *testAgent) requests() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.seen...)
}

func (a *testAgent) count(rpc string) int {
	n := 0
	for _, s := range a.requests() {
		if s.RPC == rpc {
			n++
		}
	}
	return n
}

// agentOpts shape a test agent.
type agentOpts struct {
	tls bool
	// noListTasks makes ListTasks answer as an agent without it does:
	// JSON-RPC error -32004 (UnsupportedOperation), or REST 404.
	noListTasks bool
	// wrap, if set, wraps the whole handler.
	wrap func(http.Handler) http.Handler
	// connState, if set, sees the server's connections.
	connState func(net.Conn, http.ConnState)
	// hold, if set, keeps each new task submitted until it is closed.
	hold <-chan struct{}
}

// bearerUser is the agent's authentication: a caller presenting
// "Authorization: Bearer X" is user X (a2a-go's task store lists only an
// authenticated user's tasks).
type bearerUser struct {
	a2asrv.PassthroughCallInterceptor
}

func (bearerUser) Before(ctx context.Context, cc *a2asrv.CallContext, _ *a2asrv.Request) (context.Context, any, error) {
	if v, ok := cc.ServiceParams().Get("authorization"); ok && len(v) == 1 {
		if tok, ok := strings.CutPrefix(v[0], "Bearer "); ok {
			cc.User = a2asrv.NewAuthenticatedUser(tok, nil)
		}
	}
	return ctx, nil, nil
}

var released = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()

func startAgent(t testing.TB, binding string, o agentOpts) *testAgent {
	t.Helper()
	hold := o.hold
	if hold == nil {
		hold = released
	}
	rh := a2asrv.NewHandler(askingAgent{hold: hold}, a2asrv.WithCallInterceptors(bearerUser{}))
	var h http.Handler
	if binding == string(sdk.TransportProtocolHTTPJSON) {
		h = a2asrv.NewRESTHandler(rh)
	} else {
		h = a2asrv.NewJSONRPCHandler(rh)
	}
	a := &testAgent{binding: binding}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rpc := restOp(r)
		if binding == string(sdk.TransportProtocolJSONRPC) {
			var env struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &env)
			rpc = env.Method
		}
		a.mu.Lock()
		a.seen = append(a.seen, seen{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), RPC: rpc})
		a.mu.Unlock()
		if o.noListTasks && rpc == "ListTasks" {
			if binding == string(sdk.TransportProtocolJSONRPC) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32004,"message":"not offered"}}`)
			} else {
				http.NotFound(w, r)
			}
			return
		}
		inner.ServeHTTP(w, r)
	})
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Config.ConnState = o.connState
	if o.tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	a.Server = srv
	return a
}

// restOp names a REST request's A2A operation from its path (A2A 1.0 §11).
func restOp(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/message:send"):
		return "SendMessage"
	case strings.HasSuffix(p, ":cancel"):
		return "CancelTask"
	case strings.HasSuffix(p, "/tasks") && r.Method == http.MethodGet:
		return "ListTasks"
	case strings.Contains(p, "/tasks/") && r.Method == http.MethodGet:
		return "GetTask"
	}
	return r.Method + " " + p
}

// bindingFor returns a Binding whose only agent, "fraud", is a at its URL.
func bindingFor(t testing.TB, a *testAgent, cfg Config) *Binding {
	t.Helper()
	url := a.URL
	if a.binding == string(sdk.TransportProtocolHTTPJSON) {
		url += "/"
	}
	tgt := Target{AgentID: "fraud", Binding: a.binding, URL: url}
	if cfg.Lookup == nil {
		cfg.Lookup = func(id string) (Target, error) {
			if id != "fraud" {
				return Target{}, ErrNotHTTP
			}
			return tgt, nil
		}
	}
	if a.TLS != nil && cfg.RootCAs == nil {
		cfg.RootCAs = certPool(a.Server)
	}
	return New(cfg)
}

// briefParams are a brief's params exactly as the broker builds them
// (internal/broker Delegate): returnImmediately, a2ad's contextId.
func briefParams(t testing.TB, taskID string) json.RawMessage {
	t.Helper()
	msg := a2a.Message{MessageID: task.BriefMessageID(taskID), ContextID: broker.HTTPContextID(taskID), Role: a2a.RoleUser,
		Parts: []a2a.Part{a2a.TextPart("review order 42")}}
	b, err := json.Marshal(a2a.SendMessageRequest{Message: msg,
		Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true, AcceptedOutputModes: []string{"application/json"}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// answerParams are an answer's params as the broker's Respond builds them.
func answerParams(t testing.TB, taskID, agentTaskID string) json.RawMessage {
	t.Helper()
	msg := a2a.Message{MessageID: taskID + "-m2", ContextID: broker.HTTPContextID(taskID), TaskID: agentTaskID, Role: a2a.RoleUser,
		Parts: []a2a.Part{a2a.TextPart("2024")}}
	b, err := json.Marshal(a2a.SendMessageRequest{Message: msg, Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustTaskReply(t testing.TB, res json.RawMessage) *a2a.Task {
	t.Helper()
	r, err := a2a.DecodeSendMessageResponse(res)
	if err != nil {
		t.Fatalf("internal/a2a refuses the result %s: %v", res, err)
	}
	if r.Task == nil {
		t.Fatalf("result carries no task: %s", res)
	}
	return r.Task
}

var bindings = []string{string(sdk.TransportProtocolJSONRPC), string(sdk.TransportProtocolHTTPJSON)}
