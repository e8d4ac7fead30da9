package httpbind

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	a2ad "github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/task"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/push"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const followAgent = "fraud-review"

// The two data parts the test agent sends as two chunks of one artifact;
// each is a valid risk_assessment (the built-in host schema).
var (
	riskPart1 = map[string]any{"case_id": "C-1", "risk_level": "low", "score": 0.1, "reasons": []any{"none"}, "policy_version": "p1"}
	riskPart2 = map[string]any{"case_id": "C-2", "risk_level": "high", "score": 0.9, "reasons": []any{"velocity"}, "policy_version": "p1"}
)

// followExecutor is an a2a-go executor: submitted, working, then (once
// released) an artifact in two chunks and completed.
type followExecutor struct {
	release     chan struct{}
	completedAt atomic.Int64 // unix nanos, just before completed is emitted
}

func (a *followExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		select {
		case <-a.release:
		case <-ctx.Done():
			return
		}
		first := a2a.NewArtifactEvent(ec, a2a.NewDataPart(riskPart1))
		first.Artifact.ID = "ra"
		if !yield(first, nil) {
			return
		}
		second := a2a.NewArtifactUpdateEvent(ec, "ra", a2a.NewDataPart(riskPart2))
		second.LastChunk = true
		if !yield(second, nil) {
			return
		}
		time.Sleep(20 * time.Millisecond)
		a.completedAt.Store(time.Now().UnixNano())
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (a *followExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// followServer serves one a2a-go request handler over JSON-RPC at
// /<owner>/jsonrpc and over REST at /<owner>/rest, counting the calls
// each follower owner makes ("<owner> <method>").
type followServer struct {
	*httptest.Server
	agent *followExecutor

	mu    sync.Mutex
	calls map[string]int
	// cutFirst cuts the first SubscribeToTask stream after its first event.
	cutFirst atomic.Bool
	cut      atomic.Bool
	// foreign makes GetTask answer with a task of another id.
	foreign atomic.Bool
}

// lyingHandler is the agent's request handler, with GetTask answering
// another task's id while s.foreign is set.
type lyingHandler struct {
	a2asrv.RequestHandler
	s *followServer
}

func (h lyingHandler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	t, err := h.RequestHandler.GetTask(ctx, req)
	if err == nil && h.s.foreign.Load() {
		c := *t
		c.ID = "someone-elses-task"
		t = &c
	}
	return t, err
}

func newFollowServer(t *testing.T, streaming bool, pushes ...bool) *followServer {
	t.Helper()
	s := &followServer{agent: &followExecutor{release: make(chan struct{})}, calls: map[string]int{}}
	hopts := []a2asrv.RequestHandlerOption{a2asrv.WithCapabilityChecks(&a2a.AgentCapabilities{Streaming: streaming, PushNotifications: len(pushes) > 0})}
	if len(pushes) > 0 {
		hopts = append(hopts, a2asrv.WithPushNotifications(push.NewInMemoryStore(), push.NewHTTPPushSender(&push.HTTPSenderConfig{AllowPrivateNetworks: true})))
	}
	h := lyingHandler{a2asrv.NewHandler(s.agent, hopts...), s}
	jsonrpc, rest := a2asrv.NewJSONRPCHandler(h), a2asrv.NewRESTHandler(h)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner, rest1, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		method := ""
		var next http.Handler
		switch {
		case rest1 == "jsonrpc":
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct{ Method string }
			_ = json.Unmarshal(body, &m)
			method, next = m.Method, jsonrpc
		case strings.HasPrefix(rest1, "rest/"):
			p := strings.TrimPrefix(rest1, "rest")
			switch {
			case strings.HasSuffix(p, ":subscribe"):
				method = "SubscribeToTask"
			case r.Method == http.MethodGet && strings.HasPrefix(p, "/tasks/"):
				method = "GetTask"
			default:
				method = r.Method + " " + p
			}
			next = http.StripPrefix("/"+owner+"/rest", rest)
		default:
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.calls[owner+" "+method]++
		s.mu.Unlock()
		if method == "SubscribeToTask" && s.cutFirst.Load() && s.cut.CompareAndSwap(false, true) {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			w = &cutWriter{ResponseWriter: w, cancel: cancel}
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *followServer) count(owner, method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[owner+" "+method]
}

// cutWriter ends its stream (cancels the request) once the first SSE
// data block has been flushed.
type cutWriter struct {
	http.ResponseWriter
	cancel func()
	data   bool
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("data:")) {
		c.data = true
	}
	return c.ResponseWriter.Write(b)
}

func (c *cutWriter) Flush() {
	c.ResponseWriter.(http.Flusher).Flush()
	if c.data {
		c.cancel()
	}
}

// followInstance is one a2ad instance's following side: its store (own
// watcher), its follower, and (on the first) the tracker.
type followInstance struct {
	store    *task.Store
	follower *Follower
	cancel   context.CancelFunc
	done     chan struct{}
}

type followRig struct {
	t     *testing.T
	js    jetstream.JetStream
	agent *followServer
}

func newFollowRig(t *testing.T, streaming bool, push ...bool) *followRig {
	t.Helper()
	_, _, js := natstest.Start(t)
	return &followRig{t: t, js: js, agent: newFollowServer(t, streaming, push...)}
}

// lookup is an owner's view of the agent: its URL carries the owner, so
// the server counts each owner's calls.
func (g *followRig) lookup(owner, binding string, streaming bool, push ...bool) Lookup {
	return func(id string) (Target, error) {
		if id != followAgent {
			return Target{}, ErrNotHTTP
		}
		u := g.agent.URL + "/" + owner + "/jsonrpc"
		if binding == "HTTP+JSON" {
			u = g.agent.URL + "/" + owner + "/rest"
		}
		return Target{AgentID: id, Binding: binding, URL: u, Streaming: streaming, PushNotifications: len(push) > 0, CardOrigin: g.agent.URL}, nil
	}
}

// followOpts say what a followInstance runs.
type followOpts struct {
	binding   string
	streaming bool // the card's capability
	follow    bool // runs a Follower
	track     bool // runs the Tracker
	lease     time.Duration
	// push, if not nil, makes the card offer push notifications; it is
	// given the follower to serve its webhook and set PushBaseURL.
	push func(*Follower)
	// tune, if not nil, sets the follower's poll bounds.
	tune func(*Follower)
}

// start starts a followInstance whose follower is owner.
func (g *followRig) start(owner string, o followOpts) *followInstance {
	t := g.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var pushing []bool
	if o.push != nil {
		pushing = []bool{true}
	}
	f := &Follower{Binding: New(Config{Lookup: g.lookup(owner, o.binding, o.streaming, pushing...)}), JS: g.js, Owner: owner, Lease: o.lease,
		PushSecret: []byte("push-secret-" + owner), Log: slog.New(slog.DiscardHandler)}
	if o.push != nil {
		o.push(f)
	}
	if o.tune != nil {
		o.tune(f)
	}
	var tr *task.Tracker
	store, err := task.NewStore(ctx, g.js, 1, func(sn task.Snapshot) {
		if o.follow {
			f.Track(sn)
		}
		if tr != nil {
			tr.Track(sn)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	f.Store = store
	in := &followInstance{store: store, follower: f, cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	if o.track {
		tr = &task.Tracker{Store: store, Schemas: followSchemas(t), Agents: map[string]task.EventLimits{followAgent: {}}, Log: slog.New(slog.DiscardHandler)}
		if err := tr.EnsureStreams(ctx, g.js); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = tr.Run(ctx, g.js) })
	}
	if o.follow {
		wg.Go(func() {
			if err := f.Run(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	go func() { wg.Wait(); close(in.done) }()
	t.Cleanup(func() { in.stop() })
	return in
}

func (in *followInstance) stop() {
	in.cancel()
	<-in.done
}

func followSchemas(tb testing.TB) *artifact.Catalog {
	tb.Helper()
	reg, err := artifact.LoadFS(a2ad.HostSchemas(), ".")
	if err != nil {
		tb.Fatal(err)
	}
	c, err := artifact.NewCatalog(reg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// delegate sends the brief to the agent as the broker does (its messageId,
// contextId a2ad-<id>, returnImmediately) and writes the record as the
// broker would once the agent answered: binding, agent task id, context id.
func (g *followRig) delegate(store *task.Store, id, binding string) *task.Record {
	t := g.t
	t.Helper()
	ctx := context.Background()
	b := New(Config{Lookup: g.lookup("broker", binding, true)})
	c, _, err := b.Client(ctx, followAgent)
	if err != nil {
		t.Fatal(err)
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("review case C-1"))
	msg.ID, msg.ContextID = task.BriefMessageID(id), "a2ad-"+id
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	at, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	now := time.Now().UTC()
	r := &task.Record{ID: id, Tenant: "default", AgentID: followAgent, State: task.Submitted, OutputSchema: "risk_assessment",
		Binding: binding, AgentTaskID: string(at.ID), ContextID: "a2ad-" + id, Deadline: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
	if err := store.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// waitFollow polls cond until it holds, failing after a generous deadline
// (the outcome is asserted, not how soon it comes).
func waitFollow(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func getRecord(t *testing.T, s *task.Store, id string) *task.Record {
	t.Helper()
	r, _, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitEnd waits for the record to be terminal and returns it with how
// long after the agent's completion the store showed it.
func (g *followRig) waitEnd(s *task.Store, id string) (*task.Record, time.Duration) {
	var r *task.Record
	waitFollow(g.t, "the task to end in the store", func() bool {
		r = getRecord(g.t, s, id)
		return r.State.Terminal()
	})
	return r, time.Since(time.Unix(0, g.agent.agent.completedAt.Load()))
}

// assertCompletedOnce checks what a host relies on: completed, the
// artifact exactly as the agent sent it (two chunks, once), one completed
// transition, no refusal, and the lease released.
func assertCompletedOnce(t *testing.T, r *task.Record) {
	t.Helper()
	if r.State != task.Completed {
		t.Fatalf("state %s (reason %q), want completed; history %+v", r.State, r.Reason, r.History)
	}
	if len(r.Artifacts) != 1 || len(r.Artifacts[0].Parts) != 2 {
		t.Fatalf("artifacts = %+v, want one with two parts", r.Artifacts)
	}
	for i, want := range []map[string]any{riskPart1, riskPart2} {
		got, _ := json.Marshal(r.Artifacts[0].Parts[i].Data)
		w, _ := json.Marshal(want)
		if !sameJSON(got, w) {
			t.Errorf("part %d = %s, want %s", i, got, w)
		}
	}
	completions := 0
	for _, h := range r.History {
		if h.Refused {
			t.Errorf("refused transition %+v", h)
		}
		if h.To == task.Completed && !h.Refused {
			completions++
		}
	}
	if completions != 1 {
		t.Errorf("%d completed transitions, want 1: %+v", completions, r.History)
	}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// waitReleased waits for the follower to drop its lease on the ended task.
func waitReleased(t *testing.T, s *task.Store, id string) {
	t.Helper()
	waitFollow(t, "the lease to be released", func() bool { return getRecord(t, s, id).Follow == nil })
}

// A delegated task is followed to completed with the exact artifact, over
// JSON-RPC and REST, by streaming and by polling (a card without
// streaming, or an agent that refuses SubscribeToTask).
func TestFollowToCompletion(t *testing.T) {
	for _, tc := range []struct {
		name, binding          string
		cardStreams, serveSSE  bool
		wantSubscribe, wantGet bool
	}{
		{"stream JSONRPC", "JSONRPC", true, true, true, false},
		{"stream HTTP+JSON", "HTTP+JSON", true, true, true, false},
		{"poll: card without streaming", "JSONRPC", false, true, false, true},
		{"poll: agent refuses SubscribeToTask", "HTTP+JSON", true, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFollowRig(t, tc.serveSSE)
			in := g.start("a", followOpts{binding: tc.binding, streaming: tc.cardStreams, follow: true, track: true})
			r := g.delegate(in.store, "t1", tc.binding)
			waitFollow(t, "the follower to observe the task", func() bool {
				return g.agent.count("a", "SubscribeToTask")+g.agent.count("a", "GetTask") > 0
			})
			close(g.agent.agent.release)
			got, lag := g.waitEnd(in.store, r.ID)
			assertCompletedOnce(t, got)
			if sub := g.agent.count("a", "SubscribeToTask") > 0; sub != tc.wantSubscribe {
				t.Errorf("subscribed = %v, want %v", sub, tc.wantSubscribe)
			}
			if tc.wantGet && g.agent.count("a", "GetTask") == 0 {
				t.Error("no GetTask poll")
			}
			waitReleased(t, in.store, r.ID)
			t.Logf("agent completed → store completed: %d ms", lag.Milliseconds())
		})
	}
}

// A stream cut after its first event is resubscribed; the task completes
// once, its artifact once.
func TestFollowResubscribesDroppedStream(t *testing.T) {
	g := newFollowRig(t, true)
	g.agent.cutFirst.Store(true)
	in := g.start("a", followOpts{binding: "JSONRPC", streaming: true, follow: true, track: true})
	r := g.delegate(in.store, "t2", "JSONRPC")
	waitFollow(t, "a second subscription", func() bool { return g.agent.count("a", "SubscribeToTask") >= 2 })
	close(g.agent.agent.release)
	got, _ := g.waitEnd(in.store, r.ID)
	assertCompletedOnce(t, got)
	if !g.agent.cut.Load() {
		t.Fatal("the first stream was not cut")
	}
}

// Two instances: exactly one follows at a time; when its owner stops
// without releasing (a crash looks the same), the other takes over once
// the lease's Until passed, and completes the task.
func TestFollowOneInstanceAtATimeAndTakeOver(t *testing.T) {
	for _, tc := range []struct {
		name      string
		streaming bool
		call      string // what the owner calls to follow
	}{
		{"poll", false, "GetTask"},
		{"stream", true, "SubscribeToTask"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFollowRig(t, tc.streaming)
			const lease = 900 * time.Millisecond
			tr := g.start("tracker", followOpts{track: true})
			a := g.start("a", followOpts{binding: "JSONRPC", streaming: tc.streaming, follow: true, lease: lease})
			b := g.start("b", followOpts{binding: "JSONRPC", streaming: tc.streaming, follow: true, lease: lease})
			r := g.delegate(tr.store, "t3", "JSONRPC")
			var first, second *followInstance
			var fo, so string
			var until0 time.Time
			waitFollow(t, "a lease", func() bool {
				l := getRecord(t, tr.store, r.ID).Follow
				switch {
				case l == nil:
					return false
				case l.Owner == "a":
					first, second, fo, so = a, b, "a", "b"
				default:
					first, second, fo, so = b, a, "b", "a"
				}
				until0 = l.Until
				return true
			})
			// Past the first lease's end: only renewals keep the other out.
			waitFollow(t, "the first lease's end", func() bool { return time.Now().After(until0.Add(lease / 3)) })
			l := getRecord(t, tr.store, r.ID).Follow
			if l == nil || l.Owner != fo || !l.Until.After(until0) {
				t.Fatalf("lease %+v after its first end %s; want %s's, renewed", l, until0, fo)
			}
			if n := g.agent.count(fo, tc.call); n == 0 {
				t.Fatalf("the owner %s never called %s", fo, tc.call)
			}
			if n := g.agent.count(so, "GetTask") + g.agent.count(so, "SubscribeToTask"); n != 0 {
				t.Fatalf("%d calls by %s while %s holds the lease", n, so, fo)
			}
			until := getRecord(t, tr.store, r.ID).Follow.Until
			first.stop()
			if l := getRecord(t, tr.store, r.ID).Follow; l == nil || l.Owner != fo {
				t.Fatalf("lease after the owner stopped = %+v, want still %s's (not released)", l, fo)
			}
			waitFollow(t, "the other instance to take over", func() bool {
				l := getRecord(t, second.store, r.ID).Follow
				return l != nil && l.Owner == so
			})
			if now := time.Now(); now.Before(until) {
				t.Fatalf("taken over at %s, before the lease's end %s", now, until)
			}
			waitFollow(t, "the new owner to call the agent", func() bool { return g.agent.count(so, tc.call) > 0 })
			before := g.agent.count(fo, "GetTask") + g.agent.count(fo, "SubscribeToTask")
			close(g.agent.agent.release)
			got, _ := g.waitEnd(tr.store, r.ID)
			assertCompletedOnce(t, got)
			if n := g.agent.count(fo, "GetTask") + g.agent.count(fo, "SubscribeToTask"); n != before {
				t.Errorf("the stopped owner called the agent %d more times", n-before)
			}
			waitReleased(t, tr.store, r.ID)
		})
	}
}

// An agent that answers GetTask with another task's id is ignored: the
// task's record changes in nothing, however often it is polled.
func TestFollowIgnoresAnotherTasksAnswer(t *testing.T) {
	g := newFollowRig(t, false)
	g.agent.foreign.Store(true)
	in := g.start("a", followOpts{binding: "JSONRPC", follow: true, track: true, tune: func(f *Follower) {
		f.PollMin, f.PollMax = 10*time.Millisecond, 10*time.Millisecond
	}})
	r := g.delegate(in.store, "t5", "JSONRPC")
	close(g.agent.agent.release)
	waitFollow(t, "polls", func() bool { return g.agent.count("a", "GetTask") >= 10 })
	got := getRecord(t, in.store, r.ID)
	if got.State != task.Submitted || len(got.History) != 0 || len(got.Applied) != 0 {
		t.Fatalf("state %s, history %+v, applied %v; want the record untouched", got.State, got.History, got.Applied)
	}
	if n := natstest.Messages(t, g.js, task.EventsStream(followAgent)); n != 0 {
		t.Fatalf("%d events published", n)
	}
}

// An observation over MaxEventBytes is not published (the stream would
// refuse it); the follower goes on.
func TestFollowRefusesOversizedEvent(t *testing.T) {
	g := newFollowRig(t, true)
	in := g.start("tracker", followOpts{track: true})
	r := g.delegate(in.store, "t6", "JSONRPC")
	big := &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(r.AgentTaskID), ContextID: r.ContextID,
		Artifact: &a2a.Artifact{ID: "ra", Parts: a2a.ContentParts{a2a.NewTextPart(strings.Repeat("x", MaxEventBytes))}}}
	o, ok, err := itemOf(big, map[a2a.ArtifactID]int{})
	if err != nil || !ok {
		t.Fatal(err)
	}
	fl := &following{f: &Follower{JS: g.js, Owner: "a", Log: slog.New(slog.DiscardHandler)}, id: r.ID, agentID: followAgent, agentTask: r.AgentTaskID}
	if fl.publish(context.Background(), o) {
		t.Fatal("an event over 1 MiB was published")
	}
	if n := natstest.Messages(t, g.js, task.EventsStream(followAgent)); n != 0 {
		t.Fatalf("%d events in the stream", n)
	}
}

// The same observation published twice, by two owners in turn, has one
// id and is applied once (here JetStream drops the repeat within its
// window; past it, the record's Applied ids do, as task's tests show).
func TestSameObservationAppliedOnce(t *testing.T) {
	g := newFollowRig(t, true)
	in := g.start("tracker", followOpts{track: true}) // no follower: the test publishes
	r := g.delegate(in.store, "t4", "JSONRPC")
	ev := &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(r.AgentTaskID), ContextID: r.ContextID, Status: a2a.TaskStatus{State: a2a.TaskStateWorking}}
	o, ok, err := itemOf(ev, map[a2a.ArtifactID]int{})
	if err != nil || !ok {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, owner := range []string{"a", "b"} {
		fl := &following{f: &Follower{JS: g.js, Owner: owner, Log: slog.New(slog.DiscardHandler)}, id: r.ID, agentID: followAgent, agentTask: r.AgentTaskID}
		again, _, _ := itemOf(ev, map[a2a.ArtifactID]int{})
		if again.msgID != o.msgID {
			t.Fatalf("ids %s and %s for the same observation", o.msgID, again.msgID)
		}
		if !fl.publish(ctx, again) {
			t.Fatal("not published")
		}
	}
	waitFollow(t, "working", func() bool { return getRecord(t, in.store, r.ID).State == task.Working })
	time.Sleep(300 * time.Millisecond) // a second application would land by now
	got := getRecord(t, in.store, r.ID)
	n := 0
	for _, id := range got.Applied {
		if id == o.msgID {
			n++
		}
	}
	if n != 1 || len(got.History) != 1 {
		t.Fatalf("applied %d times, history %+v; want once", n, got.History)
	}
}

// countingJS counts publish attempts on a real JetStream.
type countingJS struct {
	jetstream.JetStream
	n atomic.Int64
}

func (c *countingJS) PublishMsg(ctx context.Context, m *nats.Msg, o ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	c.n.Add(1)
	return c.JetStream.PublishMsg(ctx, m, o...)
}

// A full events stream (its max_pending reached, the tracker behind)
// refuses publishes: the follower retries, backing off (100 ms doubling)
// instead of spinning, until its context ends (the lease lost), and then
// reports the event unpublished.
func TestFollowBacksOffOnAFullStream(t *testing.T) {
	_, _, js := natstest.Start(t)
	tr := &task.Tracker{Agents: map[string]task.EventLimits{followAgent: {MaxPending: 1}}, Log: slog.New(slog.DiscardHandler)}
	if err := tr.EnsureStreams(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	cjs := &countingJS{JetStream: js}
	fl := &following{f: &Follower{JS: cjs, Owner: "a", Log: slog.New(slog.DiscardHandler)}, id: "t7", agentID: followAgent, agentTask: "x"}
	mk := func(state a2a.TaskState) observation {
		o, _, err := itemOf(&a2a.TaskStatusUpdateEvent{TaskID: "x", ContextID: "c", Status: a2a.TaskStatus{State: state}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if !fl.publish(context.Background(), mk(a2a.TaskStateWorking)) {
		t.Fatal("first event not published")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
	defer cancel()
	cjs.n.Store(0)
	if fl.publish(ctx, mk(a2a.TaskStateInputRequired)) {
		t.Fatal("published into a full stream")
	}
	// Attempts at about 0, 0.1, 0.3, 0.7 and 1.5 s.
	if n := cjs.n.Load(); n < 2 || n > 6 {
		t.Fatalf("%d publish attempts in 1.6 s; want a few, backing off", n)
	}
	if n := natstest.Messages(t, js, task.EventsStream(followAgent)); n != 1 {
		t.Fatalf("%d events in the stream, want 1", n)
	}
}

// An agent's observed bytes are budgeted per agent (BytesPerSecond): once
// a flood of large changes spent its bucket, the next of its publishes
// waits (its stream is read no faster), while another agent's goes at
// once.
func TestObservedBytesAreBudgetedPerAgent(t *testing.T) {
	_, _, js := natstest.Start(t)
	tr := &task.Tracker{Agents: map[string]task.EventLimits{followAgent: {}, "other-agent": {}}, Log: slog.New(slog.DiscardHandler)}
	if err := tr.EnsureStreams(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	f := &Follower{JS: js, Owner: "a", BytesPerSecond: 1, Log: slog.New(slog.DiscardHandler)}
	big := func(agentID, taskID string) (*following, observation) {
		o, _, err := itemOf(&a2a.TaskStatusUpdateEvent{TaskID: "x", ContextID: "c", Status: a2a.TaskStatus{State: a2a.TaskStateWorking,
			Message: a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart(strings.Repeat("w", MaxEventBytes*3/4)))}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		o.msgID += taskID // distinct ids: JetStream would drop repeats
		return &following{f: f, id: taskID, agentID: agentID, agentTask: "x"}, o
	}
	for i := range 2 {
		fl, o := big(followAgent, fmt.Sprintf("t%d", i))
		if !fl.publish(context.Background(), o) {
			t.Fatalf("publish %d within the burst refused", i+1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if fl, o := big(followAgent, "t2"); fl.publish(ctx, o) {
		t.Fatal("a third large change went out past the agent's spent budget")
	}
	if fl, o := big("other-agent", "t3"); !fl.publish(context.Background(), o) {
		t.Fatal("another agent's change waited behind the flooding agent's budget")
	}
}
