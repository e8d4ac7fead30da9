package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replicaAgent is a remote agent of several replicas, speaking the real
// binding (docs/nats-binding.md §5, §5.8, §6) with raw nats.go: each
// replica is in the queue group of a2a.agent.<id>.rpc and alone on
// a2a.agent.<id>.rpc.<replicaId>, names itself in A2ad-Replica on its
// SendMessage replies, publishes its events to JetStream and waits for the
// acks. Replicas hold their tasks in memory, each its own (shared: one
// store for all, as a replicated task store would).
//
// Cases: evidence case_id "Q-…" asks a question and completes once
// answered; "S-…" works until canceled; any other completes at once.
type replicaAgent struct {
	agentID string
	nc      *nats.Conn
	js      jetstream.JetStream
	reps    []*replica
}

type replica struct {
	id     string
	header string // the A2ad-Replica value it sends ("" none)
	st     *replicaStore
	subs   []*nats.Subscription

	// counts, under st.mu
	answers, cancels, refused, cancelMisses int
}

type replicaStore struct {
	mu    sync.Mutex
	tasks map[string]*heldTask // by agent task id
	seen  map[string]string    // messageId -> agent task id
	n     int
}

type heldTask struct {
	id, contextID, a2adID, events, caseID string
	holder                                string
	state                                 a2a.TaskState
	seq                                   int
}

// startReplicaAgent registers agentID's card with cred and starts one
// replica per header value (replica ids r1, r2, …).
func startReplicaAgent(t *testing.T, url, agentID, cred string, shared bool, headers ...string) *replicaAgent {
	t.Helper()
	nc, err := nats.Connect(url, refagent.ConnectOptions(agentID, "")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	a := &replicaAgent{agentID: agentID, nc: nc, js: js}
	one := &replicaStore{tasks: map[string]*heldTask{}, seen: map[string]string{}}
	for i, h := range headers {
		st := one
		if !shared {
			st = &replicaStore{tasks: map[string]*heldTask{}, seen: map[string]string{}}
		}
		r := &replica{id: fmt.Sprintf("r%d", i+1), header: h, st: st}
		for _, sub := range []func() (*nats.Subscription, error){
			func() (*nats.Subscription, error) {
				return nc.QueueSubscribe(natsbind.RPCSubject(agentID), agentID, func(m *nats.Msg) { a.serve(r, m) })
			},
			func() (*nats.Subscription, error) {
				return nc.Subscribe(natsbind.ReplicaSubject(agentID, r.id), func(m *nats.Msg) { a.serve(r, m) })
			},
		} {
			s, err := sub()
			if err != nil {
				t.Fatal(err)
			}
			r.subs = append(r.subs, s)
		}
		a.reps = append(a.reps, r)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"agentId": agentID, "card": json.RawMessage(a2ad.FraudReviewCard())})
	msg := nats.NewMsg(natsbind.RegisterSubject)
	msg.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
	msg.Header.Set("Authorization", "Bearer "+cred)
	msg.Data = body
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rr natsbind.RegisterResponse
	if err := json.Unmarshal(reply.Data, &rr); err != nil || rr.Error != "" {
		t.Fatalf("registration: %s %v", reply.Data, err)
	}
	return a
}

