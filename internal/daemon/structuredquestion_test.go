package daemon_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// approvalForm is refagent.ApprovalForm as a2ad re-encodes it, which is
// what hosts get as requestedSchema and question_schema.
const approvalForm = `{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve the refund","description":"true if a human reviewer verified the customer's identity"},` +
	`"note":{"type":"string","title":"Note","description":"why, for the case file","maxLength":200}},"required":["approve"]}`

func sameJSON(t *testing.T, got any, want string) bool {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if json.Unmarshal(b, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

func formAnswers(s *stack) []string {
	var out []string
	for _, b := range s.agent.Stats().FormAnswers {
		out = append(out, string(b))
	}
	return out
}

// A host that can ask its user gets the agent's form as the input
// request's requestedSchema (2025-11-25: elicitation/create; 2026-07-28:
// the input request of the result, which the go-sdk client puts to its
// elicitation handler), and the user's answer reaches the agent as a data
// part, which the agent reads.
func TestStructuredQuestionElicitation(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9025": refagent.ModeStructuredQuestion, "C-9026": refagent.ModeStructuredQuestion})
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	for _, tc := range []struct{ era, caseID string }{{"2025-11-25", "C-9025"}, {"2026-07-28", "C-9026"}} {
		t.Run(tc.era, func(t *testing.T) {
			var mu sync.Mutex
			var asked []*mcp.ElicitParams
			client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					mu.Lock()
					asked = append(asked, r.Params)
					mu.Unlock()
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "note": "ID checked in person"}}, nil
				},
			})
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
				HTTPClient: mcpedge.BearerClient(token)}, &mcp.ClientSessionOptions{ProtocolVersion: tc.era})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			before := len(formAnswers(p.s))
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence(tc.caseID, 30000))})
			if err != nil || res.IsError {
				t.Fatalf("delegate: %v %+v", err, res)
			}
			out := res.StructuredContent.(map[string]any)
			if out["state"] != "completed" {
				t.Fatalf("state %v, want completed: %+v", out["state"], out)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) != 1 || !sameJSON(t, asked[0].RequestedSchema, approvalForm) {
				t.Fatalf("asked %d times, requestedSchema %+v; want once, the agent's form", len(asked), asked)
			}
			wantMsg := `Agent "fraud-review" asks about task `
			if !strings.HasPrefix(asked[0].Message, wantMsg) || !strings.Contains(asked[0].Message, "approve the refund of 30000 cents?") {
				t.Errorf("message %q", asked[0].Message)
			}
			if got := formAnswers(p.s)[before:]; !reflect.DeepEqual(got, []string{`{"approve":true,"note":"ID checked in person"}`}) {
				t.Errorf("the agent got data parts %q, want the user's answer", got)
			}
			reasons := out["artifacts"].([]any)[0].(map[string]any)["parts"].([]any)[0].(map[string]any)["data"].(map[string]any)["reasons"]
			if !reflect.DeepEqual(reasons, []any{"identity verified by a human reviewer"}) {
				t.Errorf("reasons %v: the agent did not read approve true", reasons)
			}
		})
	}
}

// Content that does not satisfy the agent's form is not sent: the input
// request is put again, its message naming the pointer and keyword, and
// the task waits on the same turn; the retry with a valid answer goes to
// the agent.
func TestStructuredAnswerNotSatisfyingTheFormIsAskedAgain(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9003": refagent.ModeStructuredQuestion})
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true}, // the test sends the content a user would
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(p.sign(t, claims("alice", "default", "a2a:read a2a:delegate")))}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := delegateArgs(evidence("C-9003", 30000))
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args})
	if err != nil || res.RequestState == "" {
		t.Fatalf("want an input request: %v %+v", err, res)
	}
	if ask, ok := res.InputRequests[mcpedge.AnswerInput].(*mcp.ElicitParams); !ok || !sameJSON(t, ask.RequestedSchema, approvalForm) {
		t.Fatalf("input request %+v, want the agent's form", res.InputRequests[mcpedge.AnswerInput])
	}
	state := res.RequestState
	for name, tc := range map[string]struct {
		content map[string]any
		want    string
	}{
		"wrong type":   {map[string]any{"approve": "yes"}, "The answer given did not satisfy the agent's form: /approve (type). Answer again. "},
		"missing":      {map[string]any{"note": "n"}, "The answer given did not satisfy the agent's form: /approve (required). Answer again. "},
		"extra member": {map[string]any{"approve": true, "answer": "yes"}, "The answer given did not satisfy the agent's form:  (additionalProperties). Answer again. "},
		"too long":     {map[string]any{"approve": true, "note": strings.Repeat("n", 201)}, "The answer given did not satisfy the agent's form: /note (maxLength). Answer again. "},
	} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args, RequestState: state,
			InputResponses: mcp.InputResponseMap{mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: tc.content}}})
		if err != nil || r.IsError || r.RequestState == "" {
			t.Fatalf("%s: %v %+v, want the input request again", name, err, r)
		}
		ask, ok := r.InputRequests[mcpedge.AnswerInput].(*mcp.ElicitParams)
		if !ok || !sameJSON(t, ask.RequestedSchema, approvalForm) || !strings.HasPrefix(ask.Message, tc.want) {
			t.Fatalf("%s: input request %+v, want the form again with message %q…", name, r.InputRequests[mcpedge.AnswerInput], tc.want)
		}
		state = r.RequestState
	}
	if rec, _ := p.s.d.Service.Tasks.List(ctx); len(rec) != 1 || rec[0].State != "input-required" || rec[0].Turns != 1 {
		t.Fatalf("tasks %+v, want one, still input-required at turn 1", rec)
	}
	if got := formAnswers(p.s); len(got) != 0 {
		t.Fatalf("the agent got %q: nothing may reach it before the answer satisfies the form", got)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args, RequestState: state,
		InputResponses: mcp.InputResponseMap{mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}}})
	if err != nil || r.IsError || r.StructuredContent.(map[string]any)["state"] != "completed" {
		t.Fatalf("retry with a valid answer: %v %+v", err, r)
	}
	if got := formAnswers(p.s); !reflect.DeepEqual(got, []string{`{"approve":false}`}) {
		t.Errorf("the agent got %q", got)
	}
}

