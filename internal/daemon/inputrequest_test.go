package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A retry of an input request that lacks the response asked for — no
// inputResponses, one under another key, or an accepted one whose answer
// is missing, not a string, blank or under "Answer" — gets the input request again
// with a fresh request state (SEP-2322), and nothing reaches the agent;
// the retry with the answer completes the task.
func TestMissingInputResponseAsksAgain(t *testing.T) {
	p := startIDP(t)
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true}, // the test drives the retries itself
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(p.sign(t, claims("alice", "default", "a2a:read a2a:delegate")))}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-97", 125000))})
	if err != nil || res.IsError || res.RequestState == "" || res.InputRequests[mcpedge.AnswerInput] == nil {
		t.Fatalf("want an input request: %v %+v", err, res)
	}
	state := res.RequestState
	accept := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}
	for name, responses := range map[string]mcp.InputResponseMap{
		"no inputResponses":  nil,
		"another key":        {"reply": accept},
		"accept, content {}": {mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}},
		"accept, answer 42":  {mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": 42}}},
		"accept, blank":      {mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "   "}}},
		"accept, Answer":     {mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"Answer": "yes"}}},
	} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-97", 125000)),
			InputResponses: responses, RequestState: state})
		if err != nil || r.IsError || r.RequestState == "" || r.InputRequests[mcpedge.AnswerInput] == nil {
			t.Fatalf("%s: %v %+v, want the input request again", name, err, r)
		}
		if ask, ok := r.InputRequests[mcpedge.AnswerInput].(*mcp.ElicitParams); !ok || ask.RequestedSchema == nil {
			t.Errorf("%s: input request %+v, want the answer form", name, r.InputRequests[mcpedge.AnswerInput])
		}
		state = r.RequestState
	}
	rec, _ := p.s.d.Service.Tasks.List(ctx)
	if len(rec) != 1 || rec[0].State != "input-required" || rec[0].Turns != 1 {
		t.Fatalf("tasks %+v, want one, still input-required at turn 1", rec)
	}
	if n := p.s.agent.Stats(); n.BriefsReceived != 1 {
		t.Errorf("agent briefs %d, want 1: a retry without an answer sends nothing", n.BriefsReceived)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence("C-97", 125000)),
		InputResponses: mcp.InputResponseMap{mcpedge.AnswerInput: accept}, RequestState: state})
	if err != nil || r.IsError || r.StructuredContent.(map[string]any)["state"] != "completed" {
		t.Fatalf("retry with the answer: %v %+v", err, r)
	}
}

// A request state is good only for the retry of the call it came with:
// sent with another tool (task_get, task_respond), or with task_get for
// another task, it is refused with JSON-RPC -32602 in a2ad's words, and
// the question is not answered; the retry of the call it came with still
// works.
func TestRequestStateOfAnotherCallIsRefused(t *testing.T) {
	p := startIDP(t)
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(p.sign(t, claims("alice", "default", "a2a:read a2a:delegate")))}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := delegateArgs(evidence("C-973", 125000))
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args})
	if err != nil || res.RequestState == "" {
		t.Fatalf("want an input request: %v %+v", err, res)
	}
	taskID, _ := p.s.d.Service.Tasks.List(ctx)
	accept := mcp.InputResponseMap{mcpedge.AnswerInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}}
	for name, params := range map[string]*mcp.CallToolParams{
		"task_get, another task": {Name: "task_get", Arguments: map[string]any{"task_id": "tsk-000000000000000000000000"}},
		"task_get, its own task": {Name: "task_get", Arguments: map[string]any{"task_id": taskID[0].ID}},
		"task_respond":           {Name: "task_respond", Arguments: map[string]any{"task_id": taskID[0].ID, "answer": "yes"}},
	} {
		params.RequestState, params.InputResponses = res.RequestState, accept
		_, err := cs.CallTool(ctx, params)
		want := "requestState not valid for this call: a2ad issued it for another tool call or another task, not this " + params.Name +
			" call; send it only with the retry of the call it came with, or call " + params.Name + " again without requestState and inputResponses"
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || we.Message != want {
			t.Errorf("%s: error %v, want -32602 %q", name, err, want)
		}
	}
	if rec, _ := p.s.d.Service.Tasks.List(ctx); rec[0].State != "input-required" || rec[0].Turns != 1 {
		t.Fatalf("task %s at turn %d, want still input-required at turn 1: a foreign state answers nothing", rec[0].State, rec[0].Turns)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: args, InputResponses: accept, RequestState: res.RequestState})
	if err != nil || r.IsError || r.StructuredContent.(map[string]any)["state"] != "completed" {
		t.Fatalf("retry of the call the state came with: %v %+v", err, r)
	}
}

// Progress on one call increases strictly across its input request: the
// retry (performed by the go-sdk, as elicitation for a 2025-11-25 host or
// as a retry with the same progress token for a 2026-07-28 one) counts on
// from the last value the first round sent.
func TestProgressIncreasesAcrossInputRequest(t *testing.T) {
	p := startIDP(t)
	token := p.sign(t, claims("host", "default", "a2a:read a2a:delegate"))
	for i, era := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(era, func(t *testing.T) {
			var mu sync.Mutex
			var progress []float64
			var messages []string
			client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
				},
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					defer mu.Unlock()
					if r.Params.ProgressToken == "call-1" {
						progress = append(progress, r.Params.Progress)
						messages = append(messages, r.Params.Message)
					}
				},
			})
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.s.d.HTTPURL + "/mcp",
				HTTPClient: mcpedge.BearerClient(token)}, &mcp.ClientSessionOptions{ProtocolVersion: era})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			params := &mcp.CallToolParams{Name: "delegate", Arguments: delegateArgs(evidence(fmt.Sprintf("C-8%d", 7+i), 125000))}
			params.SetProgressToken("call-1")
			res, err := cs.CallTool(context.Background(), params)
			if err != nil || res.IsError || res.StructuredContent.(map[string]any)["state"] != "completed" {
				t.Fatalf("delegate: %v %+v", err, res)
			}
			// The client may run the last progress handlers after CallTool
			// returned (1 run in 4 it had not run them yet).
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				done := len(messages) > 0 && messages[len(messages)-1] == "state: completed"
				mu.Unlock()
				if done {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			asked := -1
			for j, m := range messages {
				if m == "state: input-required — question pending" && asked < 0 {
					asked = j
				}
			}
			if asked < 0 || asked == len(messages)-1 || messages[len(messages)-1] != "state: completed" {
				t.Fatalf("progress messages %q: want the question, then more, ending completed", messages)
			}
			for j := 1; j < len(progress); j++ {
				if progress[j] <= progress[j-1] {
					t.Fatalf("progress %v (messages %q): value %d does not increase", progress, messages, j)
				}
			}
		})
	}
}