// stop unsubscribes replica r: it is gone.
func (r *replica) stop(t *testing.T) {
	for _, s := range r.subs {
		if err := s.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
}

func (a *replicaAgent) serve(r *replica, m *nats.Msg) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(m.Data, &req) != nil {
		return
	}
	respond := func(result any, code int, text string) {
		resp := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		if code != 0 {
			resp["error"] = map[string]any{"code": code, "message": text}
		} else {
			resp["result"] = result
		}
		out := nats.NewMsg(m.Reply)
		out.Data, _ = json.Marshal(resp)
		if r.header != "" && req.Method == a2a.MethodSendMessage && code == 0 {
			out.Header.Set(natsbind.HeaderReplica, r.header)
		}
		_ = m.RespondMsg(out)
	}
	st := r.st
	switch req.Method {
	case a2a.MethodSendMessage:
		var p a2a.SendMessageRequest
		if err := json.Unmarshal(req.Params, &p); err != nil {
			respond(nil, a2a.CodeInvalidParams, err.Error())
			return
		}
		mm := p.Message
		st.mu.Lock()
		if id, dup := st.seen[mm.MessageID]; dup {
			ht := st.tasks[id]
			snap := ht.snapshot()
			st.mu.Unlock()
			respond(map[string]any{"task": snap}, 0, "")
			return
		}
		if mm.TaskID == "" {
			var md map[string]string
			_ = json.Unmarshal(mm.Metadata, &md)
			b, err := brief.FromMessage(mm)
			if err != nil {
				st.mu.Unlock()
				respond(nil, a2a.CodeInvalidParams, err.Error())
				return
			}
			var ev struct {
				CaseID string `json:"case_id"`
			}
			_ = json.Unmarshal(b.Evidence, &ev)
			st.n++
			ht := &heldTask{id: fmt.Sprintf("%s-t%d", r.id, st.n), contextID: fmt.Sprintf("ctx-%d", st.n), a2adID: md["a2ad/taskId"],
				events: md["a2ad/eventsSubject"], caseID: ev.CaseID, holder: r.id, state: a2a.TaskStateSubmitted}
			st.tasks[ht.id] = ht
			st.seen[mm.MessageID] = ht.id
			snap := ht.snapshot()
			st.mu.Unlock()
			respond(map[string]any{"task": snap}, 0, "")
			go a.work(ht, st)
			return
		}
		ht := st.tasks[mm.TaskID]
		switch {
		case ht == nil:
			r.refused++
			st.mu.Unlock()
			respond(nil, a2a.CodeTaskNotFound, "no such task here")
			return
		case ht.state != a2a.TaskStateInputRequired:
			st.mu.Unlock()
			respond(nil, a2a.CodeUnsupportedOperation, "not waiting for input")
			return
		}
		r.answers++
		ht.state = a2a.TaskStateWorking
		st.seen[mm.MessageID] = ht.id
		snap := ht.snapshot()
		st.mu.Unlock()
		respond(map[string]any{"task": snap}, 0, "")
		go func() {
			if a.status(ht, st, a2a.TaskStateWorking, nil) {
				a.complete(ht, st)
			}
		}()
	case a2a.MethodCancelTask:
		var p a2a.CancelTaskRequest
		_ = json.Unmarshal(req.Params, &p)
		st.mu.Lock()
		ht := st.tasks[p.ID]
		if ht == nil {
			r.cancelMisses++
			st.mu.Unlock()
			respond(nil, a2a.CodeTaskNotFound, "no such task here")
			return
		}
		r.cancels++
		ht.state = a2a.TaskStateCanceled
		snap := ht.snapshot()
		st.mu.Unlock()
		respond(snap, 0, "")
		go a.publish(ht, st, a2a.StreamResponse{StatusUpdate: &a2a.TaskStatusUpdateEvent{TaskID: ht.id, ContextID: ht.contextID,
			Status: a2a.TaskStatus{State: a2a.TaskStateCanceled, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}}})
	default: // GetTask: the liveness probe, and nothing else here
		respond(nil, a2a.CodeTaskNotFound, "no such task")
	}
}

func (ht *heldTask) snapshot() *a2a.Task {
	return &a2a.Task{ID: ht.id, ContextID: ht.contextID, Status: a2a.TaskStatus{State: ht.state, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}}
}

func (a *replicaAgent) work(ht *heldTask, st *replicaStore) {
	if !a.status(ht, st, a2a.TaskStateWorking, nil) {
		return
	}
	switch {
	case strings.HasPrefix(ht.caseID, "Q-"):
		q := a2a.Message{MessageID: ht.id + "-q", Role: a2a.RoleAgent, Parts: []a2a.Part{a2a.TextPart("Was the customer's identity verified?")}}
		a.status(ht, st, a2a.TaskStateInputRequired, &q)
	case strings.HasPrefix(ht.caseID, "S-"):
		// Works until canceled.
	default:
		a.complete(ht, st)
	}
}

