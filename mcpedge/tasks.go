package mcpedge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP Tasks extension (io.modelcontextprotocol/tasks, SEP-2663;
// docs/mcp-tasks.md), at a2ad's edge. go-sdk v1.8.0 does not implement
// it; a2ad serves it as narrowly as the SDK allows:
//
//   - tasks/get, tasks/update and tasks/cancel are custom methods of the
//     go-sdk server ([mcp.AddReceivingCustomMethod]), so the SDK's
//     transport, header checks and middleware serve them as any method;
//   - a task-augmented tools/call of a delegation tool ([Edge.delegationTool])
//     runs the tool as always, told by its context to return as soon as the
//     task is stored ([Edge.waitUntil]), and a receiving middleware answers
//     with a CreateTaskResult instead of the tool's CallToolResult (a
//     result type no handler can return).
//
// The MCP taskId is a2ad's task id, the one task_get takes: every instance
// serves it from the task store, after a restart too, and nothing about a
// task lives in memory. Every call is authorized again: the caller's
// tenant must own the task (another tenant's task is not found, as an
// unknown id is), tasks/get needs a2a:read, tasks/update and tasks/cancel
// a2a:delegate ([TaskMethodScopes]).
//
// Only requests of the 2026-07-28 era over HTTP (/mcp, also through
// `a2ad mcp`) that declare the extension in their per-request client
// capabilities get task handles; every other request is served as before.
// The embedded stdio server (`a2ad serve --stdio`) does not speak it.

// TasksExtension is the identifier of the MCP Tasks extension (SEP-2663),
// the key under capabilities.extensions in server/discover and in a
// request's _meta["io.modelcontextprotocol/clientCapabilities"].
const TasksExtension = "io.modelcontextprotocol/tasks"

// Methods of the Tasks extension.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksUpdate = "tasks/update"
	MethodTasksCancel = "tasks/cancel"
)

// TaskMethodScopes names the scope each method of the Tasks extension
// needs. Over HTTP a call without it is answered 403 insufficient_scope
// before it reaches the MCP server, as a tools/call is ([Authenticator.ProtectMCP]).
var TaskMethodScopes = map[string]string{
	MethodTasksGet:    ScopeRead,
	MethodTasksUpdate: ScopeDelegate,
	MethodTasksCancel: ScopeDelegate,
}

// CodeMissingClientCapability is the JSON-RPC error of a tasks/* request
// that does not declare the Tasks extension in its client capabilities:
// MissingRequiredClientCapability, -32021 in MCP 2026-07-28 (basic,
// "Error Codes"; mcp.CodeMissingRequiredClientCapabilities), with
// data.requiredCapabilities naming the extension, answered HTTP 400.
// SEP-2663's draft text says -32003; the error it names is -32021 in
// 2026-07-28, which the go-sdk and the conformance suite (0.2.0-alpha.12,
// tasks-capability-negotiation) use.
const CodeMissingClientCapability = mcp.CodeMissingRequiredClientCapabilities

// TaskPollInterval is the pollIntervalMs a2ad suggests for a task that has
// not ended: a tasks/get is one read of the task store (about 70 µs), far
// below the per-principal read limit at this rate, and an agent's answer
// is seen within a second.
const TaskPollInterval = time.Second

// Task statuses of the Tasks extension (SEP-2663, "Task Status").
const (
	TaskStatusWorking       = "working"
	TaskStatusInputRequired = "input_required"
	TaskStatusCompleted     = "completed"
	TaskStatusFailed        = "failed"
	TaskStatusCancelled     = "cancelled"
)

// TaskStatus maps an a2ad task state to the extension's status:
// submitted and working are working; input-required and auth-required are
// input_required (the input request says which); completed, failed and
// rejected are completed, because the tool call they answer completed
// with a result (its state and reason say how the task ended; SEP-2663
// keeps failed for JSON-RPC errors, which a delegated task never ends
// with); canceled is cancelled.
func TaskStatus(s task.State) string {
	switch s {
	case task.InputRequired, task.AuthRequired:
		return TaskStatusInputRequired
	case task.Completed, task.Failed, task.Rejected:
		return TaskStatusCompleted
	case task.Canceled:
		return TaskStatusCancelled
	}
	return TaskStatusWorking
}

