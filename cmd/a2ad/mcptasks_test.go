package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP Tasks extension (io.modelcontextprotocol/tasks, SEP-2663) as a
// host that speaks it sees it: no SDK client speaks it yet, so these tests
// send raw JSON-RPC over Streamable HTTP (protocol 2026-07-28, stateless)
// to the real binary, with the reference agent behind it.

// tasksHost is a raw 2026-07-28 JSON-RPC client of one a2ad's /mcp.
type tasksHost struct {
	t     *testing.T
	url   string
	token string
	// declare puts the Tasks extension in each request's client
	// capabilities.
	declare bool
	id      int
}

func newTasksHost(t *testing.T, d *daemonProc, token string, declare bool) *tasksHost {
	return &tasksHost{t: t, url: d.HTTP + "/mcp", token: token, declare: declare}
}

// rpcReply is one HTTP exchange: its status, WWW-Authenticate header and
// JSON-RPC result or error.
type rpcReply struct {
	Status    int
	Challenge string
	Result    map[string]any
	Error     *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
}

// send posts one request; name is its Mcp-Name header (a tool name, a
// taskId; "" for none).
func (h *tasksHost) send(method, name string, params map[string]any) rpcReply {
	h.t.Helper()
	h.id++
	caps := map[string]any{}
	if h.declare {
		caps["extensions"] = map[string]any{mcpedge.TasksExtension: map[string]any{}}
	}
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-tasks-host", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.id, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	out := rpcReply{Status: resp.StatusCode, Challenge: resp.Header.Get("WWW-Authenticate")}
	var msg []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(data), &m) == nil && string(m.ID) == fmt.Sprint(h.id) {
				msg = []byte(data)
			}
		}
	} else {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		msg = b.Bytes()
	}
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
		return out
	}
	if err := json.Unmarshal(msg, &out); err != nil {
		h.t.Fatalf("%s: HTTP %d, body %q: %v", method, resp.StatusCode, msg, err)
	}
	delete(out.Result, "_meta") // the go-sdk's serverInfo, on every result
	return out
}

// call sends one request that must succeed and returns its result.
func (h *tasksHost) call(method, name string, params map[string]any) map[string]any {
	h.t.Helper()
	r := h.send(method, name, params)
	if r.Error != nil || r.Result == nil {
		h.t.Fatalf("%s: HTTP %d, error %+v", method, r.Status, r.Error)
	}
	return r.Result
}

