package httpbind

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/a2ad/a2ad/internal/a2a"
)

func certPool(s *httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A brief as the broker sends it comes back as a task internal/a2a
// decodes, submitted, in a2ad's context; every request carries
// A2A-Version 1.0, the traceparent, User-Agent a2ad and no Authorization
// (not even one a caller's context tried to add).
func TestSendBriefReturnsSubmittedTask(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			hold := make(chan struct{})
			defer close(hold)
			a := startAgent(t, bnd, agentOpts{hold: hold})
			b := bindingFor(t, a, Config{})
			ctx := a2aclient.AttachServiceParams(t.Context(), a2aclient.ServiceParams{"Authorization": {"Bearer host-token"}})
			res, err := b.Send(ctx, "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), traceparent)
			if err != nil {
				t.Fatal(err)
			}
			at := mustTaskReply(t, res)
			if at.Status.State != a2a.TaskStateSubmitted {
				t.Errorf("state = %q, want %q", at.Status.State, a2a.TaskStateSubmitted)
			}
			if at.ContextID != "a2ad-T1" {
				t.Errorf("contextId = %q, want a2ad-T1", at.ContextID)
			}
			reqs := a.requests()
			if len(reqs) != 1 || reqs[0].RPC != "SendMessage" {
				t.Fatalf("agent got %+v, want one SendMessage", reqs)
			}
			h := reqs[0].Header
			for k, want := range map[string]string{"A2A-Version": "1.0", "Traceparent": traceparent, "User-Agent": "a2ad", "Authorization": ""} {
				if got := h.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// Standard agents do not deduplicate messageId: the same brief twice is
// two tasks at a real a2a-go agent. This is why a2ad reconciles.
func TestSameMessageIDTwiceIsTwoTasks(t *testing.T) {
	a := startAgent(t, string(sdk.TransportProtocolJSONRPC), agentOpts{})
	b := bindingFor(t, a, Config{Agents: bearerAuth(t, "a2ad-1")})
	var ids []string
	for range 2 {
		res, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, mustTaskReply(t, res).ID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("one task for two sends (%s): the agent deduplicates after all", ids[0])
	}
	c, _, err := b.Client(t.Context(), "fraud")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListTasks(WithTraceparent(t.Context(), traceparent), &sdk.ListTasksRequest{ContextID: "a2ad-T1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tasks) != 2 {
		t.Fatalf("ListTasks(a2ad-T1) = %d tasks, want 2", len(list.Tasks))
	}
}

// GetTask and CancelTask return a Task internal/a2a decodes; CancelTask
// of the task the agent is working on cancels it.
func TestGetTaskAndCancelTask(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			hold := make(chan struct{})
			defer close(hold)
			a := startAgent(t, bnd, agentOpts{hold: hold})
			b := bindingFor(t, a, Config{})
			id := briefAndWait(t, b, "T1", sdk.TaskStateSubmitted)
			res, err := b.Send(t.Context(), "fraud", a2a.MethodGetTask, mustJSON(t, a2a.GetTaskRequest{ID: id}), "")
			if err != nil {
				t.Fatal(err)
			}
			got, err := a2a.DecodeTask(res)
			if err != nil {
				t.Fatalf("GetTask result %s: %v", res, err)
			}
			if got.ID != id || got.Status.State != a2a.TaskStateSubmitted {
				t.Errorf("GetTask = %s %s, want %s %s", got.ID, got.Status.State, id, a2a.TaskStateSubmitted)
			}
			res, err = b.Send(t.Context(), "fraud", a2a.MethodCancelTask, mustJSON(t, a2a.CancelTaskRequest{ID: id}), "")
			if err != nil {
				t.Fatal(err)
			}
			got, err = a2a.DecodeTask(res)
			if err != nil {
				t.Fatalf("CancelTask result %s: %v", res, err)
			}
			if got.Status.State != a2a.TaskStateCanceled {
				t.Errorf("after CancelTask state = %s, want %s", got.Status.State, a2a.TaskStateCanceled)
			}
		})
	}
}

// The agent's A2A errors are *a2a.RPCError with the A2A 1.0 code, and
// their text is a2ad's, not the agent's.
func TestAgentErrorsAreRPCErrors(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			a := startAgent(t, bnd, agentOpts{})
			b := bindingFor(t, a, Config{})
			_, err := b.Send(t.Context(), "fraud", a2a.MethodGetTask, mustJSON(t, a2a.GetTaskRequest{ID: "no-such-task"}), "")
			var re *a2a.RPCError
			if !errors.As(err, &re) || re.Code != a2a.CodeTaskNotFound {
				t.Fatalf("GetTask of an unknown task: %v, want RPCError %d", err, a2a.CodeTaskNotFound)
			}
			if strings.Contains(err.Error(), "no-such-task") {
				t.Errorf("error quotes the request back: %q", err)
			}
			id := briefAndWait(t, b, "T2", sdk.TaskStateInputRequired)
			sendAnswer(t, b, "T2", id)
			waitState(t, b, id, sdk.TaskStateCompleted)
			_, err = b.Send(t.Context(), "fraud", a2a.MethodCancelTask, mustJSON(t, a2a.CancelTaskRequest{ID: id}), "")
			if !a2a.IsCode(err, a2a.CodeTaskNotCancelable) {
				t.Fatalf("CancelTask of a completed task: %v, want RPCError %d", err, a2a.CodeTaskNotCancelable)
			}
		})
	}
}