// TaskParams are the params of tasks/get, tasks/update and tasks/cancel
// (SEP-2663 GetTaskRequest, UpdateTaskRequest, CancelTaskRequest).
type TaskParams struct {
	mcp.ParamsBase
	// TaskID is the taskId of a CreateTaskResult: an a2ad task id.
	TaskID string `json:"taskId"`
	// InputResponses (tasks/update) answer the task's input requests, by
	// their keys; each value is an elicitation result.
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
}

// taskParamsShape is [TaskParams] as [screen] reads it: the same members
// at the top level, so that a fault is named by its pointer.
type taskParamsShape struct {
	Meta           map[string]any             `json:"_meta"`
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// TaskResult is a Task of the extension: the result of tasks/get
// (resultType "complete", with the status's payload inlined) and the
// CreateTaskResult of a task-augmented tools/call (resultType "task",
// without payload). Times are RFC 3339 (ISO 8601), durations integer
// milliseconds.
type TaskResult struct {
	mcp.ResultBase
	ResultType    string `json:"resultType"`
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTLMs counts from createdAt to when a2ad may remove the task: its
	// deadline (or, once ended, its end) plus the retention of ended
	// tasks. a2ad never removes a task before.
	TTLMs          int64 `json:"ttlMs"`
	PollIntervalMs int64 `json:"pollIntervalMs,omitempty"`
	// InputRequests (input_required) hold the one question or
	// authorization request the task waits on, under a key used once in
	// the task's life.
	InputRequests mcp.InputRequestMap `json:"inputRequests,omitempty"`
	// Result (completed) is the CallToolResult the tool call would have
	// returned had it waited: task_get's result for the task.
	Result *ToolResult `json:"result,omitempty"`
}

// ToolResult is a CallToolResult as a 2026-07-28 tools/call returns it,
// resultType "complete" included (go-sdk v1.8.0 keeps that member
// unexported in [mcp.CallToolResult], so it cannot be set there).
type ToolResult struct {
	Content           []mcp.Content   `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
	ResultType        string          `json:"resultType"`
}

// AckResult is the empty acknowledgement of tasks/update and tasks/cancel.
type AckResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskHandle is put in a task-augmented tools/call's context: the tool's
// wait fills it with the stored task and returns at once.
type taskHandle struct{ record *task.Record }

type taskHandleKey struct{}

// taskHandleOf is the handle of a task-augmented call, nil for any other.
func taskHandleOf(ctx context.Context) *taskHandle {
	h, _ := ctx.Value(taskHandleKey{}).(*taskHandle)
	return h
}

type callerKey struct{}

// addTaskMethods registers tasks/get, tasks/update and tasks/cancel and
// the middleware of the extension on s.
func (e *Edge) addTaskMethods(s *mcp.Server) {
	must := func(err error) {
		if err != nil {
			panic("mcpedge: " + err.Error()) // fixed names: a programming error
		}
	}
	must(mcp.AddReceivingCustomMethod(s, MethodTasksGet, func(ctx context.Context, _ *mcp.ServerSession, p *TaskParams) (*TaskResult, error) {
		return e.tasksGet(ctx, p)
	}))
	must(mcp.AddReceivingCustomMethod(s, MethodTasksUpdate, func(ctx context.Context, _ *mcp.ServerSession, p *TaskParams) (*AckResult, error) {
		return e.tasksUpdate(ctx, p)
	}))
	must(mcp.AddReceivingCustomMethod(s, MethodTasksCancel, func(ctx context.Context, _ *mcp.ServerSession, p *TaskParams) (*AckResult, error) {
		return e.tasksCancel(ctx, p)
	}))
	s.AddReceivingMiddleware(e.tasksMiddleware)
}

// overHTTP reports whether a request came over Streamable HTTP, where
// [Authenticator.ProtectMCP] verified a token (stdio requests carry none).
func overHTTP(extra *mcp.RequestExtra) bool { return extra != nil && extra.TokenInfo != nil }

// declaresTasks reports whether client capabilities declare the extension
// (its settings are an object; no settings are defined yet).
func declaresTasks(caps *mcp.ClientCapabilities) bool {
	if caps == nil {
		return false
	}
	_, ok := caps.Extensions[TasksExtension].(map[string]any)
	return ok
}

// tasksEra reports whether a request may use the extension: the
// 2026-07-28 era over HTTP, with the extension declared on the request.
func tasksEra(version string, extra *mcp.RequestExtra, caps *mcp.ClientCapabilities) bool {
	return version >= "2026-07-28" && overHTTP(extra) && declaresTasks(caps)
}

// tasksMiddleware serves the extension around the go-sdk's handlers: the
// advertisement (server/discover over HTTP only; never initialize, whose
// era has no per-request capabilities), task handles for task-augmented
// tools/call of delegation tools, and the checks every tasks/* request
// passes before its handler.
func (e *Edge) tasksMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "initialize", "server/discover":
			res, err := next(ctx, method, req)
			if method == "server/discover" && overHTTP(req.GetExtra()) {
				return res, err
			}
			switch r := res.(type) {
			case *mcp.InitializeResult:
				r.Capabilities = withoutTasks(r.Capabilities)
			case *mcp.DiscoverResult:
				r.Capabilities = withoutTasks(r.Capabilities)
			}
			return res, err
		case "tools/call":
			cr, ok := req.(*mcp.CallToolRequest)
			if !ok || cr.Params == nil || !e.delegationTool(cr.Params.Name) || !tasksEra(cr.ProtocolVersion(), cr.Extra, cr.ClientCapabilities()) {
				return next(ctx, method, req)
			}
			h := &taskHandle{}
			res, err := next(context.WithValue(ctx, taskHandleKey{}, h), method, req)
			if h.record == nil {
				return res, err // refused before a task was stored: the tool's own answer
			}
			return e.taskResult(h.record, "task"), nil
		case MethodTasksGet, MethodTasksUpdate, MethodTasksCancel:
			tr, ok := req.(*mcp.ServerRequest[*TaskParams])
			if !ok {
				return next(ctx, method, req)
			}
			if err := e.checkTaskRequest(method, tr); err != nil {
				return nil, err
			}
			return next(context.WithValue(ctx, callerKey{}, tr.Extra), method, req)
		}
		return next(ctx, method, req)
	}
}

// withoutTasks is caps without the extension (a copy; caps is shared).
func withoutTasks(caps *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	if caps == nil || caps.Extensions[TasksExtension] == nil {
		return caps
	}
	c := *caps
	c.Extensions = map[string]any{}
	for k, v := range caps.Extensions {
		if k != TasksExtension {
			c.Extensions[k] = v
		}
	}
	if len(c.Extensions) == 0 {
		c.Extensions = nil
	}
	return &c
}

// taskRouting refuses a 2026-07-28 tasks/* POST whose Mcp-Name header
// is not its params.taskId, missing included: -32020 (header mismatch),
// answered 400 before the go-sdk reads it (SEP-2663 "Streamable HTTP:
// Routing Headers"; SEP-2243 "Server Validation"). nil: it may go on.
func taskRouting(h http.Header, c call) *screenError {
	if _, ok := TaskMethodScopes[c.method]; !ok || h.Get("Mcp-Protocol-Version") < "2026-07-28" {
		return nil
	}
	if name := h.Get("Mcp-Name"); name != c.taskID {
		return &screenError{Code: mcp.CodeHeaderMismatch, ID: rawID(c.id),
			Message: fmt.Sprintf("header mismatch: the Mcp-Name header of %s must be its params.taskId (MCP Tasks extension, routing headers); got %q", c.method, name)}
	}
	return nil
}

// setTaskRouting gives a 2026-07-28 tasks/* POST that the go-sdk client
// sent without one its Mcp-Name header, the params.taskId (the go-sdk
// v1.8.0 sets Mcp-Name only for tools/call, prompts/get and
// resources/read): for [Bridge], which forwards a host's messages
// unchanged and must route them as the host would ([taskRouting]).
func setTaskRouting(req *http.Request) error {
	if _, ok := TaskMethodScopes[req.Header.Get("Mcp-Method")]; !ok || req.Header.Get("Mcp-Name") != "" || req.Body == nil {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPeek+1))
	if err != nil {
		return err
	}
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if c := parseCall(body); c.taskID != "" {
		req.Header.Set("Mcp-Name", c.taskID)
	}
	return nil
}

// rawID is a [canonicalID] as JSON again (nil for none).
func rawID(canonical string) json.RawMessage {
	if n, ok := strings.CutPrefix(canonical, "n:"); ok {
		return json.RawMessage(n)
	}
	if s, ok := strings.CutPrefix(canonical, "s:"); ok {
		b, _ := json.Marshal(s)
		return b
	}
	return nil
}

// checkTaskRequest refuses a tasks/* request a2ad does not serve, in
// this order: over stdio (-32601: HTTP only), without the extension
// declared on the request or before 2026-07-28 (-32021, Missing Required
// Client Capability, with data.requiredCapabilities: MCP 2026-07-28
// basic, "Error Codes", and SEP-2663), without the method's scope,
// without a taskId (-32602). The Mcp-Name routing header was checked
// before ([taskRouting]).
func (e *Edge) checkTaskRequest(method string, req *mcp.ServerRequest[*TaskParams]) error {
	if !overHTTP(req.Extra) {
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
			Message: fmt.Sprintf("method %s not found: a2ad serves the MCP Tasks extension (%s) over Streamable HTTP only (POST /mcp, or a2ad mcp), not over a2ad serve --stdio", method, TasksExtension)}
	}
	if !tasksEra(req.ProtocolVersion(), req.Extra, req.ClientCapabilities()) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
		return &jsonrpc.Error{Code: CodeMissingClientCapability, Data: data,
			Message: fmt.Sprintf("missing required client capability: %s needs the MCP Tasks extension declared in this request's _meta[%q].extensions[%q] (protocol 2026-07-28 or later)", method, mcp.MetaKeyClientCapabilities, TasksExtension)}
	}
	id := ""
	if req.Params != nil {
		id = req.Params.TaskID
	}
	p := e.principalOf(req.Extra)
	if need := TaskMethodScopes[method]; !slices.Contains(p.Scopes, need) {
		return &jsonrpc.Error{Code: CodeInsufficientScope, Message: fmt.Sprintf("insufficient scope: %s needs scope %s", method, need)}
	}
	if id == "" {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("invalid params: /params/taskId of %s is required: the taskId a2ad returned in the CreateTaskResult", method)}
	}
	return nil
}

// caller is the principal of a tasks/* request ([tasksMiddleware] put its
// extra in ctx).
func (e *Edge) caller(ctx context.Context) broker.Principal {
	extra, _ := ctx.Value(callerKey{}).(*mcp.RequestExtra)
	return e.principalOf(extra)
}

// taskNotFound is the error of a taskId that names no task of the caller's
// tenant: unknown, another tenant's, or removed after its retention, all
// alike (SEP-2663: -32602).
func taskNotFound(method, id string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
		Message: fmt.Sprintf("%s: task not found: no task %q is visible to this caller (unknown, another tenant's, or removed after its retention)", method, id)}
}

// taskError turns a broker error of a tasks/* call into its JSON-RPC
// error: not found and invalid arguments -32602, the rest -32603 with
// a2ad's code and words ([ToolError]).
func (e *Edge) taskError(method, id string, err error) error {
	if errors.Is(err, task.ErrNotFound) {
		return taskNotFound(method, id)
	}
	te, _ := e.toolError(err).(*ToolError)
	code := int64(jsonrpc.CodeInternalError)
	var be *brief.Error
	var ae *broker.AnswerError
	if errors.As(err, &be) || errors.As(err, &ae) {
		code = jsonrpc.CodeInvalidParams
	}
	return &jsonrpc.Error{Code: code, Message: method + ": " + te.Error()}
}

// tasksGet answers tasks/get: the task as it is now, with its input
// request when input_required and its result when completed.
func (e *Edge) tasksGet(ctx context.Context, params *TaskParams) (*TaskResult, error) {
	r, err := e.svc.Get(ctx, e.caller(ctx), params.TaskID)
	if err != nil {
		return nil, e.taskError(MethodTasksGet, params.TaskID, err)
	}
	return e.taskResult(r, "complete"), nil
}

// tasksUpdate answers tasks/update. Only the response to the task's
// outstanding input request counts (SEP-2663: other keys are ignored). An
// accepted answer goes to the agent as task_respond sends it — the
// content's answer as text, or, for a question with a form
// (question_schema), the whole content as data once it satisfies the form
// — and the acknowledgement follows once the agent has it. A declined or
// cancelled elicitation leaves the question outstanding (answer it later,
// or tasks/cancel); an accepted authorization request sends nothing (the
// user authorizes with the agent itself, and the agent goes on). A
// response that is not an elicitation result, a blank answer, or content
// that does not satisfy the form (named by pointers and keywords, never
// values) is -32602, and the question stays outstanding.
func (e *Edge) tasksUpdate(ctx context.Context, params *TaskParams) (*AckResult, error) {
	p := e.caller(ctx)
	r, err := e.svc.Get(ctx, p, params.TaskID)
	if err != nil {
		return nil, e.taskError(MethodTasksUpdate, params.TaskID, err)
	}
	key, _, ok := inputRequest(r)
	if !ok {
		return ack(), nil
	}
	raw, ok := params.InputResponses[key]
	if !ok {
		return ack(), nil
	}
	at := "/params/inputResponses/" + escapePointer(key)
	resp, err := ParseInputResponse(raw)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("invalid params: %s: %v", at, err)}
	}
	if !resp.Accepted || r.State == task.AuthRequired {
		return ack(), nil
	}
	answer := broker.Answer{}
	if form := questionForm(r); form != nil {
		if refused := form.Check(resp.Content); len(refused) > 0 {
			var b strings.Builder
			for _, v := range refused {
				fmt.Fprintf(&b, " %s/content%s (%s);", at, v.Pointer, v.Keyword)
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: "invalid params: the answer does not satisfy the agent's form (the input request's requestedSchema):" + strings.TrimSuffix(b.String(), ";")}
		}
		answer.Data = resp.Content
	} else {
		var content struct {
			Answer *string `json:"answer"`
		}
		if json.Unmarshal(resp.Content, &content) != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("invalid params: %s/content/answer: want a string", at)}
		}
		if content.Answer == nil || strings.TrimSpace(*content.Answer) == "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: fmt.Sprintf("invalid params: %s/content/answer: an accepted answer must be a non-blank string", at)}
		}
		answer.Text = strings.TrimSpace(*content.Answer)
	}
	if _, err := e.svc.RespondAnswer(ctx, p, params.TaskID, answer); err != nil {
		if errors.Is(err, broker.ErrNotInterrupted) {
			return ack(), nil // answered another way meanwhile: nothing outstanding
		}
		return nil, e.taskError(MethodTasksUpdate, params.TaskID, err)
	}
	return ack(), nil
}

// tasksCancel answers tasks/cancel: the task is canceled as task_cancel
// cancels it (CancelTask to the agent, canceled even if it does not
// answer). A task that already ended stays as it ended, acknowledged too
// (SEP-2663: cancellation is cooperative).
func (e *Edge) tasksCancel(ctx context.Context, params *TaskParams) (*AckResult, error) {
	if _, err := e.svc.Cancel(ctx, e.caller(ctx), params.TaskID); err != nil && !errors.Is(err, broker.ErrTerminal) {
		return nil, e.taskError(MethodTasksCancel, params.TaskID, err)
	}
	return ack(), nil
}

func ack() *AckResult { return &AckResult{ResultType: "complete"} }

// MaxInputResponseBytes bounds one input response a2ad reads (an answer is
// at most 16 KiB, broker.MaxAnswerBytes; the request body is bounded
// before, by http_limits.max_body_bytes).
const MaxInputResponseBytes = 64 << 10

// InputResponse is one input response of tasks/update, an MCP elicitation
// result.
type InputResponse struct {
	// Accepted: the action was "accept" (not "decline" or "cancel").
	Accepted bool
	// Content is the accepted content, a JSON object ({} when absent);
	// nil when not accepted.
	Content json.RawMessage
}

// ParseInputResponse reads one input response of tasks/update, an MCP
// elicitation result {"action": "accept"|"decline"|"cancel", "content":
// {…}}. The error, in a2ad's words, says what is wanted.
func ParseInputResponse(raw json.RawMessage) (InputResponse, error) {
	if len(raw) > MaxInputResponseBytes {
		return InputResponse{}, fmt.Errorf("larger than %d bytes", MaxInputResponseBytes)
	}
	var res struct {
		Action  *string         `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &res) != nil || res.Action == nil {
		return InputResponse{}, errors.New(`want an elicitation result: {"action": "accept", "decline" or "cancel", "content": {…}}`)
	}
	switch *res.Action {
	case "decline", "cancel":
		return InputResponse{}, nil
	case "accept":
	default:
		return InputResponse{}, fmt.Errorf(`/action %q: want "accept", "decline" or "cancel"`, *res.Action)
	}
	if len(res.Content) == 0 || string(res.Content) == "null" {
		return InputResponse{Accepted: true, Content: json.RawMessage("{}")}, nil
	}
	if res.Content[0] != '{' {
		return InputResponse{}, errors.New("/content: want a JSON object")
	}
	return InputResponse{Accepted: true, Content: res.Content}, nil
}