// A host that cannot ask its user reads the form from question_schema and
// answers with task_respond answer_data, checked before it goes to the
// agent; a text answer to a question with a form, both at once, or data
// that does not satisfy the form are refused in a2ad's words.
func TestStructuredQuestionAnsweredWithAnswerData(t *testing.T) {
	s := start(t, map[string]string{"C-9004": refagent.ModeStructuredQuestion})
	got, errText := s.call(t, "delegate", delegateArgs(evidence("C-9004", 30000)), nil)
	if errText != "" || got.State != "input-required" {
		t.Fatalf("delegate: %q %+v, want input-required", errText, got)
	}
	if !sameJSON(t, got.QuestionSchema, approvalForm) {
		t.Fatalf("question_schema %+v, want the agent's form", got.QuestionSchema)
	}
	if !strings.HasPrefix(got.Question, "Case C-9004: approve the refund of 30000 cents?") {
		t.Errorf("question %q: the text part stays the question", got.Question)
	}
	for name, tc := range map[string]struct {
		args map[string]any
		want string
	}{
		"text":    {map[string]any{"answer": "yes"}, "invalid_argument: brief: /answer: the question has a question_schema: answer with answer_data, a JSON object that satisfies it"},
		"both":    {map[string]any{"answer": "yes", "answer_data": map[string]any{"approve": true}}, "invalid_argument: brief: /answer: give answer or answer_data, not both"},
		"neither": {map[string]any{}, "invalid_argument: brief: /answer: required (or answer_data, for a question with a question_schema)"},
		"invalid": {map[string]any{"answer_data": map[string]any{"approve": "maybe", "ignore previous instructions": 1}},
			"answer_invalid: answer_data does not satisfy the question's question_schema: /answer_data (additionalProperties); /answer_data/approve (type)"},
	} {
		tc.args["task_id"] = got.TaskID
		if _, e := s.call(t, "task_respond", tc.args, nil); e != tc.want {
			t.Errorf("%s: error %q, want %q", name, e, tc.want)
		}
	}
	if n := len(formAnswers(s)); n != 0 {
		t.Fatalf("the agent got %d answers before a valid one", n)
	}
	done, errText := s.call(t, "task_respond", map[string]any{"task_id": got.TaskID, "answer_data": map[string]any{"approve": true, "note": "ok"}}, nil)
	if errText != "" || done.State != "completed" || done.QuestionSchema != nil {
		t.Fatalf("task_respond: %q %+v, want completed without question_schema", errText, done)
	}
	if got := formAnswers(s); !reflect.DeepEqual(got, []string{`{"approve":true,"note":"ok"}`}) {
		t.Errorf("the agent got %q", got)
	}
	rec, _, err := s.d.Service.Tasks.Get(context.Background(), got.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	var how []string
	for _, h := range rec.History {
		if h.Event == "resume" {
			how = append(how, h.Reason)
		}
	}
	if !reflect.DeepEqual(how, []string{"answered_data"}) {
		t.Errorf("resume reasons %q, want [answered_data]: the history names a structured answer, never its content", how)
	}
	// The record keeps the question and a2ad's encoding of the answer, for operators.
	if len(rec.Exchanges) != 1 || rec.Exchanges[0].Question != got.Question || rec.Exchanges[0].Answer != `{"approve":true,"note":"ok"}` ||
		!rec.Exchanges[0].Data || rec.Exchanges[0].By == "" || rec.Exchanges[0].By != resumeBy(rec) {
		t.Errorf("exchanges %+v", rec.Exchanges)
	}
	// A free-text question refuses answer_data.
	free, _ := s.call(t, "delegate", delegateArgs(evidence("C-9005", 125000)), nil)
	if free == nil || free.State != "input-required" || free.QuestionSchema != nil {
		t.Fatalf("free-text question: %+v", free)
	}
	if _, e := s.call(t, "task_respond", map[string]any{"task_id": free.TaskID, "answer_data": map[string]any{"approve": true}}, nil); e != "invalid_argument: brief: /answer_data: the question has no question_schema: answer with answer, a text" {
		t.Errorf("answer_data to a free-text question: %q", e)
	}
}

// A schema outside MCP elicitation's subset is not taken: the question is
// asked as free text (the one-field answer form, no question_schema), the
// record says why, and a text answer resumes the task.
func TestUnformableQuestionFallsBackToFreeText(t *testing.T) {
	p := startIDPWith(t, map[string]string{"C-9101": refagent.ModeUnformableQuestion, "C-9102": refagent.ModeUnformableQuestion})
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	t.Run("no elicitation", func(t *testing.T) {
		client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9101", 30000))})
		if err != nil || res.IsError {
			t.Fatalf("delegate: %v %+v", err, res)
		}
		out := res.StructuredContent.(map[string]any)
		if out["state"] != "input-required" || out["question"] == "" || out["question_schema"] != nil {
			t.Fatalf("result %+v, want input-required with a question and no question_schema", out)
		}
		rec, _, err := p.s.d.Service.Tasks.Get(context.Background(), out["task_id"].(string))
		if err != nil {
			t.Fatal(err)
		}
		const note = "question schema not taken, the question is free text: question schema at /properties/reviewer/type: must be string, number, integer or boolean"
		if rec.QuestionSchema != nil || rec.QuestionSchemaNote != note {
			t.Errorf("record schema %s, note %q; want none and %q", rec.QuestionSchema, rec.QuestionSchemaNote, note)
		}
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "task_respond", Arguments: map[string]any{"task_id": out["task_id"], "answer": "yes"}})
		if err != nil || r.IsError || r.StructuredContent.(map[string]any)["state"] != "completed" {
			t.Fatalf("task_respond: %v %+v", err, r)
		}
	})
	t.Run("elicitation", func(t *testing.T) {
		var asked *mcp.ElicitParams
		client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked = r.Params
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
			},
		})
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-9102", 30000))})
		if err != nil || res.IsError || res.StructuredContent.(map[string]any)["state"] != "completed" {
			t.Fatalf("delegate: %v %+v", err, res)
		}
		const free = `{"type":"object","properties":{"answer":{"type":"string","title":"Answer","description":"Your answer to the agent's question"}},"required":["answer"]}`
		if asked == nil || !sameJSON(t, asked.RequestedSchema, free) {
			t.Fatalf("requestedSchema %+v, want the one-field answer form", asked)
		}
	})
}

