package refagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xeipuuv/gojsonschema"
)

const (
	testAgentID = "fraud-review"
	streamName  = "A2AD_EVENTS"
	objective   = "Assess the refund case for fraud risk."
)

// testCard is formatted on purpose (spaces, '<', non-ASCII): json.Marshal
// of a json.RawMessage would compact and escape it.
var testCard = []byte(`{"name": "Fraud <review>",
  "description": "Réference agent",  "version": "1.0.0"}`)

// daemon plays a2ad's side of the binding against an agent under test.
type daemon struct {
	t      *testing.T
	srv    *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	client *natsbind.Client
	schema []byte
	agent  *Agent
}

// newDaemon starts NATS, optionally the events stream, and an agent on its
// own connection. The agent is stopped at test end.
func newDaemon(t *testing.T, misbehave map[string]string, withStream bool) *daemon {
	t.Helper()
	srv, nc, js := natstest.Start(t)
	schema, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", "risk_assessment.json"))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, srv: srv, nc: nc, js: js, client: natsbind.NewClient(nc), schema: schema}
	if withStream {
		d.createStream()
	}
	d.agent = d.startAgent(misbehave)
	return d
}

func (d *daemon) createStream() {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := d.js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{natsbind.EventsWildcard}}); err != nil {
		d.t.Fatal(err)
	}
}

func (d *daemon) startAgent(misbehave map[string]string) *Agent {
	d.t.Helper()
	a, err := New(natstest.Connect(d.t, d.srv), Config{AgentID: testAgentID, Card: testCard, Misbehave: misbehave})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(a.Stop)
	return a
}

// buildBrief builds the brief a2ad would send for evidence.
func (d *daemon) buildBrief(evidence string) *brief.Brief {
	d.t.Helper()
	b, err := brief.Build(
		brief.Request{Objective: objective, Evidence: json.RawMessage(evidence), OutputSchema: "risk_assessment"},
		brief.OutputSchema{Name: "risk_assessment", Digest: "sha256:test", Document: d.schema},
		brief.Limits{})
	if err != nil {
		d.t.Fatal(err)
	}
	return b
}

// metadata is the message metadata a2ad sends for its task id.
func metadata(a2adTaskID, eventsSubject string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{MetaTaskID: a2adTaskID, MetaEventsSubject: eventsSubject})
	return b
}

func sendParams(m a2a.Message) a2a.SendMessageRequest {
	return a2a.SendMessageRequest{
		Message:       m,
		Configuration: &a2a.SendMessageConfiguration{ReturnImmediately: true, AcceptedOutputModes: []string{"application/json"}},
	}
}

// delegate sends a new task for evidence under a2ad task id tid, with
// messageId tid+"-m1", and returns the agent's task.
func (d *daemon) delegate(tid, evidence string) *a2a.Task {
	d.t.Helper()
	b := d.buildBrief(evidence)
	m := b.Message(tid+"-m1", "", metadata(tid, natsbind.EventsSubject(testAgentID, tid)))
	return d.send(sendParams(m))
}

func (d *daemon) send(p a2a.SendMessageRequest) *a2a.Task {
	d.t.Helper()
	res, err := d.client.Call(context.Background(), testAgentID, a2a.MethodSendMessage, p, nil)
	if err != nil {
		d.t.Fatalf("SendMessage: %v", err)
	}
	r, err := a2a.DecodeSendMessageResponse(res)
	if err != nil {
		d.t.Fatalf("SendMessage result: %v", err)
	}
	if r.Task == nil {
		d.t.Fatal("SendMessage result has no task")
	}
	return r.Task
}

// answer sends the reviewer's answer to an input-required task.
func (d *daemon) answer(tid, messageID string, task *a2a.Task, text string) (*a2a.Task, error) {
	d.t.Helper()
	m := a2a.Message{
		MessageID: messageID,
		TaskID:    task.ID,
		ContextID: task.ContextID,
		Role:      a2a.RoleUser,
		Parts:     []a2a.Part{a2a.TextPart(text)},
		Metadata:  metadata(tid, natsbind.EventsSubject(testAgentID, tid)),
	}
	res, err := d.client.Call(context.Background(), testAgentID, a2a.MethodSendMessage, sendParams(m), nil)
	if err != nil {
		return nil, err
	}
	r, err := a2a.DecodeSendMessageResponse(res)
	if err != nil {
		d.t.Fatalf("SendMessage result: %v", err)
	}
	return r.Task, nil
}