// Nothing listening: the request provably never reached an agent.
func TestConnectionRefusedIsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	b := New(Config{Lookup: func(string) (Target, error) {
		return Target{AgentID: "fraud", Binding: "JSONRPC", URL: "http://" + addr + "/"}, nil
	}})
	_, err = b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	if !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("err = %v, want ErrAgentUnreachable", err)
	}
}

// An unresolvable host name: not sent either.
func TestDNSFailureIsUnreachable(t *testing.T) {
	b := New(Config{Lookup: func(string) (Target, error) {
		return Target{AgentID: "fraud", Binding: "JSONRPC", URL: "https://no-such-host.invalid/a2a"}, nil
	}})
	_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	if !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("err = %v, want ErrAgentUnreachable", err)
	}
}

// A request written whose answer never comes: the outcome is unknown
// (none of the three classes), so the broker reconciles before resending.
func TestTimeoutAfterWriteIsUnknown(t *testing.T) {
	release := make(chan struct{})
	a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
	}})
	defer close(release)
	b := bindingFor(t, a, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := b.Send(ctx, "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	var re *a2a.RPCError
	if err == nil || errors.Is(err, a2a.ErrAgentUnreachable) || errors.Is(err, a2a.ErrDecode) || errors.As(err, &re) {
		t.Fatalf("err = %v, want an unknown outcome", err)
	}
	if want := "agent fraud: SendMessage sent, but no answer came (timeout or connection lost): outcome unknown"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// https to a real a2a-go agent works with its CA; an agent offering only
// TLS 1.1 fails the handshake before anything is sent.
func TestTLS(t *testing.T) {
	a := startAgent(t, "JSONRPC", agentOpts{tls: true})
	b := bindingFor(t, a, Config{})
	res, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	if err != nil {
		t.Fatal(err)
	}
	mustTaskReply(t, res)

	old := httptest.NewUnstartedServer(http.NotFoundHandler())
	old.TLS = &tls11
	old.StartTLS()
	defer old.Close()
	b = New(Config{RootCAs: certPool(old), Lookup: func(string) (Target, error) {
		return Target{AgentID: "fraud", Binding: "JSONRPC", URL: old.URL + "/"}, nil
	}})
	_, err = b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	if !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("TLS 1.1 agent: err = %v, want ErrAgentUnreachable", err)
	}
}

// Plain http is refused to anything but loopback, before any dial.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	for url, ok := range map[string]bool{
		"http://agents.example.com/a2a": false,
		"http://10.1.2.3:8080/a2a":      false,
		"http://[::ffff:10.0.0.1]/":     false,
		"ftp://agents.example.com/":     false,
		"https://u:p@agents.example/":   false,
		"http://localhost:1/":           true,
		"http://127.0.0.1:1/":           true,
		"http://[::1]:1/":               true,
		"https://agents.example.com/":   true,
	} {
		_, err := checkURL("fraud", url)
		var ue *URLError
		if ok != (err == nil) || (!ok && !errors.As(err, &ue)) {
			t.Errorf("checkURL(%s) = %v, want allowed=%v", url, err, ok)
		}
	}
	b := New(Config{Lookup: func(string) (Target, error) {
		return Target{AgentID: "fraud", Binding: "JSONRPC", URL: "http://agents.example.com/a2a"}, nil
	}})
	_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	var ue *URLError
	if !errors.As(err, &ue) || !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("err = %v, want *URLError, not sent", err)
	}
	if want := "plain http is allowed only to a loopback address or localhost; want https"; ue.Reason != want {
		t.Errorf("reason = %q, want %q", ue.Reason, want)
	}
}

