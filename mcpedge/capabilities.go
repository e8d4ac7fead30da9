package mcpedge

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serverCapabilities are what a2ad declares, in `initialize` (2025-11-25)
// and `server/discover` (2026-07-28), and all it serves: tools, with
// listChanged (the per-skill tools follow approvals, quarantines and
// liveness), and resources, with listChanged (the host schemas, which a
// reload replaces), without subscribe. No prompts, completions or logging:
// a2ad sends no log notifications (its log goes to stderr and its
// operators), so it does not declare logging either (go-sdk v1.8.0
// declares logging unless told otherwise). With conformance
// (Options.ConformanceTools, never in production) also prompts, without
// listChanged: the suite's one test prompt (conformance.go), which never
// changes. And the MCP Tasks extension (SEP-2663, tasks.go), declared in
// server/discover over HTTP only: initialize results and stdio sessions
// have it taken out again (tasksMiddleware).
func serverCapabilities(conformance bool) *mcp.ServerCapabilities {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Resources: &mcp.ResourceCapabilities{ListChanged: true}}
	caps.AddExtension(TasksExtension, nil)
	if conformance {
		caps.Prompts = &mcp.PromptCapabilities{}
	}
	return caps
}

// undeclaredMethods maps each method of a capability (or sub-capability)
// a2ad does not declare to it. go-sdk v1.8.0 answers prompts/list,
// resources/subscribe and logging/setLevel whatever the declared
// capabilities; a2ad refuses them instead.
var undeclaredMethods = map[string]string{
	"prompts/list":          "prompts",
	"prompts/get":           "prompts",
	"resources/subscribe":   "resource subscriptions",
	"resources/unsubscribe": "resource subscriptions",
	"completion/complete":   "completions",
	"logging/setLevel":      "logging",
}

// refuseUndeclared answers every method of a capability caps does not
// declare with JSON-RPC -32601 (method not found; HTTP 404 in the
// 2026-07-28 era), so that declared capabilities and behaviour match
// exactly (MCP 2025-11-25 basic/lifecycle, "Capability Negotiation": both
// parties must respect the negotiated capabilities). Only prompts can be
// declared besides tools and resources, and only with conformance.
func refuseUndeclared(caps *mcp.ServerCapabilities) mcp.Middleware {
	declared := "the tools and resources capabilities only, resources without subscribe"
	if caps.Prompts != nil {
		declared = "the tools, resources and prompts capabilities only, resources without subscribe"
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