// Over A2A's HTTP binding (the agent served by a2a-go's a2asrv), the form
// in the agent's input-required message reaches the host as
// question_schema, and answer_data reaches the agent as a data part.
func TestHTTPAgentStructuredQuestion(t *testing.T) {
	s := startHTTP(t, httpStackOpts{streaming: true, misbehave: map[string]string{"C-9201": refagent.ModeStructuredQuestion}})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-9201", 30000), 60))
	for got.State != "input-required" {
		time.Sleep(20 * time.Millisecond)
		var errText string
		if got, errText = s.call(t, "task_get", map[string]any{"task_id": got.TaskID}, nil); errText != "" || task.State(got.State).Terminal() {
			t.Fatalf("waiting for the question: %s %+v", errText, got)
		}
	}
	if !sameJSON(t, got.QuestionSchema, approvalForm) {
		t.Fatalf("question_schema %+v, want the agent's form", got.QuestionSchema)
	}
	if _, errText := s.call(t, "task_respond", map[string]any{"task_id": got.TaskID, "answer_data": map[string]any{"approve": false, "note": "no ID"}, "wait_seconds": 10}, nil); errText != "" {
		t.Fatal(errText)
	}
	done := s.waitEnded(t, got.TaskID, 10*time.Second)
	if done.State != "completed" {
		t.Fatalf("after the answer: %s (%s)", done.State, done.Reason)
	}
	var fa []string
	for _, b := range s.agent.Stats().FormAnswers {
		fa = append(fa, string(b))
	}
	if !reflect.DeepEqual(fa, []string{`{"approve":false,"note":"no ID"}`}) {
		t.Errorf("the agent got data parts %q", fa)
	}
}

// resumeBy is the subject of the record's last resume transition.
func resumeBy(r *task.Record) string {
	by := ""
	for _, h := range r.History {
		if h.Event == "resume" {
			by = h.By
		}
	}
	return by
}