// status moves ht to state (unless it was canceled) and publishes it.
func (a *replicaAgent) status(ht *heldTask, st *replicaStore, state a2a.TaskState, msg *a2a.Message) bool {
	st.mu.Lock()
	if ht.state == a2a.TaskStateCanceled {
		st.mu.Unlock()
		return false
	}
	ht.state = state
	st.mu.Unlock()
	return a.publish(ht, st, a2a.StreamResponse{StatusUpdate: &a2a.TaskStatusUpdateEvent{TaskID: ht.id, ContextID: ht.contextID,
		Status: a2a.TaskStatus{State: state, Message: msg, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}}})
}

func (a *replicaAgent) complete(ht *heldTask, st *replicaStore) {
	raw, _ := json.Marshal(map[string]any{"case_id": ht.caseID, "risk_level": "low", "score": 0.1,
		"reasons": []string{"no risk signals in the evidence"}, "policy_version": refagent.PolicyVersion})
	st.mu.Lock()
	if ht.state == a2a.TaskStateCanceled {
		st.mu.Unlock()
		return
	}
	ht.state = a2a.TaskStateCompleted
	st.mu.Unlock()
	a.publish(ht, st, a2a.StreamResponse{Task: &a2a.Task{ID: ht.id, ContextID: ht.contextID,
		Status:    a2a.TaskStatus{State: a2a.TaskStateCompleted, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)},
		Artifacts: []a2a.Artifact{{ArtifactID: "risk-assessment", Name: "risk_assessment", Parts: []a2a.Part{a2a.DataPart(raw)}}}}})
}