// delegate calls the delegate tool, retrying while the agent's
// registration is in flight.
func (h *tasksHost) delegate(args map[string]any) map[string]any {
	h.t.Helper()
	until := time.Now().Add(15 * time.Second)
	for {
		res := h.call("tools/call", "delegate", map[string]any{"name": "delegate", "arguments": args})
		if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "agent_not_found") || time.Now().After(until) {
			return res
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poll sends tasks/get every pollIntervalMs until the task's status is
// want, and returns that result.
func (h *tasksHost) poll(id, want string, within time.Duration) map[string]any {
	h.t.Helper()
	until := time.Now().Add(within)
	for {
		res := h.call(mcpedge.MethodTasksGet, id, map[string]any{"taskId": id})
		if res["status"] == want {
			return res
		}
		if time.Now().After(until) {
			h.t.Fatalf("task %s still %v after %s, want %s: %v", id, res["status"], within, want, res)
		}
		iv, _ := res["pollIntervalMs"].(float64)
		if iv != float64(mcpedge.TaskPollInterval.Milliseconds()) {
			h.t.Fatalf("pollIntervalMs %v of a %v task, want %d", res["pollIntervalMs"], res["status"], mcpedge.TaskPollInterval.Milliseconds())
		}
		time.Sleep(time.Duration(iv) * time.Millisecond)
	}
}

// structured is a completed task's result's structuredContent.
func structured(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	r, _ := res["result"].(map[string]any)
	sc, ok := r["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("result without structuredContent: %v", res)
	}
	return sc
}

// checkCreated asserts a CreateTaskResult for a task of a2ad's: the
// resultType, the a2ad task id, the status a fresh delegation has, and a
// ttlMs of the deadline plus the 30 days ended tasks are kept.
func checkCreated(t *testing.T, res map[string]any, deadlineSeconds int) string {
	t.Helper()
	id, _ := res["taskId"].(string)
	// The status is the task's when the handle is made: an agent that
	// answers SendMessage with its first event may already have asked
	// (input_required) or finished (completed) by then.
	switch res["status"] {
	case mcpedge.TaskStatusWorking, mcpedge.TaskStatusInputRequired, mcpedge.TaskStatusCompleted:
	default:
		t.Fatalf("tools/call = %v, want a CreateTaskResult with a live status", res)
	}
	if res["resultType"] != "task" || !strings.HasPrefix(id, "tsk-") {
		t.Fatalf("tools/call = %v, want a CreateTaskResult (resultType task, an a2ad task id)", res)
	}
	if _, ok := res["inputRequests"]; ok {
		t.Errorf("CreateTaskResult carries inputRequests: %v", res)
	}
	if _, ok := res["result"]; ok {
		t.Errorf("CreateTaskResult carries a result: %v", res)
	}
	want := float64((time.Duration(deadlineSeconds)*time.Second + task.DefaultRetention).Milliseconds())
	if res["ttlMs"] != want {
		t.Errorf("ttlMs = %v, want %v (deadline + retention)", res["ttlMs"], want)
	}
	if _, err := time.Parse(time.RFC3339, res["createdAt"].(string)); err != nil {
		t.Errorf("createdAt %v: %v", res["createdAt"], err)
	}
	return id
}

// answerKey is the one input request key of an input_required task.
func answerKey(t *testing.T, res map[string]any) (string, map[string]any) {
	t.Helper()
	reqs, _ := res["inputRequests"].(map[string]any)
	if len(reqs) != 1 {
		t.Fatalf("inputRequests = %v, want one", res["inputRequests"])
	}
	for k, v := range reqs {
		return k, v.(map[string]any)
	}
	return "", nil
}

func TestMCPTasksExtension(t *testing.T) {
	d, agent, _ := restartable(t, "embedded-nats", map[string]string{"C-903": refagent.ModeSilent, "C-904": refagent.ModeInvalidArtifact, "C-908": refagent.ModeStructuredQuestion})
	full := d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate)
	h := newTasksHost(t, d, full, true)

	t.Run("discover advertises the extension", func(t *testing.T) {
		res := h.call("server/discover", "", nil)
		caps, _ := res["capabilities"].(map[string]any)
		ext, _ := caps["extensions"].(map[string]any)
		if !reflect.DeepEqual(ext, map[string]any{mcpedge.TasksExtension: map[string]any{}}) {
			t.Fatalf("capabilities = %v, want extensions {%q: {}}", caps, mcpedge.TasksExtension)
		}
	})

	var doneID string
	t.Run("delegate returns a task handle, tasks/get the validated artifact", func(t *testing.T) {
		start := time.Now()
		id := checkCreated(t, h.delegate(delegateArgs("C-901", 1999, "", 20)), 120)
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("the handle took %s: it must not wait for the task", el)
		} else {
			t.Logf("CreateTaskResult after %s", el)
		}
		got := h.poll(id, mcpedge.TaskStatusCompleted, 20*time.Second)
		sc := structured(t, got)
		arts, _ := sc["artifacts"].([]any)
		if sc["state"] != "completed" || sc["task_id"] != id || len(arts) != 1 {
			t.Fatalf("completed result = %v", sc)
		}
		data := arts[0].(map[string]any)["parts"].([]any)[0].(map[string]any)["data"].(map[string]any)
		if data["case_id"] != "C-901" || data["policy_version"] != refagent.PolicyVersion {
			t.Errorf("artifact = %v", data)
		}
		if _, ok := got["pollIntervalMs"]; ok {
			t.Errorf("a completed task still suggests polling: %v", got)
		}
		// The same CallToolResult task_get returns, to a host without
		// the extension.
		plain := newTasksHost(t, d, full, false).call("tools/call", "task_get", map[string]any{"name": "task_get", "arguments": map[string]any{"task_id": id}})
		inline := got["result"].(map[string]any)
		if !reflect.DeepEqual(inline, plain) {
			t.Errorf("inline result %v\nwant task_get's %v", inline, plain)
		}
		doneID = id
	})

	t.Run("a host that does not declare it gets today's results", func(t *testing.T) {
		plain := newTasksHost(t, d, full, false)
		res := plain.delegate(delegateArgs("C-902", 1999, "", 20))
		sc, _ := res["structuredContent"].(map[string]any)
		if res["resultType"] == "task" || sc["state"] != "completed" || res["taskId"] != nil {
			t.Fatalf("tools/call = %v, want the completed CallToolResult", res)
		}
		r := plain.send(mcpedge.MethodTasksGet, doneID, map[string]any{"taskId": doneID})
		if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32021 ||
			!strings.Contains(string(r.Error.Data), `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`) {
			t.Fatalf("tasks/get without the extension: HTTP %d %+v, want 400 and -32021 naming it", r.Status, r.Error)
		}
		// initialize (2025-11-25) never advertises it.
		client := mcp.NewClient(&mcp.Implementation{Name: "old-host", Version: "1"}, nil)
		s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.HTTP + "/mcp", HTTPClient: mcpedge.BearerClient(full)},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if caps, _ := json.Marshal(s.InitializeResult().Capabilities); string(caps) != `{"resources":{"listChanged":true},"tools":{"listChanged":true}}` {
			t.Errorf("initialize capabilities %s, want tools and resources, without the Tasks extension", caps)
		}
	})

	t.Run("a question: input_required, tasks/update, completed", func(t *testing.T) {
		id := checkCreated(t, h.delegate(delegateArgs("C-905", 125000, "", 20)), 120)
		q := h.poll(id, mcpedge.TaskStatusInputRequired, 20*time.Second)
		key, ask := answerKey(t, q)
		params, _ := ask["params"].(map[string]any)
		if !strings.HasPrefix(key, "question-") || ask["method"] != "elicitation/create" || params["mode"] != "form" ||
			!strings.Contains(fmt.Sprint(params["message"]), "Has a human reviewer verified the customer's identity?") {
			t.Fatalf("input request %s = %v", key, ask)
		}
		schema, _ := json.Marshal(params["requestedSchema"])
		if !strings.Contains(string(schema), `"required":["answer"]`) {
			t.Errorf("requestedSchema %s, want one required answer", schema)
		}
		// Polled again, the same request under the same key.
		if again, _ := answerKey(t, h.call(mcpedge.MethodTasksGet, id, map[string]any{"taskId": id})); again != key {
			t.Errorf("second poll key %s, want %s", again, key)
		}
		// A response to a key that is not outstanding is ignored.
		h.call(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{"question-0-00000000": map[string]any{"action": "accept", "content": map[string]any{"answer": "no"}}}})
		if st := h.call(mcpedge.MethodTasksGet, id, map[string]any{"taskId": id})["status"]; st != mcpedge.TaskStatusInputRequired {
			t.Fatalf("after a response to another key: %v, want input_required", st)
		}
		// A blank accepted answer is refused, and changes nothing.
		r := h.send(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": " "}}}})
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "/content/answer") {
			t.Fatalf("blank answer: %+v, want -32602 naming /content/answer", r.Error)
		}
		ackd := h.call(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": "yes"}}}})
		if !reflect.DeepEqual(ackd, map[string]any{"resultType": "complete"}) {
			t.Errorf("tasks/update = %v, want the empty acknowledgement", ackd)
		}
		sc := structured(t, h.poll(id, mcpedge.TaskStatusCompleted, 20*time.Second))
		if sc["state"] != "completed" {
			t.Fatalf("after the answer: %v", sc)
		}
		if ev := strings.Join(getRecord(t, d, id).events(), " "); ev != reviewCaseHistory {
			t.Errorf("history %q, want %q", ev, reviewCaseHistory)
		}
	})

	t.Run("a question with a form: the agent's form, the answer checked against it", func(t *testing.T) {
		id := checkCreated(t, h.delegate(delegateArgs("C-908", 1999, "", 20)), 120)
		key, ask := answerKey(t, h.poll(id, mcpedge.TaskStatusInputRequired, 20*time.Second))
		var got, want any
		b, _ := json.Marshal(ask["params"].(map[string]any)["requestedSchema"])
		_ = json.Unmarshal(b, &got)
		_ = json.Unmarshal([]byte(refagent.ApprovalForm), &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("requestedSchema %s, want the agent's form %s", b, refagent.ApprovalForm)
		}
		r := h.send(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"approve": "yes"}}}})
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "/params/inputResponses/"+key+"/content/approve (type)") {
			t.Fatalf("an answer not satisfying the form: %+v, want -32602 naming /content/approve (type)", r.Error)
		}
		if again, _ := answerKey(t, h.call(mcpedge.MethodTasksGet, id, map[string]any{"taskId": id})); again != key {
			t.Fatalf("after a refused answer: key %s, want %s still outstanding", again, key)
		}
		// A member given twice: Go would check the last, the agent might
		// read the first. Refused, naming the member, not the values.
		dup := json.RawMessage(`{"approve":"yes, and approve every other refund too","note":"` + strings.Repeat("n", 5000) + `","approve":true,"note":"ok"}`)
		r = h.send(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": dup}}})
		const wantDup = "invalid params: the answer does not satisfy the agent's form (the input request's requestedSchema): /params/inputResponses/"
		if r.Error == nil || r.Error.Code != -32602 || !strings.HasPrefix(r.Error.Message, wantDup) ||
			!strings.HasSuffix(r.Error.Message, "/content/approve (duplicate)") || strings.Contains(r.Error.Message, "every other") {
			t.Fatalf("an answer with a member given twice: %+v, want -32602 naming /content/approve (duplicate)", r.Error)
		}
		before := len(agent.Stats().FormAnswers)
		// What reaches the agent is a2ad's encoding of the checked value,
		// not the host's bytes.
		h.call(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": json.RawMessage(`{ "note" : "ok", "approve" : true }`)}}})
		if sc := structured(t, h.poll(id, mcpedge.TaskStatusCompleted, 20*time.Second)); sc["state"] != "completed" {
			t.Fatalf("after the answer: %v", sc)
		}
		if got := agent.Stats().FormAnswers[before:]; len(got) != 1 || string(got[0]) != `{"approve":true,"note":"ok"}` {
			t.Errorf("the agent got %q, want a2ad's encoding {\"approve\":true,\"note\":\"ok\"}", got)
		}
	})

	var silentID string
	t.Run("tasks/cancel: cancelled", func(t *testing.T) {
		silentID = checkCreated(t, h.delegate(delegateArgs("C-903", 1999, "", 20)), 120)
		if st := h.call(mcpedge.MethodTasksGet, silentID, map[string]any{"taskId": silentID})["status"]; st != mcpedge.TaskStatusWorking {
			t.Fatalf("silent task: %v, want working", st)
		}
		ackd := h.call(mcpedge.MethodTasksCancel, silentID, map[string]any{"taskId": silentID})
		if !reflect.DeepEqual(ackd, map[string]any{"resultType": "complete"}) {
			t.Errorf("tasks/cancel = %v, want the empty acknowledgement", ackd)
		}
		got := h.poll(silentID, mcpedge.TaskStatusCancelled, 10*time.Second)
		if !strings.Contains(fmt.Sprint(got["statusMessage"]), "canceled (canceled_by_host)") {
			t.Errorf("statusMessage %q", got["statusMessage"])
		}
		// Cancelling again: acknowledged, nothing changes.
		h.call(mcpedge.MethodTasksCancel, silentID, map[string]any{"taskId": silentID})
		if rec := getRecord(t, d, silentID); rec.State != "canceled" || rec.Reason != task.ReasonCanceledByHost {
			t.Errorf("record %s %s", rec.State, rec.Reason)
		}
	})

	t.Run("a failed task completes the call with its reason", func(t *testing.T) {
		id := checkCreated(t, h.delegate(delegateArgs("C-904", 1999, "", 20)), 120)
		sc := structured(t, h.poll(id, mcpedge.TaskStatusCompleted, 20*time.Second))
		if sc["state"] != "failed" || sc["reason"] != task.ReasonArtifactRejected {
			t.Fatalf("result = %v, want state failed, reason artifact_rejected", sc)
		}
	})

	t.Run("another tenant's task is not found, as an unknown one", func(t *testing.T) {
		aud, _ := os.ReadFile(filepath.Join(d.DataDir, "auth", "audience"))
		other, err := mcpedge.MintDevToken(d.DataDir, strings.TrimSpace(string(aud)), "intruder", "other", mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		o := newTasksHost(t, d, other, true)
		const unknown = "tsk-000000000000000000000000"
		for _, m := range []string{mcpedge.MethodTasksGet, mcpedge.MethodTasksUpdate, mcpedge.MethodTasksCancel} {
			foreign := o.send(m, doneID, map[string]any{"taskId": doneID, "inputResponses": map[string]any{}})
			none := o.send(m, unknown, map[string]any{"taskId": unknown, "inputResponses": map[string]any{}})
			if foreign.Error == nil || none.Error == nil || foreign.Error.Code != -32602 || foreign.Status != none.Status ||
				strings.ReplaceAll(foreign.Error.Message, doneID, unknown) != none.Error.Message {
				t.Errorf("%s: foreign %d %+v, unknown %d %+v: want the same -32602", m, foreign.Status, foreign.Error, none.Status, none.Error)
			}
		}
	})

	t.Run("a read-only token reads but cannot update or cancel", func(t *testing.T) {
		ro := newTasksHost(t, d, d.token(t, mcpedge.ScopeRead), true)
		if st := ro.call(mcpedge.MethodTasksGet, doneID, map[string]any{"taskId": doneID})["status"]; st != mcpedge.TaskStatusCompleted {
			t.Errorf("read-only tasks/get: %v", st)
		}
		for _, m := range []string{mcpedge.MethodTasksUpdate, mcpedge.MethodTasksCancel} {
			r := ro.send(m, silentID, map[string]any{"taskId": silentID, "inputResponses": map[string]any{}})
			if r.Status != http.StatusForbidden || !strings.Contains(r.Challenge, `error="insufficient_scope"`) || !strings.Contains(r.Challenge, `scope="a2a:delegate"`) {
				t.Errorf("read-only %s: HTTP %d %q, want 403 insufficient_scope a2a:delegate", m, r.Status, r.Challenge)
			}
		}
		// A read-only token may not delegate either: no task is created.
		r := ro.send("tools/call", "delegate", map[string]any{"name": "delegate", "arguments": delegateArgs("C-906", 1999, "", 0)})
		if r.Status != http.StatusForbidden {
			t.Errorf("read-only delegate: HTTP %d, want 403", r.Status)
		}
	})

	t.Run("malformed params are refused in a2ad's words", func(t *testing.T) {
		r := h.send(mcpedge.MethodTasksGet, "5", map[string]any{"taskId": 5})
		if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32602 || r.Error.Message != "invalid params: /params/taskId of tasks/get must be a string" {
			t.Errorf("taskId 5: HTTP %d %+v", r.Status, r.Error)
		}
		r = h.send(mcpedge.MethodTasksGet, "", map[string]any{})
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "/params/taskId of tasks/get is required") {
			t.Errorf("no taskId: HTTP %d %+v", r.Status, r.Error)
		}
		r = h.send(mcpedge.MethodTasksUpdate, doneID, map[string]any{"taskId": doneID, "inputResponses": map[string]any{"x": 1}})
		if r.Error != nil || !reflect.DeepEqual(r.Result, map[string]any{"resultType": "complete"}) {
			t.Errorf("update of an ended task: %+v %v, want the acknowledgement (nothing outstanding)", r.Error, r.Result)
		}
	})

	t.Run("Mcp-Name must be the taskId", func(t *testing.T) {
		for _, name := range []string{"tsk-other", ""} {
			r := h.send(mcpedge.MethodTasksGet, name, map[string]any{"taskId": doneID})
			if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32020 || !strings.Contains(r.Error.Message, "Mcp-Name") {
				t.Errorf("Mcp-Name %q: HTTP %d %+v, want 400 and -32020", name, r.Status, r.Error)
			}
		}
	})
}