// taskResult is r as a Task of the extension, of resultType "task" (a
// CreateTaskResult: the Task only) or "complete" (tasks/get: with the
// input request or the result inlined).
func (e *Edge) taskResult(r *task.Record, resultType string) *TaskResult {
	res := &TaskResult{ResultType: resultType, TaskID: r.ID, Status: TaskStatus(r.State), StatusMessage: statusMessage(r),
		CreatedAt: r.CreatedAt.Format(time.RFC3339Nano), LastUpdatedAt: r.UpdatedAt.Format(time.RFC3339Nano)}
	end := r.Deadline
	if r.State.Terminal() && !r.EndedAt.IsZero() {
		end = r.EndedAt
	}
	keep := e.retention
	if keep <= 0 {
		keep = task.DefaultRetention
	}
	res.TTLMs = max(end.Sub(r.CreatedAt), 0).Milliseconds() + keep.Milliseconds()
	if !r.State.Terminal() {
		res.PollIntervalMs = TaskPollInterval.Milliseconds()
	}
	if resultType != "complete" {
		return res
	}
	switch res.Status {
	case TaskStatusInputRequired:
		if key, ask, ok := inputRequest(r); ok {
			res.InputRequests = mcp.InputRequestMap{key: ask}
		}
	case TaskStatusCompleted:
		res.Result = callToolResult(view(r, false))
	}
	return res
}