// A redirect is refused, not followed: its target never gets a request.
func TestRedirectRefused(t *testing.T) {
	target := startAgent(t, "JSONRPC", agentOpts{})
	redirector := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
		return http.RedirectHandler(target.URL+"/", http.StatusTemporaryRedirect)
	}})
	b := bindingFor(t, redirector, Config{})
	_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	var re *RedirectError
	if !errors.As(err, &re) || re.Status != http.StatusTemporaryRedirect {
		t.Fatalf("err = %v, want *RedirectError 307", err)
	}
	if !a2a.IsCode(err, a2a.CodeInvalidAgentResponse) {
		t.Errorf("err = %v, want the class RPCError %d (the agent took nothing)", err, a2a.CodeInvalidAgentResponse)
	}
	if n := len(target.requests()); n != 0 {
		t.Errorf("redirect target got %d requests, want 0", n)
	}
}

// A request to another origin than the interface's is refused before
// dialing.
func TestOtherOriginRefused(t *testing.T) {
	other := startAgent(t, "JSONRPC", agentOpts{})
	hc := newHTTPClient("fraud", "http://127.0.0.1:1", nil, Limits{}.withDefaults(), nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, other.URL+"/", strings.NewReader("{}"))
	_, err := hc.Do(req)
	var oe *OriginError
	if !errors.As(err, &oe) || !errors.Is(err, a2a.ErrAgentUnreachable) {
		t.Fatalf("err = %v, want *OriginError, not sent", err)
	}
	if oe.Want != "http://127.0.0.1:1" || oe.Got != origin(req.URL) {
		t.Errorf("OriginError %+v", oe)
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("other origin got %d requests, want 0", n)
	}
}

// An answer larger than DefaultMaxResponseBytes is refused, never
// truncated into a success, whether its length is declared or streamed.
func TestResponseOverLimitRefused(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		big := `{"jsonrpc":"2.0","id":"x","result":{"task":{"id":"t","status":{"state":"TASK_STATE_SUBMITTED"},"metadata":{"pad":"` +
			strings.Repeat("a", DefaultMaxResponseBytes) + `"}}}}`
		a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if chunked {
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
				}
				_, _ = w.Write([]byte(big))
			})
		}})
		b := bindingFor(t, a, Config{})
		_, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != DefaultMaxResponseBytes || !errors.Is(err, a2a.ErrDecode) {
			t.Fatalf("chunked=%v: err = %v, want *LimitError of %d bytes (ErrDecode)", chunked, err, DefaultMaxResponseBytes)
		}
	}
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// briefAndWait sends brief taskID and waits until the agent's task is in
// state; it returns the agent's task id.
func briefAndWait(t testing.TB, b *Binding, taskID string, state sdk.TaskState) string {
	t.Helper()
	res, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, taskID), "")
	if err != nil {
		t.Fatal(err)
	}
	id := mustTaskReply(t, res).ID
	waitState(t, b, id, state)
	return id
}