func (d *daemon) taskCall(method, id string) (*a2a.Task, error) {
	d.t.Helper()
	res, err := d.client.Call(context.Background(), testAgentID, method, map[string]string{"id": id}, nil)
	if err != nil {
		return nil, err
	}
	task, err := a2a.DecodeTask(res)
	if err != nil {
		d.t.Fatalf("%s result: %v", method, err)
	}
	return task, nil
}

// event is one stream item captured by the events stream.
type event struct {
	item    *a2a.StreamResponse
	msgID   string
	hdr     nats.Header
	subject string
}

func (e event) String() string {
	switch {
	case e.item.StatusUpdate != nil:
		return string(e.item.StatusUpdate.Status.State)
	case e.item.ArtifactUpdate != nil:
		return "artifact:" + e.item.ArtifactUpdate.Artifact.ArtifactID
	case e.item.Task != nil:
		return "task:" + string(e.item.Task.Status.State)
	}
	return "other"
}

// watcher reads the events of one a2ad task from the stream, in order.
type watcher struct {
	t    *testing.T
	cons jetstream.Consumer
}

func (d *daemon) watch(tid string) *watcher {
	d.t.Helper()
	cons, err := d.js.OrderedConsumer(context.Background(), streamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{natsbind.EventsSubject(testAgentID, tid)},
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return &watcher{t: d.t, cons: cons}
}

// next returns the next n events, failing the test if they do not arrive
// within 5 s.
func (w *watcher) next(n int) []event {
	w.t.Helper()
	var out []event
	for len(out) < n {
		msg, err := w.cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			w.t.Fatalf("waiting for event %d of %d (got %v): %v", len(out)+1, n, out, err)
		}
		item, err := a2a.DecodeStreamResponse(msg.Data())
		if err != nil {
			w.t.Fatalf("event %q is not an A2A 1.0 stream item: %v", msg.Data(), err)
		}
		out = append(out, event{item: item, msgID: msg.Headers().Get(natsbind.HeaderMsgID), hdr: msg.Headers(), subject: msg.Subject()})
	}
	return out
}

// none fails the test if another event arrives within d.
func (w *watcher) none(d time.Duration) {
	w.t.Helper()
	msg, err := w.cons.Next(jetstream.FetchMaxWait(d))
	if err == nil {
		w.t.Fatalf("unexpected event %s", msg.Data())
	}
}

// states lists the events as state names or "artifact:<id>".
func states(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.String()
	}
	return out
}

// checkEnvelope checks what every event of task must carry: the agent's
// task and context ids, the version header, and Nats-Msg-Id
// "<a2adTaskId>.<seq>" (a2ad's task id, from the subject) numbered from first.
func checkEnvelope(t *testing.T, evs []event, task *a2a.Task, first int) {
	t.Helper()
	for i, e := range evs {
		var taskID, contextID string
		switch {
		case e.item.StatusUpdate != nil:
			taskID, contextID = e.item.StatusUpdate.TaskID, e.item.StatusUpdate.ContextID
			if _, err := time.Parse(time.RFC3339, e.item.StatusUpdate.Status.Timestamp); err != nil {
				t.Errorf("event %d: timestamp: %v", i, err)
			}
		case e.item.ArtifactUpdate != nil:
			taskID, contextID = e.item.ArtifactUpdate.TaskID, e.item.ArtifactUpdate.ContextID
		}
		if taskID != task.ID || contextID != task.ContextID {
			t.Errorf("event %d names task %q context %q, want %q %q", i, taskID, contextID, task.ID, task.ContextID)
		}
		_, a2adTaskID, err := natsbind.ParseEventsSubject(e.subject)
		if err != nil {
			t.Errorf("event %d on subject %q: %v", i, e.subject, err)
		}
		if want := fmt.Sprintf("%s.%d", a2adTaskID, first+i); e.msgID != want {
			t.Errorf("event %d Nats-Msg-Id = %q, want %q", i, e.msgID, want)
		}
		if v := e.hdr.Get(natsbind.HeaderA2AVersion); v != a2a.Version {
			t.Errorf("event %d A2A-Version = %q", i, v)
		}
	}
}

