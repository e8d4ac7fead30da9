package natsagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
)

const testAgent = "agent1"

// testExecutor is a small a2a-go/v2 agent: a message whose text is "ask"
// asks a question and completes with the answer; "slow" waits for
// release (or its context) before completing; anything else completes at
// once with the artifact {"echo": <text>}.
type testExecutor struct {
	runs    atomic.Int32
	release chan struct{}
}

func newTestExecutor() *testExecutor { return &testExecutor{release: make(chan struct{})} }

func (e *testExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	e.runs.Add(1)
	return func(yield func(a2a.Event, error) bool) {
		text := ""
		for _, p := range ec.Message.Parts {
			text += p.Text()
		}
		if ec.StoredTask == nil {
			if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		if ec.StoredTask == nil && text == "ask" {
			q := a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("Is the customer verified?"))
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, q), nil)
			return
		}
		if text == "slow" {
			select {
			case <-e.release:
			case <-ctx.Done():
				return
			}
		}
		if !yield(a2a.NewArtifactEvent(ec, a2a.NewDataPart(map[string]any{"echo": text})), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (e *testExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// countingHandler counts the GetTask calls that reach the handler.
type countingHandler struct {
	a2asrv.RequestHandler
	getTasks atomic.Int32
}

func (h *countingHandler) GetTask(ctx context.Context, r *a2a.GetTaskRequest) (*a2a.Task, error) {
	h.getTasks.Add(1)
	return h.RequestHandler.GetTask(ctx, r)
}

type env struct {
	t    testing.TB
	ns   *server.Server
	nc   *nats.Conn // a2ad's side
	js   jetstream.JetStream
	exec *testExecutor
	h    *countingHandler
	srv  *Server
	regs atomic.Int32
	seq  atomic.Int32
}

// newEnv starts an embedded NATS with JetStream, the agent's events
// stream as a2ad creates it (when withStream), a registry answering
// approved, and a Server for a testExecutor on a connection of its own.
func newEnv(t testing.TB, withStream bool) *env {
	t.Helper()
	ns, nc, js := natstest.Start(t)
	e := &env{t: t, ns: ns, nc: nc, js: js, exec: newTestExecutor()}
	if withStream {
		e.createStream()
	}
	e.serveRegistry(nc)
	e.h = &countingHandler{RequestHandler: a2asrv.NewHandler(e.exec)}
	anc, err := nats.Connect(ns.ClientURL(), ConnectOptions(testAgent, "cred-1")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	srv, err := NewServer(anc, e.h, Config{AgentID: testAgent, Card: json.RawMessage(`{"name": "t"}`), Credential: "cred-1", ReplicaID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	e.srv = srv
	return e
}

func (e *env) shutdown() {
	e.t.Helper()
	if err := e.srv.Shutdown(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) createStream() {
	e.t.Helper()
	_, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "A2AD_EVENTS_" + testAgent, Subjects: []string{"a2a.events." + testAgent + ".>"},
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) serveRegistry(nc *nats.Conn) {
	e.t.Helper()
	_, err := nc.Subscribe(natsbind.RegisterSubject, func(m *nats.Msg) {
		var r natsbind.RegisterRequest
		resp := natsbind.RegisterResponse{AgentID: testAgent, Status: "approved", Fingerprint: "sha256:abc"}
		if json.Unmarshal(m.Data, &r) != nil || m.Header.Get("Authorization") != "Bearer cred-1" || string(r.Card) != `{"name": "t"}` {
			resp = natsbind.RegisterResponse{AgentID: testAgent, Code: natsbind.RegisterInvalid, Error: "bad registration"}
		}
		e.regs.Add(1)
		b, _ := json.Marshal(resp)
		_ = m.Respond(b)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = nc.Flush()
}

// request sends one JSON-RPC request to subject and returns the reply.
func (e *env) request(subject, method string, params any) (*nats.Msg, *wire.Response) {
	e.t.Helper()
	req, err := wire.NewRequest(fmt.Sprint(e.seq.Add(1)), method, params)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(natsbind.HeaderA2AVersion, "1.0")
	reply, err := e.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		e.t.Fatalf("%s: %v", method, err)
	}
	var resp wire.Response
	if err := json.Unmarshal(reply.Data, &resp); err != nil || resp.ID != req.ID {
		e.t.Fatalf("%s: %v in %s", method, err, reply.Data)
	}
	return reply, &resp
}

// send is a2ad's SendMessage for its task a2adTask: text, and taskID
// ("" for a new task).
func sendParams(a2adTask, messageID, taskID, text string) map[string]any {
	meta := map[string]any{MetaTaskID: a2adTask, MetaEventsSubject: natsbind.EventsSubject(testAgent, a2adTask)}
	msg := map[string]any{"messageId": messageID, "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}}, "metadata": meta}
	if taskID != "" {
		msg["taskId"] = taskID
	}
	return map[string]any{"message": msg, "configuration": map[string]any{"returnImmediately": true, "acceptedOutputModes": []string{"application/json"}}, "metadata": meta}
}

// task decodes a SendMessage result {"task": …} or a Task.
func taskOf(t *testing.T, resp *wire.Response) *a2a.Task {
	t.Helper()
	if resp.Error != nil {
		t.Fatalf("error reply: %d %s", resp.Error.Code, resp.Error.Message)
	}
	var sr a2a.StreamResponse
	if err := json.Unmarshal(resp.Result, &sr); err == nil {
		if tk, ok := sr.Event.(*a2a.Task); ok {
			return tk
		}
	}
	var tk a2a.Task
	if err := json.Unmarshal(resp.Result, &tk); err != nil {
		t.Fatalf("not a task: %s", resp.Result)
	}
	return &tk
}

type event struct {
	msgID string
	kind  string // task, statusUpdate, artifactUpdate
	state a2a.TaskState
	body  string
}

// events reads n events of the stream, in order, from sequence start.
func (e *env) events(start uint64, n int) []event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, "A2AD_EVENTS_"+testAgent, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []event
	for len(out) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
		if err != nil {
			e.t.Fatalf("event %d of %d: %v (have %+v)", len(out)+1, n, err, out)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(m.Data(), &raw); err != nil || len(raw) != 1 {
			e.t.Fatalf("event is not one stream item: %s", m.Data())
		}
		if m.Headers().Get(natsbind.HeaderA2AVersion) != "1.0" {
			e.t.Fatalf("event without A2A-Version 1.0: %v", m.Headers())
		}
		if e.srv != nil && m.Headers().Get(natsbind.HeaderReplica) != e.srv.ReplicaID() {
			e.t.Fatalf("event's A2ad-Replica %q, want the server's %q (§6.3)", m.Headers().Get(natsbind.HeaderReplica), e.srv.ReplicaID())
		}
		var sr a2a.StreamResponse
		if err := json.Unmarshal(m.Data(), &sr); err != nil {
			e.t.Fatal(err)
		}
		ev := event{msgID: m.Headers().Get(natsbind.HeaderMsgID), body: string(m.Data())}
		switch x := sr.Event.(type) {
		case *a2a.Task:
			ev.kind, ev.state = "task", x.Status.State
		case *a2a.TaskStatusUpdateEvent:
			ev.kind, ev.state = "statusUpdate", x.Status.State
		case *a2a.TaskArtifactUpdateEvent:
			ev.kind = "artifactUpdate"
		default:
			ev.kind = fmt.Sprintf("%T", x)
		}
		out = append(out, ev)
	}
	return out
}

func summary(evs []event) string {
	var b []string
	for _, ev := range evs {
		b = append(b, ev.msgID+" "+ev.kind+" "+string(ev.state))
	}
	return strings.Join(b, "\n")
}

func wantEvents(t *testing.T, got []event, want string) {
	t.Helper()
	if s := summary(got); s != want {
		t.Fatalf("events:\n%s\nwant:\n%s", s, want)
	}
}

func TestSendMessagePublishesEventsInOrder(t *testing.T) {
	e := newEnv(t, true)
	reply, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-1", "tsk-1-m1", "", "hello"))
	tk := taskOf(t, resp)
	if tk.Status.State != a2a.TaskStateSubmitted || len(tk.History) != 0 {
		t.Fatalf("reply: state %s, %d history messages; want SUBMITTED and none", tk.Status.State, len(tk.History))
	}
	if got := reply.Header.Get(natsbind.HeaderReplica); got != "r1" {
		t.Fatalf("reply %s header %q, want r1", natsbind.HeaderReplica, got)
	}
	evs := e.events(1, 3)
	wantEvents(t, evs, "tsk-1.1 statusUpdate TASK_STATE_WORKING\ntsk-1.2 artifactUpdate \ntsk-1.3 statusUpdate TASK_STATE_COMPLETED")
	if !strings.Contains(evs[1].body, `"data":{"echo":"hello"}`) || !strings.Contains(evs[0].body, `"taskId":"`+string(tk.ID)+`"`) {
		t.Fatalf("events carry other content: %s | %s", evs[0].body, evs[1].body)
	}
	if !strings.Contains(evs[0].body, `"timestamp":"`) {
		t.Fatalf("status update without timestamp: %s", evs[0].body)
	}
	// GetTask is the handler's: completed, with the artifact.
	_, resp = e.request(natsbind.RPCSubject(testAgent), "GetTask", map[string]string{"id": string(tk.ID)})
	if got := taskOf(t, resp); got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 || len(got.History) != 0 {
		t.Fatalf("GetTask: %s, %d artifacts, %d history", got.Status.State, len(got.Artifacts), len(got.History))
	}
	e.shutdown() // the executions are over: the counters are final
	if st := e.srv.Stats(); st.Tasks != 1 || st.EventsPublished != 3 || st.PublishRetries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRedeliveredMessageIDRunsOnce(t *testing.T) {
	e := newEnv(t, true)
	const n = 4
	ids := make(chan a2a.TaskID, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-2", "tsk-2-m1", "", "hello"))
			ids <- taskOf(t, resp).ID
		}()
	}
	wg.Wait()
	close(ids)
	first := <-ids
	for id := range ids {
		if id != first {
			t.Fatalf("redelivery answered task %s, the first %s", id, first)
		}
	}
	wantEvents(t, e.events(1, 3), "tsk-2.1 statusUpdate TASK_STATE_WORKING\ntsk-2.2 artifactUpdate \ntsk-2.3 statusUpdate TASK_STATE_COMPLETED")
	// A later resend gets the task's current state: completed.
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-2", "tsk-2-m1", "", "hello"))
	if got := taskOf(t, resp); got.ID != first || got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("resend: %s %s", got.ID, got.Status.State)
	}
	if runs := e.exec.runs.Load(); runs != 1 {
		t.Fatalf("executor ran %d times, want 1", runs)
	}
	if st := e.srv.Stats(); st.Tasks != 1 || st.Redeliveries != n {
		t.Fatalf("stats %+v, want 1 task and %d redeliveries", st, n)
	}
}

func TestProbeDoesNotReachTheHandler(t *testing.T) {
	e := newEnv(t, true)
	if err := natsbind.NewClient(e.nc).Probe(context.Background(), testAgent); err != nil {
		t.Fatal(err)
	}
	_, resp := e.request(natsbind.RPCSubject(testAgent), "GetTask", map[string]string{"id": natsbind.ProbeTaskID})
	if resp.Error == nil || resp.Error.Code != wire.CodeTaskNotFound {
		t.Fatalf("probe answered %+v, want -32001", resp.Error)
	}
	if n := e.h.getTasks.Load(); n != 0 {
		t.Fatalf("handler saw %d GetTask calls, want 0", n)
	}
}

func TestAnswerAfterInputRequiredContinuesTheSequence(t *testing.T) {
	e := newEnv(t, true)
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-3", "tsk-3-m1", "", "ask"))
	tk := taskOf(t, resp)
	evs := e.events(1, 2)
	wantEvents(t, evs, "tsk-3.1 statusUpdate TASK_STATE_WORKING\ntsk-3.2 statusUpdate TASK_STATE_INPUT_REQUIRED")
	if !strings.Contains(evs[1].body, "Is the customer verified?") {
		t.Fatalf("question not in the event: %s", evs[1].body)
	}
	// The answer goes to the replica's own subject, as a2ad sends it.
	reply, resp := e.request(natsbind.ReplicaSubject(testAgent, "r1"), "SendMessage", sendParams("tsk-3", "tsk-3-m2", string(tk.ID), "yes"))
	got := taskOf(t, resp)
	if got.ID != tk.ID || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("answer reply: %s %s, want %s WORKING", got.ID, got.Status.State, tk.ID)
	}
	if reply.Header.Get(natsbind.HeaderReplica) != "r1" {
		t.Fatalf("answer reply without replica header")
	}
	evs = e.events(3, 3)
	wantEvents(t, evs, "tsk-3.3 statusUpdate TASK_STATE_WORKING\ntsk-3.4 artifactUpdate \ntsk-3.5 statusUpdate TASK_STATE_COMPLETED")
	if !strings.Contains(evs[1].body, `"echo":"yes"`) {
		t.Fatalf("artifact is not the answer's: %s", evs[1].body)
	}
	// A second answer to a task no longer waiting is -32004.
	_, resp = e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-3", "tsk-3-m3", string(tk.ID), "yes"))
	if resp.Error == nil || resp.Error.Code != wire.CodeUnsupportedOperation {
		t.Fatalf("second answer: %+v, want -32004", resp.Error)
	}
}

func TestCancelRunningTask(t *testing.T) {
	e := newEnv(t, true)
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-4", "tsk-4-m1", "", "slow"))
	tk := taskOf(t, resp)
	wantEvents(t, e.events(1, 1), "tsk-4.1 statusUpdate TASK_STATE_WORKING")
	_, resp = e.request(natsbind.ReplicaSubject(testAgent, "r1"), "CancelTask", map[string]string{"id": string(tk.ID)})
	if got := taskOf(t, resp); got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel reply %s", got.Status.State)
	}
	_, resp = e.request(natsbind.RPCSubject(testAgent), "CancelTask", map[string]string{"id": string(tk.ID)})
	if resp.Error == nil || resp.Error.Code != wire.CodeTaskNotCancelable {
		t.Fatalf("second cancel: %+v, want -32002", resp.Error)
	}
	_, resp = e.request(natsbind.RPCSubject(testAgent), "CancelTask", map[string]string{"id": "nope"})
	if resp.Error == nil || resp.Error.Code != wire.CodeTaskNotFound {
		t.Fatalf("unknown cancel: %+v, want -32001", resp.Error)
	}
	if st := e.srv.Stats(); st.Cancels != 2 {
		t.Fatalf("stats %+v, want 2 cancels of a held task", st)
	}
}

func TestPublishRetriedUntilTheStreamAcks(t *testing.T) {
	e := newEnv(t, false) // no stream yet: publishes get no responders
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-5", "tsk-5-m1", "", "hello"))
	taskOf(t, resp)
	for e.srv.Stats().PublishRetries < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	e.createStream()
	wantEvents(t, e.events(1, 3), "tsk-5.1 statusUpdate TASK_STATE_WORKING\ntsk-5.2 artifactUpdate \ntsk-5.3 statusUpdate TASK_STATE_COMPLETED")
	e.shutdown()
	if st := e.srv.Stats(); st.EventsPublished != 3 {
		t.Fatalf("stats %+v, want 3 events acknowledged", st)
	}
	if n := natstest.Messages(t, e.js, "A2AD_EVENTS_"+testAgent); n != 3 {
		t.Fatalf("stream holds %d events, want 3", n)
	}
}

func TestRegistersAgainAfterReconnect(t *testing.T) {
	// A server without JetStream is enough for registration: restart it
	// on the same port.
	dir := t.TempDir()
	ns, err := embedded.Start(embedded.Options{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	url := ns.ClientURL()
	addr := strings.TrimPrefix(url, "nats://")
	e := &env{t: t}
	reg := natstest.Connect(t, ns)
	e.serveRegistry(reg)
	anc, err := nats.Connect(url, append(ConnectOptions(testAgent, "cred-1"), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	srv, err := NewServer(anc, a2asrv.NewHandler(newTestExecutor()), Config{AgentID: testAgent, Card: json.RawMessage(`{"name": "t"}`), Credential: "cred-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	for srv.Stats().Registrations < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	if r := srv.Registration(); r != (Registration{Status: "approved", Fingerprint: "sha256:abc"}) {
		t.Fatalf("registration %+v", r)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	ns2, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer ns2.Shutdown()
	reg2 := natstest.Connect(t, ns2)
	e.serveRegistry(reg2)
	for srv.Stats().Registrations < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.regs.Load(); n != 2 {
		t.Fatalf("registry saw %d registrations, want 2", n)
	}
	// The subscriptions came back with the connection.
	if err := natsbind.NewClient(reg2).Probe(context.Background(), testAgent); err != nil {
		t.Fatal(err)
	}
}

// An agent started before a2ad (or while a2ad restarts): nats.Connect
// with ConnectOptions gives a connection that is not up yet instead of an
// error, and the Server registers and serves once the server comes up.
func TestStartsBeforeTheServer(t *testing.T) {
	// A free loopback port: a server started on -1, then stopped.
	probe, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	url := probe.ClientURL()
	probe.Shutdown()
	probe.WaitForShutdown()

	anc, err := nats.Connect(url, append(ConnectOptions(testAgent, "cred-1"), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		t.Fatalf("nats.Connect with no server up: %v (want a connection that connects later)", err)
	}
	defer anc.Close()
	if anc.IsConnected() {
		t.Fatal("connected with no server up")
	}
	srv, err := NewServer(anc, a2asrv.NewHandler(newTestExecutor()), Config{AgentID: testAgent, Card: json.RawMessage(`{"name": "t"}`), Credential: "cred-1", ReplicaID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatalf("Start with no server up: %v", err)
	}
	defer srv.Shutdown(context.Background())

	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: strings.TrimPrefix(url, "nats://")})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	e := &env{t: t}
	reg := natstest.Connect(t, ns)
	e.serveRegistry(reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := srv.WaitRegistered(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r != (Registration{Status: "approved", Fingerprint: "sha256:abc"}) {
		t.Fatalf("registration %+v", r)
	}
	if err := natsbind.NewClient(reg).Probe(context.Background(), testAgent); err != nil {
		t.Fatalf("probe once the server is up: %v", err)
	}
}

func TestShutdownDrainsRunningTasks(t *testing.T) {
	e := newEnv(t, true)
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-6", "tsk-6-m1", "", "slow"))
	taskOf(t, resp)
	wantEvents(t, e.events(1, 1), "tsk-6.1 statusUpdate TASK_STATE_WORKING")
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(context.Background()) }()
	// Requests sent now get no responders (once the unsubscription is in).
	for {
		err := natsbind.NewClient(e.nc).Probe(context.Background(), testAgent)
		if errors.Is(err, natsbind.ErrAgentOffline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(e.exec.release)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wantEvents(t, e.events(2, 2), "tsk-6.2 artifactUpdate \ntsk-6.3 statusUpdate TASK_STATE_COMPLETED")
}

func TestShutdownCutsShortWhenItsContextEnds(t *testing.T) {
	e := newEnv(t, true)
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", sendParams("tsk-7", "tsk-7-m1", "", "slow"))
	taskOf(t, resp)
	wantEvents(t, e.events(1, 1), "tsk-7.1 statusUpdate TASK_STATE_WORKING")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v, want context.Canceled", err)
	}
	if err := e.srv.Shutdown(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Shutdown: %v, want the first's outcome", err)
	}
	// The task it gave up on is failed, in the replica's words, so that
	// a2ad ends it now rather than at its deadline.
	evs := e.events(2, 1)
	wantEvents(t, evs, "tsk-7.2 statusUpdate TASK_STATE_FAILED")
	if !strings.Contains(evs[0].body, `"text":"replica r1 shut down before the task finished"`) {
		t.Fatalf("FAILED event: %s", evs[0].body)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, true)
	subj := natsbind.RPCSubject(testAgent)
	raw := func(body string, version string) *wire.Response {
		m := nats.NewMsg(subj)
		m.Data = []byte(body)
		if version != "" {
			m.Header.Set(natsbind.HeaderA2AVersion, version)
		}
		reply, err := e.nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp wire.Response
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			t.Fatalf("%v: %s", err, reply.Data)
		}
		return &resp
	}
	get := `{"jsonrpc":"2.0","id":"1","method":"GetTask","params":{"id":"x"}}`
	badMeta := sendParams("tsk-8", "tsk-8-m1", "", "hi")
	badMeta["message"].(map[string]any)["metadata"] = map[string]any{MetaTaskID: "tsk-8", MetaEventsSubject: "a2a.events.other.tsk-8"}
	for _, c := range []struct {
		name    string
		body    string
		version string
		code    int
	}{
		{"not JSON", "{", "1.0", wire.CodeParseError},
		{"no id", `{"jsonrpc":"2.0","method":"GetTask"}`, "1.0", wire.CodeInvalidRequest},
		{"too large", `"` + strings.Repeat("a", MaxRequestBytes) + `"`, "1.0", wire.CodeInvalidRequest},
		{"no version", get, "", wire.CodeVersionNotSupported},
		{"version 0.3", get, "0.3", wire.CodeVersionNotSupported},
		{"version 1.1", get, "1.1", wire.CodeTaskNotFound},
		{"0.3 method", `{"jsonrpc":"2.0","id":"1","method":"message/send","params":{}}`, "1.0", wire.CodeMethodNotFound},
		{"streaming", `{"jsonrpc":"2.0","id":"1","method":"SendStreamingMessage","params":{}}`, "1.0", wire.CodeMethodNotFound},
		{"no params", `{"jsonrpc":"2.0","id":"1","method":"SendMessage"}`, "1.0", wire.CodeInvalidParams},
		{"other agent's subject", mustRequest(t, "SendMessage", badMeta), "1.0", wire.CodeInvalidParams},
		{"agent role", mustRequest(t, "SendMessage", withRole(sendParams("tsk-8", "tsk-8-m2", "", "hi"), "ROLE_AGENT")), "1.0", wire.CodeInvalidParams},
		{"unknown task", mustRequest(t, "SendMessage", sendParams("tsk-8", "tsk-8-m3", "nope", "hi")), "1.0", wire.CodeTaskNotFound},
	} {
		if c.name == "too large" {
			continue // over NATS's own max_payload: the server refuses it first
		}
		resp := raw(c.body, c.version)
		if resp.Error == nil || resp.Error.Code != c.code {
			t.Errorf("%s: %+v, want code %d", c.name, resp.Error, c.code)
		}
	}
	if runs := e.exec.runs.Load(); runs != 0 {
		t.Fatalf("executor ran %d times on bad requests", runs)
	}
}

func withRole(p map[string]any, role string) map[string]any {
	p["message"].(map[string]any)["role"] = role
	return p
}

func mustRequest(t *testing.T, method string, params any) string {
	t.Helper()
	req, err := wire.NewRequest("1", method, params)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(req)
	return string(b)
}

func TestHandlerErrorsMapToBindingCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{a2a.ErrTaskNotFound, -32001},
		{fmt.Errorf("wrapped: %w", a2a.ErrTaskNotCancelable), -32002},
		{a2a.ErrUnsupportedOperation, -32004},
		{a2a.ErrUnsupportedContentType, -32005},
		{a2a.ErrInvalidParams, -32602},
		{a2a.ErrVersionNotSupported, -32009},
		{errors.New("boom"), -32603},
	} {
		if got := handlerError("GetTask", c.err); got.Code != c.code {
			t.Errorf("%v: code %d, want %d", c.err, got.Code, c.code)
		}
	}
	long := handlerError("GetTask", errors.New(strings.Repeat("é", 600)))
	if want := "GetTask: the agent failed: " + strings.Repeat("é", 256) + "…"; long.Message != want {
		t.Fatalf("long message %d bytes, want %d", len(long.Message), len(want))
	}
}

func TestNewServerRefusesBadConfig(t *testing.T) {
	_, nc, _ := natstest.Start(t)
	h := a2asrv.NewHandler(newTestExecutor())
	for _, cfg := range []Config{
		{AgentID: "a.b", Card: json.RawMessage(`{}`)},
		{AgentID: "a", Card: json.RawMessage(`[]`)},
		{AgentID: "a", Card: json.RawMessage(`{}`), ReplicaID: "r 1"},
	} {
		if _, err := NewServer(nc, h, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}

// WaitRegistered returns a2ad's answer: approved; a refusal as an error
// naming a2ad's code; ctx's error while nobody answers.
func TestWaitRegistered(t *testing.T) {
	ns, nc, _ := natstest.Start(t)
	e := &env{t: t}
	e.serveRegistry(nc)
	start := func(cred string) *Server {
		anc := natstest.Connect(t, ns)
		srv, err := NewServer(anc, a2asrv.NewHandler(newTestExecutor()), Config{AgentID: testAgent, Card: json.RawMessage(`{"name": "t"}`), Credential: cred})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		return srv
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := start("cred-1").WaitRegistered(ctx)
	if err != nil || r != (Registration{Status: "approved", Fingerprint: "sha256:abc"}) {
		t.Fatalf("WaitRegistered = %+v, %v; want approved", r, err)
	}
	r, err = start("cred-wrong").WaitRegistered(ctx)
	if !errors.Is(err, ErrRegistrationRefused) || err.Error() != "natsagent: registration refused: invalid: bad registration" || r.Status != "" || r.Code != natsbind.RegisterInvalid {
		t.Fatalf("WaitRegistered = %+v, %v; want the refusal", r, err)
	}

	lone, _, _ := natstest.Start(t) // no registry answers here
	srv, err := NewServer(natstest.Connect(t, lone), a2asrv.NewHandler(newTestExecutor()), Config{AgentID: testAgent, Card: json.RawMessage(`{"name": "t"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := srv.WaitRegistered(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRegistered with no registry = %v, want context.DeadlineExceeded", err)
	}
}

// A request nested deeper than MaxRequestDepth is refused before the
// handler sees it; a brief as deep as a2ad sends by default is served.
func TestDeepRequestsAreRefused(t *testing.T) {
	e := newEnv(t, true)
	nest := func(n int) any {
		var v any = "x"
		for range n {
			v = map[string]any{"a": v}
		}
		return v
	}
	params := sendParams("tsk-d1", "tsk-d1-m1", "", "hello")
	msg := params["message"].(map[string]any)
	msg["parts"] = []any{map[string]any{"text": "hello"}, map[string]any{"data": map[string]any{"objective": "o", "evidence": nest(32)}}}
	_, resp := e.request(natsbind.RPCSubject(testAgent), "SendMessage", params)
	taskOf(t, resp)
	before := e.exec.runs.Load()
	msg["messageId"] = "tsk-d1-m2"
	msg["parts"] = []any{map[string]any{"data": nest(4000)}}
	_, resp = e.request(natsbind.RPCSubject(testAgent), "SendMessage", params)
	if resp.Error == nil || resp.Error.Code != wire.CodeInvalidRequest || resp.Error.Message != "request nests 4005 levels deep, more than the 128 this agent accepts" {
		t.Fatalf("4000 levels: %+v", resp.Error)
	}
	if e.exec.runs.Load() != before {
		t.Fatal("the handler ran for the refused request")
	}
	if d := wire.Depth([]byte(`{"a":"[{\"","b":[[1],{"c":"\\"}"}]}`)); d != 3 {
		t.Fatalf("depth counts brackets in strings: %d, want 3", d)
	}
}
