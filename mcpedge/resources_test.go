package mcpedge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Reading the host schemas needs a2a:read: a stdio principal without it
// (HTTP refuses such a token before MCP) is refused resources/list and
// resources/read with insufficient_scope.
func TestResourcesNeedReadScope(t *testing.T) {
	p := &broker.Principal{Subject: "s", Tenant: "default", Scopes: []string{ScopeDelegate}}
	s := NewServer(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Stdio: p})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for method, call := range map[string]func() error{
		"resources/list": func() error { _, err := cs.ListResources(ctx, nil); return err },
		"resources/read": func() error {
			_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: SchemaURI("risk_assessment")})
			return err
		},
	} {
		// go-sdk v1.8.0 clients read code -32003 as their own "client
		// closing" (jsonrpc2.ErrClientClosing) and wrap it: the text is
		// a2ad's all the same.
		err := call()
		var we *jsonrpc.Error
		if err == nil || errors.As(err, &we) && we.Code != CodeInsufficientScope ||
			!strings.HasSuffix(err.Error(), "insufficient_scope: "+method+" needs scope a2a:read, which this principal does not have") {
			t.Errorf("%s: %v", method, err)
		}
	}
}