// callToolResult is the CallToolResult a2ad's tools make of a task's
// output ([toolResult]): the output encoded once, as structuredContent
// and, as text, as the one content.
func callToolResult(out TaskOutput) *ToolResult {
	b, err := json.Marshal(out)
	if err != nil {
		return &ToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "internal_error: " + msgInternal}}, ResultType: "complete"}
	}
	return &ToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b), ResultType: "complete"}
}

// statusMessage says in a2ad's words (never the agent's, which the
// result and the input request carry, flagged) what the task's status
// means.
func statusMessage(r *task.Record) string {
	reason := ""
	if r.Reason != "" {
		reason = " (" + r.Reason + ")"
	}
	switch r.State {
	case task.Submitted:
		return fmt.Sprintf("a2ad task %s: submitted to agent %q", r.State, r.AgentID)
	case task.Working:
		return fmt.Sprintf("a2ad task %s: agent %q is working on it", r.State, r.AgentID)
	case task.InputRequired:
		return fmt.Sprintf("a2ad task %s: agent %q asks a question; answer its input request with tasks/update", r.State, r.AgentID)
	case task.AuthRequired:
		return fmt.Sprintf("a2ad task %s: agent %q needs authorization, given to the agent itself (a2ad never forwards credentials)", r.State, r.AgentID)
	case task.Completed:
		return fmt.Sprintf("a2ad task %s: the artifacts were validated against output schema %s", r.State, r.OutputSchema)
	case task.Canceled:
		// A cancelled MCP task carries no result: the reason is here.
		return fmt.Sprintf("a2ad task %s%s", r.State, reason)
	}
	return fmt.Sprintf("a2ad task %s%s: the result's state and reason say how it ended", r.State, reason)
}

// inputRequest is the input request an interrupted task waits on, and its
// key: "question-<n>-<h>" or "authorization-<n>-<h>", where n counts the
// task's applied transitions and h is a digest of the agent's text and
// form (question_schema), so
// that a key names one request in the task's life (SEP-2663: keys are
// never reused). ok is false when the task waits on nothing.
func inputRequest(r *task.Record) (key string, ask *mcp.ElicitParams, ok bool) {
	if !r.State.Interrupted() {
		return "", nil, false
	}
	n := r.HistoryUnrecorded
	for _, h := range r.History {
		if !h.Refused {
			n++
		}
	}
	h := sha256.New()
	h.Write([]byte(r.Question))
	h.Write([]byte{0})
	h.Write(r.QuestionSchema)
	digest := hex.EncodeToString(h.Sum(nil)[:4])
	if r.State == task.AuthRequired {
		return fmt.Sprintf("authorization-%d-%s", n, digest), questionRequest(r, nil), true
	}
	return fmt.Sprintf("question-%d-%s", n, digest), questionRequest(r, nil), true
}