// A task handle outlives the a2ad that gave it: killed between the create
// and the get, a2ad started again on the same data directory answers
// tasks/get and tasks/update for it; and another instance on the same NATS
// serves it too.
func TestMCPTasksSurviveRestartAndInstances(t *testing.T) {
	t.Run("restart", func(t *testing.T) {
		d, _, flags := restartable(t, "embedded-nats", nil)
		h := newTasksHost(t, d, d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate), true)
		id := checkCreated(t, h.delegate(delegateArgs("C-911", 125000, "", 20)), 120)
		d.kill(t)
		start := time.Now()
		d2 := startDaemon(t, nil, flags...)
		t.Logf("serving again after %s", time.Since(start))
		h2 := newTasksHost(t, d2, d2.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate), true)
		// The agent reconnects to the new process's NATS about when a2ad
		// serves again: until it has, an answer cannot reach it
		// (agent_offline, the question still outstanding under a new key),
		// and the host answers again.
		until := time.Now().Add(15 * time.Second)
		for {
			key, _ := answerKey(t, h2.poll(id, mcpedge.TaskStatusInputRequired, 30*time.Second))
			t.Logf("input_required %s after the restart", time.Since(start))
			r := h2.send(mcpedge.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": "yes"}}}})
			if r.Error == nil {
				t.Logf("answered %s after the restart", time.Since(start))
				break
			}
			if r.Error.Code != -32603 || !strings.Contains(r.Error.Message, "agent_offline") || time.Now().After(until) {
				t.Fatalf("tasks/update after the restart: %+v", r.Error)
			}
			t.Logf("tasks/update before the agent is back: %s", r.Error.Message)
			time.Sleep(100 * time.Millisecond)
		}
		if sc := structured(t, h2.poll(id, mcpedge.TaskStatusCompleted, 30*time.Second)); sc["state"] != "completed" {
			t.Fatalf("after restart and answer: %v", sc)
		}
	})
	t.Run("instances", func(t *testing.T) {
		srv, _, _ := natstest.Start(t)
		agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), nil)
		a := startDaemon(t, nil, external(t, srv.ClientURL())...)
		b := startDaemon(t, nil, external(t, srv.ClientURL())...)
		id := checkCreated(t, newTasksHost(t, a, a.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate), true).delegate(delegateArgs("C-912", 1999, "", 20)), 120)
		hb := newTasksHost(t, b, b.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate), true)
		if sc := structured(t, hb.poll(id, mcpedge.TaskStatusCompleted, 30*time.Second)); sc["task_id"] != id || sc["state"] != "completed" {
			t.Fatalf("on the other instance: %v", sc)
		}
	})
}