// artifactData returns the data of the single risk-assessment artifact in e.
func artifactData(t *testing.T, e event) []byte {
	t.Helper()
	u := e.item.ArtifactUpdate
	if u == nil {
		t.Fatalf("event %s is not an artifactUpdate", e)
	}
	if u.Artifact.ArtifactID != "risk-assessment" || u.Artifact.Name != "risk_assessment" || !u.LastChunk {
		t.Errorf("artifact id %q name %q lastChunk %v", u.Artifact.ArtifactID, u.Artifact.Name, u.LastChunk)
	}
	if len(u.Artifact.Parts) != 1 || u.Artifact.Parts[0].Data == nil || u.Artifact.Parts[0].MediaType != "application/json" {
		t.Fatalf("artifact parts = %+v, want one application/json data part", u.Artifact.Parts)
	}
	return u.Artifact.Parts[0].Data
}

// schemaErrors validates data against the risk_assessment host schema.
func (d *daemon) schemaErrors(data []byte) []string {
	d.t.Helper()
	res, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(d.schema), gojsonschema.NewBytesLoader(data))
	if err != nil {
		d.t.Fatal(err)
	}
	var out []string
	for _, e := range res.Errors() {
		out = append(out, e.String())
	}
	return out
}

func TestSmallCaseCompletes(t *testing.T) {
	d := newDaemon(t, nil, true)
	evidence := `{"case_id":"C-7","amount_cents":1999,"currency":"EUR","customer_tenure_days":400,"prior_refunds_90d":0,"order_id":"O-1","notes":"small"}`
	w := d.watch("t-small")
	task := d.delegate("t-small", evidence)
	if task.ID == "" || task.ContextID == "" || task.Status.State != a2a.TaskStateSubmitted {
		t.Fatalf("SendMessage task = %+v, want an id, a context, SUBMITTED", task)
	}

	evs := w.next(3)
	if got, want := states(evs), []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	checkEnvelope(t, evs, task, 1)
	want := `{"case_id":"C-7","risk_level":"low","score":0.1,"reasons":["no risk signals in the evidence"],"policy_version":"fraud-policy-2026.11"}`
	data := artifactData(t, evs[1])
	if string(data) != want {
		t.Errorf("artifact data = %s\nwant %s", data, want)
	}
	if errs := d.schemaErrors(data); len(errs) > 0 {
		t.Errorf("artifact violates the host schema: %v", errs)
	}
	w.none(200 * time.Millisecond)

	got, err := d.taskCall(a2a.MethodGetTask, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 {
		t.Errorf("GetTask = %+v, want COMPLETED with the artifact", got)
	}
	st := d.agent.Stats()
	if st.BriefsReceived != 1 || len(st.Received) != 1 || !bytes.Equal(st.Received[0], d.buildBrief(evidence).Bytes()) {
		t.Errorf("Stats = %d briefs, received %q", st.BriefsReceived, st.Received)
	}
}

// TestReportAtOnce: an agent that answers at once reports a task that
// needs nothing more in one Task event, COMPLETED with the assessment; a
// case above the review threshold still asks its question first.
func TestReportAtOnce(t *testing.T) {
	d := newDaemon(t, nil, true)
	d.agent.SetReportAtOnce(true)
	w := d.watch("t-once")
	task := d.delegate("t-once", `{"case_id":"C-7","amount_cents":1999,"currency":"EUR","customer_tenure_days":400,"prior_refunds_90d":0}`)
	if task.Status.State != a2a.TaskStateSubmitted {
		t.Fatalf("SendMessage task state = %s, want SUBMITTED", task.Status.State)
	}
	evs := w.next(1)
	w.none(200 * time.Millisecond)
	got := evs[0].item.Task
	if got == nil {
		t.Fatalf("event = %s, want a task item", evs[0])
	}
	if got.ID != task.ID || got.ContextID != task.ContextID || got.Status.State != a2a.TaskStateCompleted {
		t.Errorf("task item = id %q context %q state %s, want %q %q TASK_STATE_COMPLETED", got.ID, got.ContextID, got.Status.State, task.ID, task.ContextID)
	}
	if evs[0].msgID != "t-once.1" {
		t.Errorf("Nats-Msg-Id = %q, want t-once.1", evs[0].msgID)
	}
	want := `{"case_id":"C-7","risk_level":"low","score":0.1,"reasons":["no risk signals in the evidence"],"policy_version":"fraud-policy-2026.11"}`
	if len(got.Artifacts) != 1 || got.Artifacts[0].ArtifactID != "risk-assessment" || len(got.Artifacts[0].Parts) != 1 ||
		string(got.Artifacts[0].Parts[0].Data) != want {
		t.Errorf("task item artifacts = %+v, want the one risk assessment %s", got.Artifacts, want)
	}

	w = d.watch("t-once-big")
	d.delegate("t-once-big", `{"case_id":"C-41","amount_cents":125000,"currency":"EUR","manual_review_above_cents":50000}`)
	if got, want := states(w.next(2)), []string{"TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"}; !slices.Equal(got, want) {
		t.Errorf("events above the threshold = %v, want %v", got, want)
	}
}

func TestInputRequired(t *testing.T) {
	const question = "Case C-41: the refund of 125000 cents is above the manual review threshold of 50000 cents. " +
		"Has a human reviewer verified the customer's identity? Answer yes or no."
	tests := []struct {
		answer string
		want   string
	}{
		{"yes", `{"case_id":"C-41","risk_level":"low","score":0.2,"reasons":["amount 125000 cents above 50000","identity verified by a human reviewer"],"policy_version":"fraud-policy-2026.11"}`},
		{"Verified.", `{"case_id":"C-41","risk_level":"low","score":0.2,"reasons":["amount 125000 cents above 50000","identity verified by a human reviewer"],"policy_version":"fraud-policy-2026.11"}`},
		{"no", `{"case_id":"C-41","risk_level":"high","score":0.7,"reasons":["amount 125000 cents above 50000","identity not verified by a human reviewer"],"policy_version":"fraud-policy-2026.11"}`},
	}
	d := newDaemon(t, nil, true)
	for i, tc := range tests {
		t.Run(tc.answer, func(t *testing.T) {
			tid := fmt.Sprintf("t-41-%d", i)
			w := d.watch(tid)
			task := d.delegate(tid, `{"case_id":"C-41","amount_cents":125000,"currency":"EUR","manual_review_above_cents":50000,"customer_tenure_days":800,"prior_refunds_90d":1}`)

			evs := w.next(2)
			if got, want := states(evs), []string{"TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"}; !slices.Equal(got, want) {
				t.Fatalf("events = %v, want %v", got, want)
			}
			msg := evs[1].item.StatusUpdate.Status.Message
			if msg == nil || msg.Role != a2a.RoleAgent || msg.MessageID == "" || len(msg.Parts) != 1 || msg.Text() != question {
				t.Fatalf("input-required message = %+v, want the agent's question %q", msg, question)
			}
			if got, _ := d.taskCall(a2a.MethodGetTask, task.ID); got == nil || got.Status.State != a2a.TaskStateInputRequired {
				t.Errorf("GetTask while waiting = %+v", got)
			}

			resumed, err := d.answer(tid, tid+"-answer", task, tc.answer)
			if err != nil {
				t.Fatal(err)
			}
			if resumed.ID != task.ID || resumed.Status.State != a2a.TaskStateWorking {
				t.Fatalf("answer reply = %+v, want task %s WORKING", resumed, task.ID)
			}
			evs2 := w.next(3)
			if got, want := states(evs2), []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED"}; !slices.Equal(got, want) {
				t.Fatalf("events after the answer = %v, want %v", got, want)
			}
			checkEnvelope(t, append(evs, evs2...), task, 1)
			if data := artifactData(t, evs2[1]); string(data) != tc.want {
				t.Errorf("artifact data = %s\nwant %s", data, tc.want)
			} else if errs := d.schemaErrors(data); len(errs) > 0 {
				t.Errorf("artifact violates the host schema: %v", errs)
			}

			// The same answer again is deduplicated; a new one is refused.
			again, err := d.answer(tid, tid+"-answer", task, tc.answer)
			if err != nil || again.ID != task.ID {
				t.Errorf("duplicate answer = %+v, %v; want the same task", again, err)
			}
			if _, err := d.answer(tid, tid+"-answer-2", task, "yes"); !a2a.IsCode(err, a2a.CodeUnsupportedOperation) {
				t.Errorf("answer to a completed task: err = %v, want -32004", err)
			}
			w.none(200 * time.Millisecond)
		})
	}
}

