package refagent

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2ad/a2ad/brief"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// httpAgent serves an HTTPAgent on a loopback port and returns it with an
// a2a-go client over binding.
func httpAgent(t *testing.T, cfg HTTPConfig, binding a2a.TransportProtocol) (*HTTPAgent, *a2aclient.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	cfg.BaseURL = "http://" + srv.Listener.Addr().String()
	a, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = a.Handler()
	srv.Start()
	t.Cleanup(func() { a.Stop(); srv.Close() })
	var iface *a2a.AgentInterface
	for _, in := range a.Card().SupportedInterfaces {
		if in.ProtocolBinding == binding {
			iface = in
		}
	}
	c, err := a2aclient.NewFromEndpoints(context.Background(), []*a2a.AgentInterface{iface})
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

// briefMessage is the brief a2ad sends for evidence, as an a2a-go message.
func briefMessage(t *testing.T, a2adTask, evidence string) *a2a.Message {
	t.Helper()
	schema, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", "risk_assessment.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := brief.Build(brief.Request{Objective: objective, Evidence: json.RawMessage(evidence), OutputSchema: "risk_assessment"},
		brief.OutputSchema{Name: "risk_assessment", Digest: "sha256:test", Document: schema}, brief.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := json.Marshal(map[string]string{MetaTaskID: a2adTask})
	raw, _ := json.Marshal(b.Message(a2adTask+"-m1", "", md))
	var m a2a.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m.ContextID = "a2ad-" + a2adTask
	return &m
}

func send(t *testing.T, c *a2aclient.Client, m *a2a.Message) *a2a.Task {
	t.Helper()
	res, err := c.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: m, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	tk, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	return tk
}

// waitState polls GetTask until the task is in state.
func waitState(t *testing.T, c *a2aclient.Client, id a2a.TaskID, state a2a.TaskState) *a2a.Task {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tk, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatalf("GetTask: %v", err)
		}
		if tk.Status.State == state {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s, want %s", id, tk.Status.State, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHTTPAgentCompletesOverBothBindings(t *testing.T) {
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		t.Run(string(binding), func(t *testing.T) {
			a, c := httpAgent(t, HTTPConfig{Streaming: true}, binding)
			tk := send(t, c, briefMessage(t, "tsk-1", `{"case_id":"c-1","amount_cents":4999}`))
			if tk.ContextID != "a2ad-tsk-1" {
				t.Errorf("contextId %q, want the client's a2ad-tsk-1", tk.ContextID)
			}
			done := waitState(t, c, tk.ID, a2a.TaskStateCompleted)
			if len(done.Artifacts) != 1 || done.Artifacts[0].ID != "risk-assessment" || len(done.Artifacts[0].Parts) != 1 {
				t.Fatalf("artifacts %+v, want one risk-assessment with one part", done.Artifacts)
			}
			got, _ := json.Marshal(done.Artifacts[0].Parts[0].Data())
			if want := `{"case_id":"c-1","policy_version":"fraud-policy-2026.11","reasons":["no risk signals in the evidence"],"risk_level":"low","score":0.1}`; string(got) != want {
				t.Fatalf("assessment %s, want %s", got, want)
			}
			if s := a.Stats(); s.Briefs != 1 || s.ByA2ADTask["tsk-1"] != 1 {
				t.Fatalf("stats %+v, want one brief of tsk-1", s)
			}
		})
	}
}

// A standard agent does not deduplicate messageId: the same message twice
// is two tasks (why a2ad reconciles before it sends again).
func TestHTTPAgentDoesNotDeduplicateMessageID(t *testing.T) {
	a, c := httpAgent(t, HTTPConfig{}, a2a.TransportProtocolJSONRPC)
	m := briefMessage(t, "tsk-2", `{"case_id":"c-2","amount_cents":100}`)
	t1, t2 := send(t, c, m), send(t, c, m)
	if t1.ID == t2.ID {
		t.Fatalf("one task %s for two sends", t1.ID)
	}
	if n := a.Stats().ByA2ADTask["tsk-2"]; n != 2 {
		t.Fatalf("agent counted %d briefs of tsk-2, want 2", n)
	}
	list, err := c.ListTasks(context.Background(), &a2a.ListTasksRequest{ContextID: "a2ad-tsk-2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tasks) != 2 {
		t.Fatalf("ListTasks by contextId found %d tasks, want 2", len(list.Tasks))
	}
}

func TestHTTPAgentAsksThenCompletes(t *testing.T) {
	_, c := httpAgent(t, HTTPConfig{}, a2a.TransportProtocolHTTPJSON)
	tk := send(t, c, briefMessage(t, "tsk-3", `{"case_id":"c-3","amount_cents":25000,"manual_review_above_cents":10000}`))
	asked := waitState(t, c, tk.ID, a2a.TaskStateInputRequired)
	if asked.Status.Message == nil || asked.Status.Message.Parts[0].Text() == "" {
		t.Fatal("input-required without a question")
	}
	ans := a2a.NewMessageForTask(a2a.MessageRoleUser, asked, a2a.NewTextPart("yes, verified by phone"))
	if _, err := c.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: ans, Config: &a2a.SendMessageConfig{ReturnImmediately: true}}); err != nil {
		t.Fatalf("answer: %v", err)
	}
	waitState(t, c, tk.ID, a2a.TaskStateCompleted)
}

func TestHTTPAgentCancelAndUnresponsive(t *testing.T) {
	a, c := httpAgent(t, HTTPConfig{Misbehave: map[string]string{"c-s": ModeSilent, "c-u": ModeUnresponsive}}, a2a.TransportProtocolJSONRPC)
	tk := send(t, c, briefMessage(t, "tsk-4", `{"case_id":"c-s","amount_cents":100}`))
	got, err := c.CancelTask(context.Background(), &a2a.CancelTaskRequest{ID: tk.ID})
	if err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("CancelTask: %v, %+v; want canceled", err, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: briefMessage(t, "tsk-5", `{"case_id":"c-u","amount_cents":100}`),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err == nil {
		t.Fatal("an unresponsive agent answered SendMessage")
	}
	if n := a.Stats().ByA2ADTask["tsk-5"]; n != 1 {
		t.Fatalf("unresponsive agent got %d briefs of tsk-5, want 1", n)
	}
}
