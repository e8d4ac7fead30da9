package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpStack is a2ad with an embedded NATS server, the reference
// fraud-review agent served over A2A's HTTP bindings by the official Go
// SDK (a2asrv) on a loopback port, its card fetched from card_url and
// trusted on first use, and a go-sdk MCP host over HTTP.
type httpStack struct {
	stack
	agent *refagent.HTTPAgent
	srv   *httptest.Server
}

type httpStackOpts struct {
	misbehave map[string]string
	streaming bool
	bindings  []string                             // the agent's bindings preference
	wrap      func(next http.Handler) http.Handler // fault injection in front of the agent
}

func startHTTP(t *testing.T, o httpStackOpts) *httpStack {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	agent, err := refagent.NewHTTP(refagent.HTTPConfig{BaseURL: "http://" + srv.Listener.Addr().String(), Streaming: o.streaming, Misbehave: o.misbehave})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = agent.Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(func() { agent.Stop(); srv.Close() })

	var logTo io.Writer = io.Discard
	if os.Getenv("A2AD_TEST_LOG") != "" {
		logTo = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dataDir := t.TempDir()
	d, err := daemon.Start(context.Background(), daemon.Config{
		NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0", DataDir: dataDir,
		Agents: []daemon.AgentConfig{{
			AgentConfig: agentcard.AgentConfig{ID: "fraud-http", Tenants: []string{"default"}, TrustOnFirstUse: true,
				CardURL: srv.URL, Bindings: o.bindings},
			EvidenceSchemas: map[string]string{"assess_refund_risk": "refund_evidence"},
		}},
	}, log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	s := &httpStack{stack: stack{d: d, dataDir: dataDir}, agent: agent, srv: srv}
	waitFor(t, "HTTP agent approved and delegable", func() bool {
		r, err := d.Service.Agents.Get(context.Background(), "fraud-http")
		return err == nil && r.Delegable
	})
	token, err := mcpedge.MintDevToken(dataDir, d.Auth.Audience(), "test-host", "default", "a2a:read a2a:delegate", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.session, err = mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.session.Close() })
	return s
}

func httpDelegateArgs(ev map[string]any, deadline int) map[string]any {
	a := delegateArgs(ev)
	a["agent"] = "fraud-http"
	a["budget"] = map[string]any{"deadline_seconds": deadline}
	return a
}

// mustDelegate delegates with args and returns the host's result.
func (s *httpStack) mustDelegate(t *testing.T, args map[string]any) *mcpedge.TaskOutput {
	t.Helper()
	got, errText := s.call(t, "delegate", args, nil)
	if errText != "" {
		t.Fatal(errText)
	}
	return got
}

// record returns task id's stored record.
func (s *httpStack) record(t *testing.T, id string) *task.Record {
	t.Helper()
	r, _, err := s.d.Service.Tasks.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitEnded waits until task id is terminal and returns it as the host
// gets it from task_get.
func (s *httpStack) waitEnded(t *testing.T, id string, within time.Duration) *mcpedge.TaskOutput {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, errText := s.call(t, "task_get", map[string]any{"task_id": id}, nil)
		if errText != "" {
			t.Fatal(errText)
		}
		if task.State(got.State).Terminal() {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s after %s", id, got.State, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func completions(r *task.Record) int {
	n := 0
	for _, h := range r.History {
		if h.To == task.Completed && !h.Refused {
			n++
		}
	}
	return n
}

// A standard A2A agent, served by the official Go SDK, is delegated to like
// a NATS agent: over JSON-RPC and HTTP+JSON, followed by stream and by
// polls, the host gets the validated artifact, the agent got one brief.
func TestHTTPAgentDelegationCompletes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bindings  []string
		streaming bool
		want      string
	}{
		{"JSONRPC streaming", nil, true, agentcard.BindingJSONRPC},
		{"HTTP+JSON polled", []string{agentcard.BindingHTTPJSON}, false, agentcard.BindingHTTPJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startHTTP(t, httpStackOpts{streaming: tc.streaming, bindings: tc.bindings})
			got := s.mustDelegate(t, httpDelegateArgs(evidence("C-7", 1999), 60))
			if got.State != "completed" {
				got = s.waitEnded(t, got.TaskID, 10*time.Second)
			}
			if got.State != "completed" || len(got.Artifacts) != 1 {
				t.Fatalf("task %s %s (%s), artifacts %d; want completed with one", got.TaskID, got.State, got.Reason, len(got.Artifacts))
			}
			data, _ := json.Marshal(got.Artifacts[0].Parts[0].Data)
			if want := `{"case_id":"C-7","policy_version":"fraud-policy-2026.11","reasons":["no risk signals in the evidence"],"risk_level":"low","score":0.1}`; string(data) != want {
				t.Errorf("artifact %s, want %s", data, want)
			}
			// The follower releases its lease once the store shows the end.
			waitFor(t, "the follow lease released", func() bool { return s.record(t, got.TaskID).Follow == nil })
			r := s.record(t, got.TaskID)
			if r.Binding != tc.want || r.ContextID != "a2ad-"+got.TaskID || r.AgentTaskID == "" || r.Follow != nil || completions(r) != 1 {
				t.Errorf("record binding %q context %q agent task %q follow %+v completions %d", r.Binding, r.ContextID, r.AgentTaskID, r.Follow, completions(r))
			}
			if st := s.agent.Stats(); st.Briefs != 1 || st.ByA2ADTask[got.TaskID] != 1 {
				t.Errorf("agent stats %+v, want exactly one brief of %s", st, got.TaskID)
			}
		})
	}
}