func TestMisbehaviour(t *testing.T) {
	mis, err := ParseMisbehave([]string{"invalid-artifact:C-13,silent:C-99", "illegal-transition:C-66"})
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, mis, true)
	var msgIDs []string
	collect := func(evs []event) {
		for _, e := range evs {
			msgIDs = append(msgIDs, e.msgID)
		}
	}
	tests := []struct {
		name, caseID string
		events       []string
		check        func(t *testing.T, evs []event)
	}{
		{"normal", "C-7", []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED"}, func(t *testing.T, evs []event) {
			if errs := d.schemaErrors(artifactData(t, evs[1])); len(errs) > 0 {
				t.Errorf("normal artifact violates the schema: %v", errs)
			}
		}},
		{"invalid-artifact", "C-13", []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED"}, func(t *testing.T, evs []event) {
			errs := d.schemaErrors(artifactData(t, evs[1]))
			joined := strings.Join(errs, "\n")
			for _, want := range []string{"risk_level", "score", "debug_trace"} {
				if !strings.Contains(joined, want) {
					t.Errorf("schema errors %q do not mention %s", errs, want)
				}
			}
		}},
		{"silent", "C-99", nil, nil},
		{"illegal-transition", "C-66", []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED", "TASK_STATE_WORKING"}, func(t *testing.T, evs []event) {
			if errs := d.schemaErrors(artifactData(t, evs[1])); len(errs) > 0 {
				t.Errorf("artifact violates the schema: %v", errs)
			}
		}},
		{"normal after misbehaviour", "C-8", []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED"}, nil},
	}
	type started struct {
		w    *watcher
		task *a2a.Task
	}
	runs := make([]started, len(tests))
	for i, tc := range tests { // all in flight in one agent at once
		tid := fmt.Sprintf("t-mis-%d", i)
		w := d.watch(tid)
		runs[i] = started{w, d.delegate(tid, fmt.Sprintf(`{"case_id":%q,"amount_cents":2500,"currency":"EUR"}`, tc.caseID))}
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runs[i]
			if r.task.Status.State != a2a.TaskStateSubmitted {
				t.Errorf("SendMessage state = %s", r.task.Status.State)
			}
			evs := r.w.next(len(tc.events))
			if got := states(evs); !slices.Equal(got, tc.events) {
				t.Fatalf("events = %v, want %v", got, tc.events)
			}
			checkEnvelope(t, evs, r.task, 1)
			collect(evs)
			if tc.check != nil {
				tc.check(t, evs)
			}
			r.w.none(300 * time.Millisecond)
			if tc.events == nil {
				got, err := d.taskCall(a2a.MethodGetTask, r.task.ID)
				if err != nil || got.Status.State != a2a.TaskStateSubmitted {
					t.Errorf("GetTask of a silent task = %+v, %v; want SUBMITTED", got, err)
				}
			}
		})
	}
	seen := map[string]bool{}
	for _, id := range msgIDs {
		if seen[id] {
			t.Errorf("Nats-Msg-Id %q used twice", id)
		}
		seen[id] = true
	}
	if len(msgIDs) != 3+3+4+3 {
		t.Errorf("%d events, want 13", len(msgIDs))
	}
}