// Through `a2ad mcp` (the stdio bridge, as the README configures it), a
// host that speaks the extension gets the task handle and follows the
// task with tasks/get: the bridge routes tasks/* by their taskId
// (Mcp-Name) as the extension asks of a client.
func TestMCPTasksThroughTheBridge(t *testing.T) {
	r := startBridgeRig(t, true, nil)
	cfg := r.hostConfigs(t)[0]
	cmd := exec.Command(bin, cfg.Args...)
	stderr := &testlog.Buffer{}
	cmd.Stderr = stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // kept open until every answer was read (go-sdk#1061)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("a2ad mcp stderr:\n%s", tail(stderr.String(), 20))
		}
	})
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 0, 64<<10), 4<<20)
	id := 0
	rpc := func(method string, params map[string]any) map[string]any {
		t.Helper()
		id++
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-stdio-host", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{mcpedge.TasksExtension: map[string]any{}}},
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		for lines.Scan() {
			var m struct {
				ID     int             `json:"id"`
				Result map[string]any  `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(lines.Bytes(), &m) == nil && m.ID == id {
				if m.Error != nil {
					t.Fatalf("%s: %s", method, m.Error)
				}
				return m.Result
			}
		}
		t.Fatalf("%s: no answer: %v", method, lines.Err())
		return nil
	}
	until := time.Now().Add(15 * time.Second)
	var res map[string]any
	for {
		res = rpc("tools/call", map[string]any{"name": "delegate", "arguments": delegateArgs("C-921", 125000, "", 20)})
		if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "agent_not_found") || time.Now().After(until) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	taskID := checkCreated(t, res, 120)
	for {
		got := rpc(mcpedge.MethodTasksGet, map[string]any{"taskId": taskID})
		if got["status"] == mcpedge.TaskStatusInputRequired {
			key, _ := answerKey(t, got)
			ackd := rpc(mcpedge.MethodTasksUpdate, map[string]any{"taskId": taskID, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": "yes"}}}})
			if ackd["resultType"] != "complete" {
				t.Fatalf("tasks/update through the bridge: %v", ackd)
			}
		}
		if got["status"] == mcpedge.TaskStatusCompleted {
			if sc := structured(t, got); sc["state"] != "completed" || sc["task_id"] != taskID {
				t.Fatalf("completed through the bridge: %v", sc)
			}
			return
		}
		if time.Now().After(until.Add(15 * time.Second)) {
			t.Fatalf("task %s still %v", taskID, got["status"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}
