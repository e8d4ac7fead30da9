package mcpedge

import (
	"context"
	"reflect"

	"github.com/a2ad/a2ad/internal/tracing"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traceMiddleware starts a server span for each MCP request, named
// "<method> <tool>" for tools/call and "<method>" otherwise (OpenTelemetry
// MCP semantic conventions), as a child of the _meta trace context when
// the host sent one.
func traceMiddleware(tracer trace.Tracer) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			name := method
			attrs := []attribute.KeyValue{attribute.String("mcp.method.name", method)}
			params := req.GetParams()
			if params != nil && !reflect.ValueOf(params).IsNil() { // tools/list may carry a nil *ListToolsParams
				ctx = tracing.FromMeta(ctx, params.GetMeta())
				if c, ok := params.(*mcp.CallToolParamsRaw); ok && c != nil {
					name += " " + c.Name
					attrs = append(attrs, attribute.String("gen_ai.tool.name", c.Name))
				}
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			defer span.End()
			res, err := next(ctx, method, req)
			if err != nil {
				span.SetStatus(codes.Error, "")
				span.SetAttributes(attribute.String("error.type", "jsonrpc"))
			} else if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
				span.SetStatus(codes.Error, "")
				span.SetAttributes(attribute.String("error.type", "tool_error"))
			}
			return res, err
		}
	}
}