func TestDuplicateMessageID(t *testing.T) {
	d := newDaemon(t, nil, true)
	w := d.watch("t-dup")
	first := d.delegate("t-dup", `{"case_id":"C-5","amount_cents":100,"currency":"EUR"}`)
	second := d.delegate("t-dup", `{"case_id":"C-5","amount_cents":100,"currency":"EUR"}`)
	if second.ID != first.ID || second.ContextID != first.ContextID {
		t.Errorf("duplicate SendMessage gave task %s/%s, want %s/%s", second.ID, second.ContextID, first.ID, first.ContextID)
	}
	if n := d.agent.Stats().BriefsReceived; n != 1 {
		t.Errorf("BriefsReceived = %d, want 1", n)
	}
	evs := w.next(3)
	checkEnvelope(t, evs, first, 1)
	w.none(300 * time.Millisecond)
}

func TestRequestErrors(t *testing.T) {
	d := newDaemon(t, nil, true)
	valid := func(mut func(m *a2a.Message)) a2a.SendMessageRequest {
		m := d.buildBrief(`{"case_id":"C-1","amount_cents":1,"currency":"EUR"}`).
			Message("t-err-m", "", metadata("t-err", natsbind.EventsSubject(testAgentID, "t-err")))
		mut(&m)
		return sendParams(m)
	}
	rpc := func(method string, params any) []byte {
		req, err := a2a.NewRequest("7", method, params)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(req)
		return b
	}
	v1 := nats.Header{natsbind.HeaderA2AVersion: {"1.0"}}
	tests := []struct {
		name string
		hdr  nats.Header
		body []byte
		code int
	}{
		{"wrong events subject", v1, rpc(a2a.MethodSendMessage, valid(func(m *a2a.Message) {
			m.Metadata = metadata("t-err", natsbind.EventsSubject(testAgentID, "other"))
		})), a2a.CodeInvalidParams},
		{"another agent's events subject", v1, rpc(a2a.MethodSendMessage, valid(func(m *a2a.Message) {
			m.Metadata = metadata("t-err", natsbind.EventsSubject("billing", "t-err"))
		})), a2a.CodeInvalidParams},
		{"no metadata", v1, rpc(a2a.MethodSendMessage, valid(func(m *a2a.Message) { m.Metadata = nil })), a2a.CodeInvalidParams},
		{"no brief", v1, rpc(a2a.MethodSendMessage, valid(func(m *a2a.Message) { m.Parts = m.Parts[:1] })), a2a.CodeInvalidParams},
		{"agent role", v1, rpc(a2a.MethodSendMessage, valid(func(m *a2a.Message) { m.Role = a2a.RoleAgent })), a2a.CodeInvalidParams},
		{"unknown task", v1, rpc(a2a.MethodSendMessage, valid(func(m *a2a.Message) { m.TaskID = "fr-nope" })), a2a.CodeTaskNotFound},
		{"0.3 role spelling", v1, []byte(`{"jsonrpc":"2.0","id":"7","method":"SendMessage","params":{"message":{"messageId":"x","role":"user","parts":[]}}}`), a2a.CodeInvalidParams},
		{"unknown method", v1, rpc("ListTasks", map[string]any{}), a2a.CodeMethodNotFound},
		{"0.3 method name", v1, rpc("message/send", map[string]any{}), a2a.CodeMethodNotFound},
		{"version 2.0", nats.Header{natsbind.HeaderA2AVersion: {"2.0"}}, rpc(a2a.MethodGetTask, map[string]string{"id": "x"}), a2a.CodeVersionNotSupported},
		{"version 0.3", nats.Header{natsbind.HeaderA2AVersion: {"0.3"}}, rpc(a2a.MethodGetTask, map[string]string{"id": "x"}), a2a.CodeVersionNotSupported},
		{"no version", nil, rpc(a2a.MethodGetTask, map[string]string{"id": "x"}), a2a.CodeVersionNotSupported},
		{"lower-case version header", nats.Header{"a2a-version": {"1.0"}}, rpc(a2a.MethodGetTask, map[string]string{"id": "x"}), a2a.CodeTaskNotFound},
		{"not JSON", v1, []byte(`{"jsonrpc":`), a2a.CodeParseError},
		{"not JSON-RPC 2.0", v1, []byte(`{"jsonrpc":"1.0","id":"7","method":"GetTask"}`), a2a.CodeInvalidRequest},
		{"numeric id", v1, []byte(`{"jsonrpc":"2.0","id":7,"method":"GetTask"}`), a2a.CodeInvalidRequest},
		{"GetTask unknown", v1, rpc(a2a.MethodGetTask, map[string]string{"id": "fr-nope"}), a2a.CodeTaskNotFound},
		{"GetTask without id", v1, rpc(a2a.MethodGetTask, map[string]string{}), a2a.CodeInvalidParams},
		{"CancelTask unknown", v1, rpc(a2a.MethodCancelTask, map[string]string{"id": "fr-nope"}), a2a.CodeTaskNotFound},
		{"output mode not offered", v1, rpc(a2a.MethodSendMessage, func() a2a.SendMessageRequest {
			p := valid(func(*a2a.Message) {})
			p.Configuration.AcceptedOutputModes = []string{"text/plain"}
			return p
		}()), a2a.CodeContentTypeNotSupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := nats.NewMsg(natsbind.RPCSubject(testAgentID))
			for k, v := range tc.hdr {
				msg.Header[k] = v
			}
			msg.Data = tc.body
			reply, err := d.nc.RequestMsg(msg, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := a2a.DecodeResponse(reply.Data)
			if !a2a.IsCode(err, tc.code) {
				t.Fatalf("response %s: err = %v, want code %d", reply.Data, err, tc.code)
			}
			if tc.code != a2a.CodeParseError && tc.code != a2a.CodeInvalidRequest && resp.ID != "7" {
				t.Errorf("response id = %q, want 7", resp.ID)
			}
		})
	}
	if n := d.agent.Stats().BriefsReceived; n != 0 {
		t.Errorf("refused requests created %d tasks", n)
	}
}

