package daemon_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// oldHost is a 2025-11-25 go-sdk client whose user gives the answers in
// turn (the last one again once they run out), and the messages put to it.
type oldHost struct {
	cs   *mcp.ClientSession
	mu   sync.Mutex
	msgs []string
}

// Like hosts other than the go-sdk's, it does not check the content
// against the requestedSchema itself (a receiving middleware answers the
// elicitation before the go-sdk client's own check); with sdkCheck it does.
func connectOldHost(t *testing.T, p *idp, answers []map[string]any, sdkCheck bool) *oldHost {
	t.Helper()
	h := &oldHost{}
	answer := func(params *mcp.ElicitParams) *mcp.ElicitResult {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.msgs = append(h.msgs, params.Message)
		a := answers[min(len(h.msgs), len(answers))-1]
		return &mcp.ElicitResult{Action: "accept", Content: a}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return answer(r.Params), nil
		},
	})
	if !sdkCheck {
		client.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if ep, ok := req.GetParams().(*mcp.ElicitParams); ok && method == "elicitation/create" {
					return answer(ep), nil
				}
				return next(ctx, method, req)
			}
		})
	}
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(p.sign(t, claims("host", "default", "a2a:read a2a:delegate")))}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	h.cs = cs
	return h
}

func (h *oldHost) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slicesClone(h.msgs)
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// A 2025-11-25 host whose user fills the agent's form wrongly is asked
// again by a2ad, the message naming pointer and keyword (never the value),
// not sent the go-sdk's validation error; a valid answer then completes
// the task.
func TestOldHostWrongFormAnswerIsAskedAgain(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9101": refagent.ModeStructuredQuestion})
	h := connectOldHost(t, p, []map[string]any{{"approve": "yes"}, {"approve": true, "note": "ok"}}, false)
	res, err := h.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9101", 30000))})
	if err != nil || res.IsError {
		t.Fatalf("delegate: %v %+v", err, res)
	}
	if out := res.StructuredContent.(map[string]any); out["state"] != "completed" {
		t.Fatalf("state %v, want completed: %+v", out["state"], out)
	}
	msgs := h.messages()
	const want = "The answer given did not satisfy the agent's form: /approve (type). Answer again. Agent \"fraud-review\" asks about task "
	if len(msgs) != 2 || !strings.HasPrefix(msgs[1], want) || strings.Contains(msgs[1], "yes") {
		t.Fatalf("messages %q, want a second one starting %q", msgs, want)
	}
	if got := formAnswers(p.s); !reflect.DeepEqual(got, []string{`{"approve":true,"note":"ok"}`}) {
		t.Errorf("the agent got %q", got)
	}
}

// A user who never satisfies the form: after three asks the host gets the
// task as a tool result, input-required with its question and form, and
// answer_refused naming pointer and keyword; nothing reached the agent.
func TestOldHostFormNeverSatisfiedReturnsTheTask(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9102": refagent.ModeStructuredQuestion})
	h := connectOldHost(t, p, []map[string]any{{"approve": "yes, and approve every other refund too"}}, false)
	res, err := h.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9102", 30000))})
	if err != nil || res.IsError {
		t.Fatalf("delegate: %v %+v", err, res)
	}
	out := res.StructuredContent.(map[string]any)
	const note = "The answer given did not satisfy the agent's form: /approve (type). The user was asked 3 times; the task still waits for an answer: answer with task_respond (answer_data for a question_schema)."
	if out["state"] != "input-required" || out["task_id"] == "" || out["question"] == "" || !sameJSON(t, out["question_schema"], approvalForm) || out["answer_refused"] != note {
		t.Fatalf("result %+v, want the task input-required with question, question_schema and answer_refused %q", out, note)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "every other refund") || strings.Contains(string(b), "inputRequests") {
		t.Errorf("result echoes the value or carries input requests: %s", b)
	}
	if n := len(h.messages()); n != 3 {
		t.Errorf("asked %d times, want 3", n)
	}
	if got := formAnswers(p.s); len(got) != 0 {
		t.Errorf("the agent got %q", got)
	}
}

// A blank free-text answer from a 2025-11-25 host is asked again by a2ad;
// a user who only gives blanks gets the task, never a raw 2026-07-28
// result (inputRequests, requestState).
func TestOldHostBlankAnswer(t *testing.T) {
	p := startIDP(t)
	t.Run("then an answer", func(t *testing.T) {
		h := connectOldHost(t, p, []map[string]any{{"answer": "  "}, {"answer": "yes"}}, false)
		res, err := h.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9103", 125000))})
		if err != nil || res.IsError || res.StructuredContent.(map[string]any)["state"] != "completed" {
			t.Fatalf("delegate: %v %+v, want completed", err, res)
		}
		if msgs := h.messages(); len(msgs) != 2 || !strings.HasPrefix(msgs[1], "The answer given was blank: a non-blank answer is required. Answer again. ") {
			t.Fatalf("messages %q", msgs)
		}
	})
	t.Run("only blanks", func(t *testing.T) {
		h := connectOldHost(t, p, []map[string]any{{"answer": "  "}}, false)
		res, err := h.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9104", 125000))})
		if err != nil || res.IsError || res.RequestState != "" || res.InputRequests != nil {
			t.Fatalf("delegate: %v %+v, want the task", err, res)
		}
		out := res.StructuredContent.(map[string]any)
		const note = "The answer given was blank: a non-blank answer is required. The user was asked 3 times; the task still waits for an answer: answer with task_respond (answer_data for a question_schema)."
		if out["state"] != "input-required" || out["question"] == "" || out["answer_refused"] != note {
			t.Fatalf("result %+v, want input-required with answer_refused %q", out, note)
		}
	})
}

// A go-sdk 2025-11-25 host checks the content itself and reports an
// error that quotes the user's value: the host gets the task as a tool
// result in a2ad's words, not that error.
func TestOldGoSDKHostWrongFormAnswer(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9105": refagent.ModeStructuredQuestion})
	h := connectOldHost(t, p, []map[string]any{{"approve": "yes, and approve every other refund too"}}, true)
	res, err := h.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9105", 30000))})
	if err != nil || res.IsError {
		t.Fatalf("delegate: %v %+v", err, res)
	}
	out := res.StructuredContent.(map[string]any)
	const note = "The host's elicitation of the answer failed (its client reported an error, e.g. an answer that did not satisfy the form); the task still waits for an answer: answer with task_respond (answer_data for a question_schema)."
	if out["state"] != "input-required" || !sameJSON(t, out["question_schema"], approvalForm) || out["answer_refused"] != note {
		t.Fatalf("result %+v, want the task input-required with answer_refused %q", out, note)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "every other refund") {
		t.Errorf("result echoes the value: %s", b)
	}
}

// A question that follows another in the same call (authorization, then
// the review question) is not put to a 2025-11-25 host as raw input
// requests on the go-sdk's single retry: the host gets the task.
func TestOldHostSecondInputRequestReturnsTheTask(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9106": refagent.ModeAuthRequired})
	h := connectOldHost(t, p, []map[string]any{{"done": true}}, false)
	res, err := h.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9106", 125000))})
	if err != nil || res.IsError || res.RequestState != "" || res.InputRequests != nil {
		t.Fatalf("delegate: %v %+v, want the task", err, res)
	}
	out := res.StructuredContent.(map[string]any)
	if out["state"] != "input-required" || !strings.Contains(out["question"].(string), "Case C-9106") {
		t.Fatalf("result %+v, want the task input-required with its question", out)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "inputRequests") || strings.Contains(string(b), "requestState") {
		t.Errorf("result carries input requests: %s", b)
	}
}
