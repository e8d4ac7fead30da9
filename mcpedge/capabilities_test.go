package mcpedge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// a2ad declares exactly the capabilities it serves, tools and resources,
// both with listChanged and resources without subscribe, and refuses every
// method of the capabilities it does not declare with -32601; tools/list
// and resources/list are served. In both eras (2026-07-28 declares in
// server/discover, and has no resources/subscribe or logging/setLevel of
// its own).
func TestDeclaredCapabilitiesMatchBehaviour(t *testing.T) {
	for _, era := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(era, func(t *testing.T) { testDeclaredCapabilities(t, era) })
	}
}

func testDeclaredCapabilities(t *testing.T, era string) {
	p := &broker.Principal{Subject: "s", Tenant: "default", Scopes: []string{ScopeRead, ScopeDelegate}}
	s := NewServer(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Stdio: p})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ProtocolVersion; got != era {
		t.Fatalf("negotiated %s, want %s", got, era)
	}
	caps, _ := json.Marshal(cs.InitializeResult().Capabilities)
	if want := `{"resources":{"listChanged":true},"tools":{"listChanged":true}}`; string(caps) != want {
		t.Errorf("declared capabilities %s, want %s", caps, want)
	}
	if res, err := cs.ListResources(ctx, nil); err != nil || len(res.Resources) != 0 {
		t.Errorf("resources/list: %v %v, want none (no host schemas here)", res, err)
	}
	if tools, err := cs.ListTools(ctx, nil); err != nil || len(tools.Tools) != 5 {
		t.Errorf("tools/list: %v", err)
	}
	calls := map[string]func() error{
		"prompts/list":        func() error { _, err := cs.ListPrompts(ctx, nil); return err },
		"prompts/get":         func() error { _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "x"}); return err },
		"resources/subscribe": func() error { return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///x"}) },
		"completion/complete": func() error {
			_, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "x"}, Argument: mcp.CompleteParamsArgument{Name: "a", Value: "b"}})
			return err
		},
		//lint:ignore SA1019 the method a2ad must refuse is the deprecated one
		"logging/setLevel": func() error { return cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}) },
	}
	if era >= "2026-07-28" {
		// Subscriptions go through subscriptions/listen, which acknowledges
		// only what is declared: nothing of resources.
		delete(calls, "resources/subscribe")
		delete(calls, "logging/setLevel")
	}
	for method, call := range calls {
		err := call()
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeMethodNotFound {
			t.Errorf("%s: %v, want JSON-RPC error -32601", method, err)
		}
	}
}