func TestCancelTask(t *testing.T) {
	d := newDaemon(t, nil, true)
	w := d.watch("t-cancel")
	task := d.delegate("t-cancel", `{"case_id":"C-42","amount_cents":90000,"currency":"EUR","manual_review_above_cents":50000}`)
	w.next(2) // WORKING, INPUT_REQUIRED: the task now waits for an answer

	got, err := d.taskCall(a2a.MethodCancelTask, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != task.ID || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("CancelTask = %+v, want CANCELED", got)
	}
	if _, err := d.taskCall(a2a.MethodCancelTask, task.ID); !a2a.IsCode(err, a2a.CodeTaskNotCancelable) {
		t.Errorf("second CancelTask: err = %v, want -32002", err)
	}
	if _, err := d.answer("t-cancel", "t-cancel-answer", task, "yes"); !a2a.IsCode(err, a2a.CodeUnsupportedOperation) {
		t.Errorf("answer to a canceled task: err = %v, want -32004", err)
	}
	if got, _ := d.taskCall(a2a.MethodGetTask, task.ID); got == nil || got.Status.State != a2a.TaskStateCanceled {
		t.Errorf("GetTask after cancel = %+v", got)
	}
	w.none(300 * time.Millisecond)

	// A completed task is not cancelable either.
	w2 := d.watch("t-done")
	done := d.delegate("t-done", `{"case_id":"C-43","amount_cents":100,"currency":"EUR"}`)
	w2.next(3)
	if _, err := d.taskCall(a2a.MethodCancelTask, done.ID); !a2a.IsCode(err, a2a.CodeTaskNotCancelable) {
		t.Errorf("CancelTask of a completed task: err = %v, want -32002", err)
	}
}