// The input-required round trip: the agent's question reaches the host,
// task_respond sends the answer to the agent's task, and it completes.
func TestHTTPAgentAsksThenCompletes(t *testing.T) {
	s := startHTTP(t, httpStackOpts{streaming: true})
	ev := evidence("C-41", 125000)
	got := s.mustDelegate(t, httpDelegateArgs(ev, 60))
	for got.State != "input-required" {
		time.Sleep(20 * time.Millisecond)
		var errText string
		if got, errText = s.call(t, "task_get", map[string]any{"task_id": got.TaskID}, nil); errText != "" || task.State(got.State).Terminal() {
			t.Fatalf("waiting for the question: %s %+v", errText, got)
		}
	}
	if want := "Case C-41: the refund of 125000 cents is above the manual review threshold of 50000 cents. Has a human reviewer verified the customer's identity? Answer yes or no."; got.Question != want {
		t.Errorf("question %q, want %q", got.Question, want)
	}
	if _, errText := s.call(t, "task_respond", map[string]any{"task_id": got.TaskID, "answer": "yes", "wait_seconds": 10}, nil); errText != "" {
		t.Fatal(errText)
	}
	done := s.waitEnded(t, got.TaskID, 10*time.Second)
	if done.State != "completed" || len(done.Artifacts) != 1 {
		t.Fatalf("after the answer: %s (%s)", done.State, done.Reason)
	}
	if st := s.agent.Stats(); st.Briefs != 1 || st.Answers != 1 {
		t.Errorf("agent stats %+v, want one brief and one answer", st)
	}
}

// An HTTP agent's artifact is validated against the host schema exactly as
// a NATS agent's: a violating one fails the task and reaches no host.
func TestHTTPAgentSchemaViolatingArtifactIsRejected(t *testing.T) {
	s := startHTTP(t, httpStackOpts{streaming: true, misbehave: map[string]string{"C-13": refagent.ModeInvalidArtifact}})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-13", 4500), 60))
	done := s.waitEnded(t, got.TaskID, 10*time.Second)
	if done.State != "failed" || done.Reason != task.ReasonArtifactRejected || len(done.Artifacts) != 0 {
		t.Fatalf("task %s (%s) with %d artifacts, want failed (artifact_rejected) with none", done.State, done.Reason, len(done.Artifacts))
	}
}

