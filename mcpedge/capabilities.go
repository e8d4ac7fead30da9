package mcpedge

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serverCapabilities are what a2ad declares, in `initialize` (2025-11-25)
// and `server/discover` (2026-07-28), and all it serves: tools, whose list
// never changes while a2ad runs, so without listChanged. No prompts,
// resources, completions or logging: a2ad sends no log notifications
// (its log goes to stderr and its operators), so it does not declare
// logging either (go-sdk v1.8.0 declares logging, and tools.listChanged,
// unless told otherwise). With conformance (Options.ConformanceTools,
// never in production) also prompts, without listChanged: the suite's one
// test prompt (conformance.go), which never changes either. And the MCP
// Tasks extension (SEP-2663, tasks.go), declared in server/discover over
// HTTP only: initialize results and stdio sessions have it taken out
// again (tasksMiddleware).
func serverCapabilities(conformance bool) *mcp.ServerCapabilities {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	caps.AddExtension(TasksExtension, nil)
	if conformance {
		caps.Prompts = &mcp.PromptCapabilities{}
	}
	return caps
}

// undeclaredMethods maps each method of a capability a2ad does not
// declare to that capability. go-sdk v1.8.0 answers prompts/list and
// resources/list (empty) and logging/setLevel whatever the declared
// capabilities; a2ad refuses them instead.
var undeclaredMethods = map[string]string{
	"prompts/list":             "prompts",
	"prompts/get":              "prompts",
	"resources/list":           "resources",
	"resources/read":           "resources",
	"resources/templates/list": "resources",
	"resources/subscribe":      "resources",
	"resources/unsubscribe":    "resources",
	"completion/complete":      "completions",
	"logging/setLevel":         "logging",
}

// refuseUndeclared answers every method of a capability caps does not
// declare with JSON-RPC -32601 (method not found; HTTP 404 in the
// 2026-07-28 era), so that declared capabilities and behaviour match
// exactly (MCP 2025-11-25 basic/lifecycle, "Capability Negotiation": both
// parties must respect the negotiated capabilities). Only prompts can be
// declared besides tools, and only with conformance.
func refuseUndeclared(caps *mcp.ServerCapabilities) mcp.Middleware {
	declared := "the tools capability only"
	if caps.Prompts != nil {
		declared = "the tools and prompts capabilities only"
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if c, ok := undeclaredMethods[method]; ok && (c != "prompts" || caps.Prompts == nil) {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
					Message: fmt.Sprintf("method %s not found: a2ad offers no %s (it declares %s)", method, c, declared)}
			}
			return next(ctx, method, req)
		}
	}
}