// publish sends one event, Nats-Msg-Id <a2adTaskId>.<seq>, until acked.
func (a *replicaAgent) publish(ht *heldTask, st *replicaStore, item a2a.StreamResponse) bool {
	st.mu.Lock()
	ht.seq++
	msgID := fmt.Sprintf("%s.%d", ht.a2adID, ht.seq)
	st.mu.Unlock()
	body, _ := json.Marshal(item)
	for attempt := 0; attempt < 50; attempt++ {
		m := nats.NewMsg(ht.events)
		m.Data = body
		m.Header.Set(natsbind.HeaderMsgID, msgID)
		m.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := a.js.PublishMsg(ctx, m)
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// counts sums the replicas' counters.
func (a *replicaAgent) counts() (answers, cancels, refused, cancelMisses int) {
	for _, r := range a.reps {
		r.st.mu.Lock()
		answers += r.answers
		cancels += r.cancels
		refused += r.refused
		cancelMisses += r.cancelMisses
		r.st.mu.Unlock()
	}
	return
}

// stillWorking lists the tasks some replica still works on.
func (a *replicaAgent) stillWorking() []string {
	var ids []string
	seen := map[*replicaStore]bool{}
	for _, r := range a.reps {
		if seen[r.st] {
			continue
		}
		seen[r.st] = true
		r.st.mu.Lock()
		for _, ht := range r.st.tasks {
			if ht.state == a2a.TaskStateWorking {
				ids = append(ids, ht.id)
			}
		}
		r.st.mu.Unlock()
	}
	return ids
}

// startReplicaDaemon runs a2ad on the NATS at url (its data in dataDir)
// with agent fraud-review.
func startReplicaDaemon(t *testing.T, url, dataDir string) *daemon.Daemon {
	t.Helper()
	d, err := daemon.Start(context.Background(), daemon.Config{
		NATSURL: url, HTTPAddr: "127.0.0.1:0", DataDir: dataDir,
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

var replicaHost = broker.Principal{Tenant: "default", Subject: "host-1"}

func delegateCase(t *testing.T, d *daemon.Daemon, caseID string) *task.Record {
	t.Helper()
	ev, _ := json.Marshal(evidence(caseID, 1999))
	r, err := d.Service.Delegate(context.Background(), replicaHost, broker.DelegateRequest{Agent: "fraud-review", Skill: "assess_refund_risk",
		Brief: brief.Request{Objective: "Assess this refund.", Evidence: ev, OutputSchema: "risk_assessment"}})
	if err != nil {
		t.Fatalf("delegate %s: %v", caseID, err)
	}
	return r
}

func waitState(t *testing.T, d *daemon.Daemon, id string, cond func(*task.Record) bool) *task.Record {
	t.Helper()
	r, err := d.Service.WaitUntil(context.Background(), replicaHost, id, 20*time.Second, cond, nil)
	if err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	if !cond(r) {
		t.Fatalf("task %s: state %s reason %q", id, r.State, r.Reason)
	}
	return r
}

func isState(s task.State) func(*task.Record) bool {
	return func(r *task.Record) bool { return r.State == s }
}

func startReplicaStack(t *testing.T, shared bool, headers ...string) (*daemon.Daemon, *replicaAgent, string, string) {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	dataDir := t.TempDir()
	d := startReplicaDaemon(t, ns.ClientURL(), dataDir)
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := startReplicaAgent(t, ns.ClientURL(), "fraud-review", cred, shared, headers...)
	waitFor(t, "fraud-review approved", func() bool {
		r, err := d.Service.Agents.Get(context.Background(), "fraud-review")
		return err == nil && r.Delegable
	})
	return d, a, ns.ClientURL(), dataDir
}

// Two replicas in one queue group, each holding its own tasks: every
// answer reaches the replica that asked, every cancel the replica that
// works on the task (docs/nats-binding.md §5.8). Before a2ad routed by
// A2ad-Replica, about half of them reached the other replica: the answer
// came back agent_refused (TaskNotFound) and the canceled task went on.
func TestAnswersAndCancelsReachTheReplicaHoldingTheTask(t *testing.T) {
	const questions, slow = 40, 20
	d, a, _, _ := startReplicaStack(t, false, "r1", "r2")
	ids := map[string]string{}
	for i := range questions {
		ids[fmt.Sprintf("Q-%d", i)] = delegateCase(t, d, fmt.Sprintf("Q-%d", i)).ID
	}
	for i := range slow {
		ids[fmt.Sprintf("S-%d", i)] = delegateCase(t, d, fmt.Sprintf("S-%d", i)).ID
	}
	held := map[string]int{}
	for c, id := range ids {
		want := task.InputRequired
		if strings.HasPrefix(c, "S-") {
			want = task.Working
		}
		r := waitState(t, d, id, isState(want))
		if r.AgentReplica != "r1" && r.AgentReplica != "r2" {
			t.Fatalf("task %s: agent_replica %q, want r1 or r2", id, r.AgentReplica)
		}
		if !strings.HasPrefix(r.AgentTaskID, r.AgentReplica+"-") {
			t.Fatalf("task %s: agent task %s recorded with replica %s", id, r.AgentTaskID, r.AgentReplica)
		}
		held[r.AgentReplica]++
	}
	if held["r1"] == 0 || held["r2"] == 0 {
		t.Fatalf("tasks per replica %v: the queue group gave one replica all of them", held)
	}
	refusedAnswers := map[string]bool{}
	for c, id := range ids {
		if strings.HasPrefix(c, "Q-") {
			if _, err := d.Service.Respond(context.Background(), replicaHost, id, "yes, verified"); err != nil {
				refusedAnswers[id] = true
				t.Logf("answer to %s: %v", id, err)
			}
			continue
		}
		if _, err := d.Service.Cancel(context.Background(), replicaHost, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	for c, id := range ids {
		if strings.HasPrefix(c, "Q-") {
			if !refusedAnswers[id] {
				waitState(t, d, id, isState(task.Completed))
			}
		} else {
			waitState(t, d, id, func(r *task.Record) bool { return r.State == task.Canceled && r.Outbox == nil })
		}
	}
	answers, cancels, refused, misses := a.counts()
	if len(refusedAnswers) != 0 || refused != 0 || answers != questions {
		t.Errorf("answers taken %d of %d, refused by a replica %d (a2ad reported %d refused)", answers, questions, refused, len(refusedAnswers))
	}
	if cancels != slow || misses != 0 {
		t.Errorf("cancels reaching the holder %d of %d, reaching another replica %d", cancels, slow, misses)
	}
	if w := a.stillWorking(); len(w) != 0 {
		t.Errorf("tasks canceled in a2ad still worked on by their replica: %v", w)
	}
	t.Logf("tasks per replica %v; fallbacks %d", held, d.Service.Bindings[""].(*natsbind.Client).Fallbacks())
}

// The replica holding a task is gone: its subject has no responder, and the
// answer goes at once to the shared subject, where a replica that shares
// the task store takes it.
func TestAnswerFallsBackToAnyReplicaWhenTheHolderIsGone(t *testing.T) {
	d, a, _, _ := startReplicaStack(t, true, "r1", "r2")
	var r *task.Record
	for i := 0; ; i++ { // until r1 holds one: the queue group chooses
		r = waitState(t, d, delegateCase(t, d, fmt.Sprintf("Q-%d", i)).ID, isState(task.InputRequired))
		if r.AgentReplica == "r1" {
			break
		}
		if i == 100 {
			t.Fatal("replica r1 was never given a task")
		}
	}
	a.reps[0].stop(t)
	client := d.Service.Bindings[""].(*natsbind.Client)
	before := client.Fallbacks()
	if _, err := d.Service.Respond(context.Background(), replicaHost, r.ID, "yes, verified"); err != nil {
		t.Fatalf("answer with the holder gone: %v", err)
	}
	done := waitState(t, d, r.ID, isState(task.Completed))
	if got := client.Fallbacks() - before; got != 1 {
		t.Errorf("fallbacks to the shared subject = %d, want 1", got)
	}
	a.reps[1].st.mu.Lock()
	answersR2 := a.reps[1].answers
	a.reps[1].st.mu.Unlock()
	if answersR2 != 1 {
		t.Errorf("answers taken by r2 = %d, want 1", answersR2)
	}
	if done.AgentReplica != "r1" {
		t.Errorf("agent_replica = %q, want r1 (set once, by the reply that created the task)", done.AgentReplica)
	}
}

// A replica header that is not one NATS token is ignored and counted: the
// task's requests go to the shared subject, as for an agent that sends no
// header.
func TestInvalidReplicaHeaderIsIgnored(t *testing.T) {
	d, a, _, _ := startReplicaStack(t, false, "a.b")
	r := waitState(t, d, delegateCase(t, d, "Q-1").ID, isState(task.InputRequired))
	if r.AgentReplica != "" {
		t.Fatalf("agent_replica = %q from header %q, want none", r.AgentReplica, "a.b")
	}
	if n := d.Service.BadReplicaHeaders(); n != 1 {
		t.Errorf("BadReplicaHeaders = %d, want 1", n)
	}
	if _, err := d.Service.Respond(context.Background(), replicaHost, r.ID, "yes, verified"); err != nil {
		t.Fatalf("answer: %v", err)
	}
	waitState(t, d, r.ID, isState(task.Completed))
	if answers, _, _, _ := a.counts(); answers != 1 {
		t.Errorf("answers taken = %d, want 1", answers)
	}
}

// The replica is in the task's record: an a2ad restarted between the
// delegation and the answer sends the answer to the holder.
func TestReplicaRoutingSurvivesARestartOfA2ad(t *testing.T) {
	const questions = 12
	d, a, url, dataDir := startReplicaStack(t, false, "r1", "r2")
	var ids []string
	for i := range questions {
		id := delegateCase(t, d, fmt.Sprintf("Q-%d", i)).ID
		waitState(t, d, id, isState(task.InputRequired))
		ids = append(ids, id)
	}
	d.Stop()
	d2 := startReplicaDaemon(t, url, dataDir)
	waitFor(t, "fraud-review delegable after the restart", func() bool {
		r, err := d2.Service.Agents.Get(context.Background(), "fraud-review")
		return err == nil && r.Delegable
	})
	for _, id := range ids {
		if _, err := d2.Service.Respond(context.Background(), replicaHost, id, "yes, verified"); err != nil {
			t.Errorf("answer to %s after the restart: %v", id, err)
		}
	}
	for _, id := range ids {
		waitState(t, d2, id, isState(task.Completed))
	}
	if answers, _, refused, _ := a.counts(); answers != questions || refused != 0 {
		t.Errorf("answers taken %d of %d, refused %d", answers, questions, refused)
	}
}