// task_cancel reaches an HTTP agent as CancelTask; an agent that never
// answers is canceled at its deadline, and its hanging CancelTask is
// bounded: the task ends, no tool call waits on it.
func TestHTTPAgentCancelAndDeadline(t *testing.T) {
	s := startHTTP(t, httpStackOpts{streaming: true, misbehave: map[string]string{"C-901": refagent.ModeSilent, "C-902": refagent.ModeUnresponsive,
		"C-903": refagent.ModeCancelHangs}})
	args := httpDelegateArgs(evidence("C-901", 100), 60)
	args["wait_seconds"] = 0 // a silent agent: nothing to wait for
	got := s.mustDelegate(t, args)
	waitFor(t, "the agent's task id recorded", func() bool { return s.record(t, got.TaskID).AgentTaskID != "" })
	start := time.Now()
	canceled, errText := s.call(t, "task_cancel", map[string]any{"task_id": got.TaskID}, nil)
	if errText != "" || canceled.State != "canceled" || canceled.Reason != task.ReasonCanceledByHost {
		t.Fatalf("task_cancel: %s %+v", errText, canceled)
	}
	waitFor(t, "CancelTask at the agent", func() bool { return s.agent.Stats().Cancels == 1 })
	t.Logf("task_cancel answered in %s", time.Since(start).Round(time.Millisecond))
	waitFor(t, "the cancel delivered", func() bool { return s.record(t, got.TaskID).Outbox == nil })
	t.Logf("CancelTask delivered after %s", time.Since(start).Round(time.Millisecond))

	// An agent whose CancelTask hangs (measured over 60 s on a real
	// @a2a-js/sdk agent): task_cancel answers at once, the CancelTask is
	// bounded by its timeout and retried, and the outbox is given up after
	// broker.MaxCancelAttempts.
	args = httpDelegateArgs(evidence("C-903", 100), 60)
	args["wait_seconds"] = 0
	hung, errText := s.call(t, "delegate", args, nil)
	if errText != "" {
		t.Fatal(errText)
	}
	waitFor(t, "the agent's task id recorded", func() bool { return s.record(t, hung.TaskID).AgentTaskID != "" })
	start = time.Now()
	canceled, errText = s.call(t, "task_cancel", map[string]any{"task_id": hung.TaskID}, nil)
	if took := time.Since(start); errText != "" || canceled.State != "canceled" || took > 4*time.Second {
		t.Fatalf("task_cancel of a task whose agent hangs: %s %+v after %s", errText, canceled, took)
	}
	if r := s.record(t, hung.TaskID); r.Outbox == nil || r.Outbox.Method != "CancelTask" {
		t.Fatalf("the unconfirmed CancelTask is not kept for a retry: %+v", r.Outbox)
	}

	start = time.Now()
	args = httpDelegateArgs(evidence("C-902", 100), 2)
	args["wait_seconds"] = 0
	got, errText = s.call(t, "delegate", args, nil)
	if errText != "" {
		t.Fatal(errText)
	}
	// The send waits out its 5 s timeout (the outcome is unknown), by
	// which time the 2 s deadline canceled the task.
	if took := time.Since(start); took > 7*time.Second {
		t.Fatalf("delegate to an unresponsive agent answered after %s (%s)", took, got.State)
	}
	done := s.waitEnded(t, got.TaskID, 20*time.Second)
	if done.State != "canceled" || done.Reason != task.ReasonDeadlineExceeded {
		t.Fatalf("unresponsive agent's task: %s (%s), want canceled (deadline_exceeded)", done.State, done.Reason)
	}
	if n := s.agent.Stats().ByA2ADTask[got.TaskID]; n != 1 {
		t.Errorf("the unresponsive agent got %d briefs of %s, want 1", n, got.TaskID)
	}
}

// cutFirstSend answers nothing to the first SendMessage although the agent
// handled it: the connection is closed after the agent's reply was
// written to a buffer, as a network reset after the send would.
func cutFirstSend(cut *atomic.Bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := peekBody(r)
			isSend := strings.Contains(string(body), `"SendMessage"`) || strings.HasSuffix(r.URL.Path, "/message:send")
			if !isSend || !cut.CompareAndSwap(false, true) {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
				}
			}
		})
	}
}

