package mcpedge

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CodeInsufficientScope is the JSON-RPC error code (in JSON-RPC 2.0 §5.1's
// range for server errors, -32000 to -32099) of a tools/call on stdio for
// a tool outside the principal's scopes; over HTTP the same call is
// answered 403 with WWW-Authenticate error="insufficient_scope" (RFC 6750
// §3.1) before it reaches the MCP server.
const CodeInsufficientScope = -32003

// secondInitialize answers a second `initialize` on one session with
// JSON-RPC -32600 (invalid request) in a2ad's words: the go-sdk v1.8.0
// answers it with code 0 (MCP 2025-11-25 basic/lifecycle: initialize is
// the first interaction, once).
func secondInitialize(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == "initialize" && err != nil {
			var we *jsonrpc.Error
			if !errors.As(err, &we) {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
					Message: "invalid request: initialize was already received on this session; send it once, first"}
			}
		}
		return res, err
	}
}
