package mcpedge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type echoOut struct {
	Text string `json:"text" jsonschema:"the text echoed"`
}

// A tool added while a host is connected through the bridge reaches it as
// notifications/tools/list_changed — in 2025-11-25 on the standalone SSE
// stream the bridge opens, in 2026-07-28 on the host's own
// subscriptions/listen call — and every request the bridge sends, the
// stream's GET included, carries the bearer token of its TokenSource.
func TestBridgeForwardsToolListChanged(t *testing.T) {
	for _, era := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(era, func(t *testing.T) { bridgeListChanged(t, era) })
	}
}

func bridgeListChanged(t *testing.T, era string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "daemon", Version: "1"}, nil)
	echo := func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		return nil, echoOut(in), nil
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echoes"}, echo)
	var requests, unauthorized, streams atomic.Int64
	h := HTTPHandler(srv, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			unauthorized.Add(1)
		}
		if r.Method == http.MethodGet || r.Header.Get("Mcp-Method") == "subscriptions/listen" {
			streams.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	hostSide, bridgeSide := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &Bridge{Endpoint: ts.URL, Host: bridgeSide, Token: func() (string, error) { return "tok-1", nil }}
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()

	changed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, hostSide, &mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError || res.StructuredContent.(map[string]any)["text"] != "hi" {
		t.Fatalf("echo through the bridge: %v %+v", err, res)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != era {
		t.Fatalf("session speaks %s, want %s", got, era)
	}
	// The stream is opened once the host's initialized went through (or
	// its subscriptions/listen).
	for until := time.Now().Add(5 * time.Second); streams.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(until) {
			t.Fatal("no stream for notifications was opened")
		}
	}
	time.Sleep(100 * time.Millisecond) // the GET is taken: the stream is registered
	mcp.AddTool(srv, &mcp.Tool{Name: "echo2", Description: "echoes again"}, echo)
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/tools/list_changed reached the host")
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 2 {
		t.Fatalf("tools/list after the change: %v %+v", err, tools)
	}
	if n := unauthorized.Load(); n != 0 {
		t.Errorf("%d of %d requests lacked the bearer token", n, requests.Load())
	}
	_ = cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil at the end of the host's input", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return at the end of the host's input")
	}
}

// FuzzBridgeReadEvents: the SSE reader of the standalone stream (what the
// daemon sends, untrusted) never panics and never hands on an event over
// its bound.
func FuzzBridgeReadEvents(f *testing.F) {
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\n: comment\n\nid: 1\nretry: 10\ndata:\n\n"))
	f.Add([]byte("event: other\ndata: x\n\n" + strings.Repeat("data: y\n", 100)))
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 64
		err := readEvents(bytes.NewReader(body), limit, func(data []byte) {
			if len(data) > limit {
				t.Fatalf("event of %d bytes handed on, bound %d", len(data), limit)
			}
		})
		_ = err
	})
}

// The SSE reader joins data lines, skips comments and other events, and
// refuses an event over its bound.
func TestBridgeReadEvents(t *testing.T) {
	var got []string
	err := readEvents(strings.NewReader("data: a\ndata: b\n\n: c\n\nevent: ping\ndata: x\n\nevent: message\ndata: {}\n\ndata: last"), 1<<10, func(d []byte) {
		got = append(got, string(d))
	})
	if err != nil || strings.Join(got, "|") != "a\nb|{}" {
		t.Fatalf("events %q, err %v; want \"a\\nb\" and \"{}\" (an unterminated event is not handed on)", got, err)
	}
	err = readEvents(strings.NewReader("data: "+strings.Repeat("z", 200)+"\n\n"), 100, func([]byte) { t.Fatal("an oversized event was handed on") })
	if err == nil || err.Error() != "an event is longer than 100 bytes" {
		t.Fatalf("oversized event: %v", err)
	}
}

// A JSON answer longer than a host's line bound is not read whole: the
// host gets a2ad's error for the call, and the bridge goes on.
func TestBridgeBoundsJSONAnswers(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"pad":"`))
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for range 17 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}}`))
	}))
	defer ts.Close()
	hostSide, bridgeSide := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = (&Bridge{Endpoint: ts.URL, Host: bridgeSide}).Run(ctx) }()
	conn, err := hostSide.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := jsonrpc.MakeID(float64(1))
	if err := conn.Write(ctx, &jsonrpc.Request{ID: id, Method: "ping", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	msg, err := conn.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := msg.(*jsonrpc.Response)
	var je *jsonrpc.Error
	if !ok || !errors.As(resp.Error, &je) || je.Code != CodeDaemonUnavailable || len(resp.Result) != 0 {
		t.Fatalf("answer %+v, want the error -32010", msg)
	}
}