func TestRejectsEvidenceWithoutCase(t *testing.T) {
	d := newDaemon(t, nil, true)
	w := d.watch("t-rej")
	task := d.delegate("t-rej", `{"amount_cents":100,"currency":"EUR"}`)
	evs := w.next(1)
	st := evs[0].item.StatusUpdate
	if st == nil || st.Status.State != a2a.TaskStateRejected || !strings.Contains(st.Status.Message.Text(), "case_id") {
		t.Fatalf("event = %+v, want REJECTED naming case_id", evs[0].item)
	}
	checkEnvelope(t, evs, task, 1)
	if n := d.agent.Stats().BriefsReceived; n != 1 {
		t.Errorf("BriefsReceived = %d, want 1", n)
	}
}

func TestEventsWaitForStream(t *testing.T) {
	d := newDaemon(t, nil, false) // a2ad's stream is not there yet
	task := d.delegate("t-late", `{"case_id":"C-9","amount_cents":100,"currency":"EUR"}`)
	time.Sleep(400 * time.Millisecond) // the agent retries meanwhile
	d.createStream()
	evs := d.watch("t-late").next(3)
	if got, want := states(evs), []string{"TASK_STATE_WORKING", "artifact:risk-assessment", "TASK_STATE_COMPLETED"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	checkEnvelope(t, evs, task, 1)
}

func TestRegistration(t *testing.T) {
	srv, nc, _ := natstest.Start(t)
	a, err := New(natstest.Connect(t, srv), Config{AgentID: testAgentID, Card: append(slices.Clone(testCard), '\n')})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)

	// The registry comes up after the agent: the agent keeps trying.
	time.Sleep(300 * time.Millisecond)
	got := make(chan *nats.Msg, 4)
	sub, err := nc.Subscribe(natsbind.RegisterSubject, func(m *nats.Msg) {
		got <- m
		resp, _ := json.Marshal(natsbind.RegisterResponse{AgentID: testAgentID, Status: "approved", Fingerprint: "sha256:x"})
		_ = m.Respond(resp)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	var m *nats.Msg
	select {
	case m = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no registration request")
	}
	var req natsbind.RegisterRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		t.Fatalf("registration body %s: %v", m.Data, err)
	}
	if req.AgentID != testAgentID || !bytes.Equal(req.Card, testCard) {
		t.Errorf("registration = agent %q card %s\nwant card %s", req.AgentID, req.Card, testCard)
	}
	select {
	case <-got:
		t.Error("the agent registered again after an answer")
	case <-time.After(1500 * time.Millisecond):
	}
}

// A rate_limited answer is retried after the time it names, not the usual
// second; the next answer ends the registration.
func TestRegistrationRateLimitedWaitsAsTold(t *testing.T) {
	srv, nc, _ := natstest.Start(t)
	got := make(chan time.Time, 4)
	sub, err := nc.Subscribe(natsbind.RegisterSubject, func(m *nats.Msg) {
		resp := natsbind.RegisterResponse{AgentID: testAgentID, Status: "approved", Fingerprint: "sha256:x"}
		if len(got) == 0 {
			resp = natsbind.RegisterResponse{AgentID: testAgentID, Code: natsbind.RegisterRateLimited, RetryAfterSeconds: 2,
				Error: "registrations of agent fraud-review are limited to 12 a minute: retry in 2s"}
		}
		got <- time.Now()
		b, _ := json.Marshal(resp)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a, err := New(natstest.Connect(t, srv), Config{AgentID: testAgentID, Card: testCard})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	var first, second time.Time
	for _, at := range []*time.Time{&first, &second} {
		select {
		case *at = <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("no registration request")
		}
	}
	if waited := second.Sub(first); waited < 1900*time.Millisecond || waited > 3*time.Second {
		t.Errorf("retried after %v, want the 2 s the answer named", waited)
	}
	select {
	case <-got:
		t.Error("the agent registered again after its answer")
	case <-time.After(1500 * time.Millisecond):
	}
}

func TestStop(t *testing.T) {
	d := newDaemon(t, nil, true)
	d.agent.Stop()
	d.agent.Stop() // idempotent
	_, err := d.client.Call(context.Background(), testAgentID, a2a.MethodGetTask, map[string]string{"id": "x"}, nil)
	if !errors.Is(err, natsbind.ErrAgentOffline) {
		t.Errorf("call after Stop: err = %v, want ErrAgentOffline", err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"bad agent id", Config{AgentID: "a.b", Card: testCard}},
		{"empty card", Config{AgentID: "x"}},
		{"card not an object", Config{AgentID: "x", Card: []byte(`[1]`)}},
		{"unknown mode", Config{AgentID: "x", Card: testCard, Misbehave: map[string]string{"C-1": "crash"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(nc, tc.cfg); err == nil {
				t.Error("New accepted the config")
			}
		})
	}
}

// The form modes ask whatever the amount: evidence without
// manual_review_above_cents (once a nil dereference that killed the agent)
// or below it gets a question that does not claim the amount is above a
// threshold.
func TestFormModesWithoutThreshold(t *testing.T) {
	mis, err := ParseMisbehave([]string{"structured-question:C-50,unformable-question:C-51"})
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, mis, true)
	tests := []struct {
		name, evidence, want string
	}{
		{"structured, no threshold", `{"case_id":"C-50","amount_cents":1200,"currency":"EUR"}`,
			"Case C-50: approve the refund of 1200 cents? Say whether a human reviewer verified the customer's identity (approve), with an optional note."},
		{"unformable, no threshold", `{"case_id":"C-51","amount_cents":1200,"currency":"EUR"}`,
			"Case C-51: a human review of the refund of 1200 cents is requested. Has a human reviewer verified the customer's identity? Answer yes or no."},
		{"unformable, below threshold", `{"case_id":"C-51","amount_cents":1200,"currency":"EUR","manual_review_above_cents":50000}`,
			"Case C-51: a human review of the refund of 1200 cents is requested. Has a human reviewer verified the customer's identity? Answer yes or no."},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tid := fmt.Sprintf("t-form-%d", i)
			w := d.watch(tid)
			d.delegate(tid, tc.evidence)
			evs := w.next(2)
			if got, want := states(evs), []string{"TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"}; !slices.Equal(got, want) {
				t.Fatalf("events = %v, want %v", got, want)
			}
			msg := evs[1].item.StatusUpdate.Status.Message
			if msg == nil || len(msg.Parts) != 2 || msg.Text() != tc.want {
				t.Fatalf("input-required message = %+v, want text %q and a form", msg, tc.want)
			}
		})
	}
}
