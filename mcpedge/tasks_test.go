package mcpedge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every a2ad state has the extension's status a host polls for.
func TestTaskStatus(t *testing.T) {
	want := map[task.State]string{
		task.Submitted: "working", task.Working: "working",
		task.InputRequired: "input_required", task.AuthRequired: "input_required",
		task.Completed: "completed", task.Failed: "completed", task.Rejected: "completed",
		task.Canceled: "cancelled",
	}
	for s, w := range want {
		if got := TaskStatus(s); got != w {
			t.Errorf("TaskStatus(%s) = %s, want %s", s, got, w)
		}
	}
}

// A cancelled task's status message carries its reason itself: a
// cancelled MCP task has no result to point at.
func TestStatusMessageOfEndedTasks(t *testing.T) {
	for r, want := range map[*task.Record]string{
		{State: task.Canceled, Reason: "canceled_by_host"}: "a2ad task canceled (canceled_by_host)",
		{State: task.Failed, Reason: "artifact_rejected"}:  "a2ad task failed (artifact_rejected): the result's state and reason say how it ended",
	} {
		if got := statusMessage(r); got != want {
			t.Errorf("statusMessage(%s) = %q, want %q", r.State, got, want)
		}
	}
}

func TestParseInputResponse(t *testing.T) {
	cases := []struct {
		raw      string
		accepted bool
		content  string
		err      string
	}{
		{`{"action":"accept","content":{"answer":"  yes "}}`, true, `{"answer":"  yes "}`, ""},
		{`{"action":"accept","content":{}}`, true, `{}`, ""},
		{`{"action":"accept"}`, true, `{}`, ""},
		{`{"action":"accept","content":null}`, true, `{}`, ""},
		{`{"action":"decline"}`, false, "", ""},
		{`{"action":"cancel","content":{"answer":"ignored"}}`, false, "", ""},
		{`{"action":"accept","content":"yes"}`, false, "", "/content: want a JSON object"},
		{`{"action":"maybe"}`, false, "", `/action "maybe"`},
		{`{"content":{"answer":"yes"}}`, false, "", "want an elicitation result"},
		{`"yes"`, false, "", "want an elicitation result"},
		{`{"action":"accept","content":{"answer":"` + strings.Repeat("a", MaxInputResponseBytes) + `"}}`, false, "", "larger than 65536 bytes"},
	}
	for _, c := range cases {
		got, err := ParseInputResponse(json.RawMessage(c.raw))
		if got.Accepted != c.accepted || string(got.Content) != c.content || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ParseInputResponse(%.60s) = %+v, %v; want %v %s, %q", c.raw, got, err, c.accepted, c.content, c.err)
		}
	}
}