// waitState waits until the agent's task id is in state.
func waitState(t testing.TB, b *Binding, id string, state sdk.TaskState) {
	t.Helper()
	c, _, err := b.Client(t.Context(), "fraud")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := c.GetTask(t.Context(), &sdk.GetTaskRequest{ID: sdk.TaskID(id)})
		if err == nil && got.Status.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent task %s not %s within 5 s: %v %v", id, state, got, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var tls11 = tls.Config{MaxVersion: tls.VersionTLS11}

// bearerAuth is the Agents configuration of agent "fraud" with a bearer
// token file holding tok.
func bearerAuth(t testing.TB, tok string) map[string]AgentConfig {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]AgentConfig{"fraud": {Auth: Auth{BearerTokenFile: p}}}
}

// Calls reuse one connection to the agent rather than opening one per
// call (a2ad's body limit keeps net/http's end-of-body signal intact).
func TestConnectionReused(t *testing.T) {
	var conns atomic.Int32
	a := startAgent(t, "JSONRPC", agentOpts{connState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}})
	b := bindingFor(t, a, Config{})
	for i := range 5 {
		if _, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, fmt.Sprint("T", i)), ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 calls opened %d connections, want 1", n)
	}
}

// sendAnswer sends the answer of task taskID to the agent's task id.
func sendAnswer(t testing.TB, b *Binding, taskID, id string) {
	t.Helper()
	sendSettled(t, b, a2a.MethodSendMessage, answerParams(t, taskID, id))
}

// sendSettled sends method to the agent and returns its result. An
// a2a-go agent refuses a message or a cancellation (-32603, "task
// execution is already in progress") while the execution that asked is
// still winding down after its input-required event: retried for up to
// 5 s.
func sendSettled(t testing.TB, b *Binding, method string, params json.RawMessage) json.RawMessage {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := b.Send(t.Context(), "fraud", method, params, "")
		if err == nil {
			return res
		}
		if !errors.Is(err, ErrAgentInternalError) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An HTTP answer without an A2A error: 404/405/501 are "no such
// method" and other 4xx (but 408, 429) "invalid request" — the agent
// took nothing; 408, 429 and 5xx leave the outcome unknown.
func TestHTTPStatusClasses(t *testing.T) {
	for _, bnd := range bindings {
		for status, code := range map[int]int{404: a2a.CodeMethodNotFound, 405: a2a.CodeMethodNotFound, 501: a2a.CodeMethodNotFound,
			400: a2a.CodeInvalidRequest, 413: a2a.CodeInvalidRequest, 429: 0, 408: 0, 500: 0, 503: 0} {
			a := startAgent(t, bnd, agentOpts{wrap: func(http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "agent-text", status)
				})
			}})
			_, err := bindingFor(t, a, Config{}).Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
			var re *a2a.RPCError
			switch {
			case code != 0 && !a2a.IsCode(err, code):
				t.Errorf("%s HTTP %d: err = %v, want RPCError %d", bnd, status, err, code)
			case code == 0 && (err == nil || errors.As(err, &re) || errors.Is(err, a2a.ErrAgentUnreachable) || errors.Is(err, a2a.ErrDecode)):
				t.Errorf("%s HTTP %d: err = %v, want an unknown outcome", bnd, status, err)
			case err != nil && strings.Contains(err.Error(), "agent-text"):
				t.Errorf("%s HTTP %d: error %q quotes the agent", bnd, status, err)
			}
		}
	}
}