// A brief whose reply is lost is not sent again blindly (standard agents do
// not deduplicate messageId): a2ad finds the agent's task by the contextId
// it chose (ListTasks) and follows it; the agent got one brief.
func TestHTTPAgentLostReplyIsReconciledNotResent(t *testing.T) {
	var cut atomic.Bool
	s := startHTTP(t, httpStackOpts{streaming: true, wrap: cutFirstSend(&cut)})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-7", 1999), 60))
	if !cut.Load() {
		t.Fatal("the first SendMessage was not cut")
	}
	done := s.waitEnded(t, got.TaskID, 20*time.Second)
	if done.State != "completed" {
		t.Fatalf("task %s (%s), want completed", done.State, done.Reason)
	}
	if n := s.agent.Stats().ByA2ADTask[got.TaskID]; n != 1 {
		t.Fatalf("the agent got %d briefs of %s, want exactly 1", n, got.TaskID)
	}
	if r := s.record(t, got.TaskID); completions(r) != 1 || r.AgentTaskID == "" {
		t.Errorf("record: %d completions, agent task %q", completions(r), r.AgentTaskID)
	}
}

// Where the agent cannot be asked (no ListTasks for this caller), a brief
// whose reply was lost ends the task failed with delivery_unknown — never
// sent twice.
func TestHTTPAgentUndecidableDeliveryFailsTheTask(t *testing.T) {
	var cut atomic.Bool
	noList := func(next http.Handler) http.Handler {
		inner := cutFirstSend(&cut)(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := peekBody(r)
			if strings.Contains(string(body), `"ListTasks"`) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonID(body) + `,"error":{"code":-32004,"message":"ListTasks is not supported"}}`))
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	s := startHTTP(t, httpStackOpts{streaming: true, wrap: noList})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-7", 1999), 60))
	done := s.waitEnded(t, got.TaskID, 20*time.Second)
	if done.State != "failed" || !strings.HasPrefix(done.Reason, task.ReasonDeliveryUnknown) {
		t.Fatalf("task %s (%s), want failed (delivery_unknown…)", done.State, done.Reason)
	}
	if n := s.agent.Stats().ByA2ADTask[got.TaskID]; n != 1 {
		t.Fatalf("the agent got %d briefs of %s, want exactly 1", n, got.TaskID)
	}
}

// peekBody reads r's body and leaves it to be read again.
func peekBody(r *http.Request) []byte {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body
}

// jsonID is the "id" member of a JSON-RPC request, as JSON.
func jsonID(body []byte) string {
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 {
		return "null"
	}
	return string(req.ID)
}

// Every request a2ad sends an HTTP agent for a task — the brief's
// SendMessage, the follower's SubscribeToTask and GetTask — carries
// A2A-Version: 1.0 and the task's traceparent, and no Authorization
// (none is configured: the host's token never goes to an agent).
func TestHTTPAgentRequestsCarryVersionAndTrace(t *testing.T) {
	type seen struct{ method, version, trace, auth string }
	var mu sync.Mutex
	var reqs []seen
	record := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := peekBody(r)
			var rpc struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &rpc)
			// a2ad's liveness probes are for no task: they carry no traceparent.
			if rpc.Method != "" && !bytes.Contains(body, []byte(`"id":"`+natsbind.ProbeTaskID+`"`)) {
				mu.Lock()
				reqs = append(reqs, seen{rpc.Method, r.Header.Get("A2A-Version"), r.Header.Get("traceparent"), r.Header.Get("Authorization")})
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	s := startHTTP(t, httpStackOpts{streaming: true, wrap: record})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-7", 1999), 60))
	done := s.waitEnded(t, got.TaskID, 10*time.Second)
	r := s.record(t, got.TaskID)
	if done.State != "completed" || r.TraceParent == "" {
		t.Fatalf("task %s, traceparent %q", done.State, r.TraceParent)
	}
	mu.Lock()
	defer mu.Unlock()
	methods := map[string]bool{}
	for _, q := range reqs {
		methods[q.method] = true
		if q.version != "1.0" || q.trace != r.TraceParent || q.auth != "" {
			t.Errorf("%s: A2A-Version %q traceparent %q Authorization %q; want 1.0, %s and none", q.method, q.version, q.trace, q.auth, r.TraceParent)
		}
	}
	if !methods["SendMessage"] || !methods["SubscribeToTask"] {
		t.Errorf("requests %+v, want SendMessage and SubscribeToTask among them", reqs)
	}
}