// An input response is a host's JSON: whatever it is, parsing ends with an
// accepted JSON object, a refusal or an error in a2ad's words, never a
// panic.
func FuzzParseInputResponse(f *testing.F) {
	for _, s := range []string{`{"action":"accept","content":{"answer":"yes"}}`, `{"action":"decline"}`, `{"action":"accept","content":{"answer":null}}`, `[]`, `{"action":1}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := ParseInputResponse(raw)
		if err != nil {
			if got.Accepted || got.Content != nil || strings.Contains(err.Error(), "json:") {
				t.Fatalf("error %q with %+v", err, got)
			}
			return
		}
		var obj map[string]json.RawMessage
		if got.Accepted != (got.Content != nil) || (got.Accepted && json.Unmarshal(got.Content, &obj) != nil) || len(got.Content) > MaxInputResponseBytes {
			t.Fatalf("%+v", got)
		}
	})
}

// A key names one request in a task's life: asked again after an answer,
// or with another question, the request has a new key; polled again, the
// same.
func TestInputRequestKeys(t *testing.T) {
	now := time.Now()
	r := &task.Record{ID: "tsk-1", AgentID: "fraud-review", State: task.Submitted, CreatedAt: now}
	mustMove := func(ev string) {
		t.Helper()
		if err := r.Move(now, ev, task.SourceAgent, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := inputRequest(r); ok {
		t.Fatal("a submitted task has an input request")
	}
	mustMove(task.EventStart)
	mustMove(task.EventAsk)
	r.Question = "Verified? Answer yes or no."
	k1, ask, ok := inputRequest(r)
	if !ok || !strings.HasPrefix(k1, "question-2-") || !strings.Contains(ask.Message, `"Verified? Answer yes or no."`) || string(ask.RequestedSchema.(json.RawMessage)) != string(answerSchema) {
		t.Fatalf("input request %s %+v", k1, ask)
	}
	if again, _, _ := inputRequest(r); again != k1 {
		t.Errorf("polled again: %s, want %s", again, k1)
	}
	r.Question = "Another question?"
	k2, _, _ := inputRequest(r)
	mustMove(task.EventResume)
	mustMove(task.EventAsk)
	r.Question = "Verified? Answer yes or no."
	k3, _, _ := inputRequest(r)
	if k2 == k1 || k3 == k1 || k3 == k2 {
		t.Errorf("keys %s %s %s, want three distinct", k1, k2, k3)
	}
	mustMove(task.EventResume)
	mustMove(task.EventNeedAuth)
	k4, ask, _ := inputRequest(r)
	if !strings.HasPrefix(k4, "authorization-") || string(ask.RequestedSchema.(json.RawMessage)) != string(authSchema) || !strings.Contains(ask.Message, "never forwards your credentials") {
		t.Errorf("authorization request %s %+v", k4, ask)
	}
}

// A task's Task: status, the result inlined only on tasks/get, ttlMs
// from the deadline (open) or the end (ended) plus the retention, and no
// poll interval once ended.
func TestTaskResult(t *testing.T) {
	created := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	e := &Edge{retention: time.Hour}
	r := &task.Record{ID: "tsk-2", AgentID: "fraud-review", OutputSchema: "risk_assessment", State: task.Working,
		CreatedAt: created, UpdatedAt: created.Add(time.Second), Deadline: created.Add(10 * time.Minute)}
	got := e.taskResult(r, "task")
	if got.ResultType != "task" || got.Status != "working" || got.TTLMs != (70*time.Minute).Milliseconds() || got.PollIntervalMs != 1000 ||
		got.CreatedAt != "2026-12-02T10:00:00Z" || got.LastUpdatedAt != "2026-12-02T10:00:01Z" || got.Result != nil {
		t.Errorf("working: %+v", got)
	}
	r.State, r.Reason, r.EndedAt = task.Rejected, task.ReasonAgentRejected, created.Add(2*time.Minute)
	got = e.taskResult(r, "complete")
	b, _ := json.Marshal(got.Result)
	if got.Status != "completed" || got.TTLMs != (62*time.Minute).Milliseconds() || got.PollIntervalMs != 0 ||
		!strings.Contains(string(b), `"state":"rejected"`) || !strings.Contains(got.StatusMessage, "rejected (agent_rejected)") {
		t.Errorf("rejected: %+v %s", got, b)
	}
	r.State = task.AuthRequired
	if got := e.taskResult(r, "complete"); got.Status != "input_required" || len(got.InputRequests) != 1 {
		t.Errorf("auth-required: %+v", got)
	}
}

// A host's malformed tasks/* params are refused in a2ad's words, before
// the go-sdk reads them.
func TestScreenTaskParams(t *testing.T) {
	for msg, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":5}}`:                               "invalid params: /params/taskId of tasks/get must be a string",
		`{"jsonrpc":"2.0","id":1,"method":"tasks/update","params":{"taskId":"t","inputResponses":[]}}`:      "invalid params: /params/inputResponses of tasks/update must be an object",
		`{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"t","_meta":"x"}}`:              "invalid params: /params/_meta of tasks/cancel must be an object",
		`{"jsonrpc":"2.0","id":1,"method":"tasks/update","params":{"taskId":"t","inputResponses":{"a":1}}}`: "",
	} {
		e := screen([]byte(msg))
		if (e == nil) != (want == "") || (e != nil && (e.Code != -32602 || e.Message != want)) {
			t.Errorf("screen(%s) = %+v, want %q", msg, e, want)
		}
	}
}

// The embedded stdio server does not speak the extension: its tasks/*
// answer -32601, and server/discover does not declare it.
func TestTasksNotOverStdio(t *testing.T) {
	p := &broker.Principal{Subject: "s", Tenant: "default", Scopes: []string{ScopeRead, ScopeDelegate}}
	s := NewServer(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Stdio: p})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{
		Extensions: map[string]any{TasksExtension: map[string]any{}}}})
	if err := mcp.AddSendingCustomMethod[*TaskParams, *TaskResult](client, MethodTasksGet); err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if caps, _ := json.Marshal(cs.InitializeResult().Capabilities); string(caps) != `{"resources":{"listChanged":true},"tools":{"listChanged":true}}` {
		t.Errorf("stdio declares %s, want tools and resources, without the Tasks extension", caps)
	}
	_, err = mcp.CallCustomMethod[*TaskParams, *TaskResult](ctx, cs, MethodTasksGet, &TaskParams{TaskID: "tsk-1"})
	var we *jsonrpc.Error
	// (go-sdk v1.8.0 rewrites the text of every -32601 to its own
	// `method not found: "tasks/get"`.)
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeMethodNotFound {
		t.Fatalf("tasks/get over stdio: %v, want -32601", err)
	}
}

// tasks/update and tasks/cancel spend a principal's writes, tasks/get
// its reads.
func TestTaskMethodsRateClasses(t *testing.T) {
	l := NewRateLimiter(RateLimits{PerPrincipal: RateClasses{Writes: Rate{PerSecond: 0.001, Burst: 1}, Reads: Rate{PerSecond: 0.001, Burst: 2}}})
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour), Extra: map[string]any{"sub": "s", "tenant": "t"}}, nil
	}
	h := auth.RequireBearerToken(verify, nil)(l.MCP(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	post := func(method string) int {
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"taskId":"tsk-1"}}`
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer x")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		method string
		want   int
	}{
		{MethodTasksUpdate, 200}, {MethodTasksCancel, 429}, // one write
		{MethodTasksGet, 200}, {MethodTasksGet, 200}, {MethodTasksGet, 429}, // two reads
	} {
		if got := post(c.method); got != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.method, got, c.want)
		}
	}
}