// What a2a-go decodes is re-encoded as the A2A 1.0 JSON internal/a2a
// reads, content intact: artifacts' text, data, raw and url parts, the
// status message, timestamps, metadata; a message result too.
func TestResultContentPreserved(t *testing.T) {
	const taskBody = `{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t1","contextId":"a2ad-T1",
		"status":{"state":"TASK_STATE_WORKING","timestamp":"2026-12-02T06:00:00Z","message":{"messageId":"s1","role":"ROLE_AGENT","parts":[{"text":"checking"}]}},
		"artifacts":[{"artifactId":"a1","name":"verdict","parts":[
			{"data":{"fraud":false,"score":0.25},"mediaType":"application/json"},
			{"text":"looks fine"},
			{"raw":"aGVsbG8=","mediaType":"application/octet-stream","filename":"h.bin"},
			{"url":"https://files.example/r.pdf","mediaType":"application/pdf"}]}],
		"metadata":{"k":"v"}}}}`
	const msgBody = `{"jsonrpc":"2.0","id":"1","result":{"message":{"messageId":"m1","role":"ROLE_AGENT","parts":[{"text":"done"}]}}}`
	for _, body := range []string{taskBody, msgBody} {
		a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(body))
			})
		}})
		res, err := bindingFor(t, a, Config{}).Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := a2a.DecodeSendMessageResponse(res)
		if err != nil {
			t.Fatalf("%s: %v", res, err)
		}
		if got.Message != nil {
			if got.Message.MessageID != "m1" || got.Message.Role != a2a.RoleAgent || got.Message.Text() != "done" {
				t.Errorf("message = %+v", got.Message)
			}
			continue
		}
		at := got.Task
		if at.Status.State != a2a.TaskStateWorking || at.Status.Message.Text() != "checking" || at.Status.Timestamp == "" {
			t.Errorf("status = %+v", at.Status)
		}
		if len(at.Artifacts) != 1 || len(at.Artifacts[0].Parts) != 4 {
			t.Fatalf("artifacts = %+v", at.Artifacts)
		}
		p := at.Artifacts[0].Parts
		var data map[string]any
		_ = json.Unmarshal(p[0].Data, &data)
		if data["fraud"] != false || data["score"] != 0.25 || p[0].MediaType != "application/json" {
			t.Errorf("data part = %s %s", p[0].Data, p[0].MediaType)
		}
		if p[1].Text == nil || *p[1].Text != "looks fine" {
			t.Errorf("text part = %+v", p[1])
		}
		if string(p[2].Raw) != "hello" || p[2].Filename != "h.bin" {
			t.Errorf("raw part = %+v", p[2])
		}
		if p[3].URL == nil || *p[3].URL != "https://files.example/r.pdf" {
			t.Errorf("url part = %+v", p[3])
		}
		if string(at.Metadata) != `{"k":"v"}` {
			t.Errorf("metadata = %s", at.Metadata)
		}
	}
}

// A target that changes (a re-approved card with another URL) gets a new
// client: requests go to the new origin only.
func TestClientRebuiltWhenTargetChanges(t *testing.T) {
	a1 := startAgent(t, "JSONRPC", agentOpts{})
	a2 := startAgent(t, "HTTP+JSON", agentOpts{})
	var mu sync.Mutex
	tgt := Target{AgentID: "fraud", Binding: "JSONRPC", URL: a1.URL}
	b := New(Config{Lookup: func(string) (Target, error) {
		mu.Lock()
		defer mu.Unlock()
		return tgt, nil
	}})
	if _, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), ""); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	tgt = Target{AgentID: "fraud", Binding: "HTTP+JSON", URL: a2.URL + "/"}
	mu.Unlock()
	if _, err := b.Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T2"), ""); err != nil {
		t.Fatal(err)
	}
	if n1, n2 := a1.count("SendMessage"), a2.count("SendMessage"); n1 != 1 || n2 != 1 {
		t.Errorf("SendMessage at the old and new URL = %d, %d; want 1, 1", n1, n2)
	}
}

// The agent reads the request, then drops the connection: sent, outcome
// unknown (the agent may have created a task).
func TestResetAfterWriteIsUnknown(t *testing.T) {
	a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		})
	}})
	_, err := bindingFor(t, a, Config{}).Send(t.Context(), "fraud", a2a.MethodSendMessage, briefParams(t, "T1"), "")
	var re *a2a.RPCError
	if err == nil || errors.Is(err, a2a.ErrAgentUnreachable) || errors.Is(err, a2a.ErrDecode) || errors.As(err, &re) {
		t.Fatalf("err = %v, want an unknown outcome", err)
	}
}
