package mcpedge

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioPeer is the host's side of a [StdioTransport] over pipes: it writes
// request lines and reads response lines.
type stdioPeer struct {
	t   *testing.T
	in  *io.PipeWriter
	out *bufio.Scanner
}

func (p *stdioPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// next is the next message a2ad wrote, decoded.
func (p *stdioPeer) next() map[string]any {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("no more output: %v", p.out.Err())
	}
	var m map[string]any
	if err := json.Unmarshal(p.out.Bytes(), &m); err != nil {
		p.t.Fatalf("output %q: %v", p.out.Bytes(), err)
	}
	return m
}

// serveStdio runs s on a [StdioTransport] over pipes; the returned
// channel is closed when Run has returned, with its error in *runErr.
func serveStdio(t *testing.T, s *mcp.Server, drain time.Duration, runErr *error) (*stdioPeer, <-chan struct{}) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		*runErr = s.Run(context.Background(), &StdioTransport{Inner: &mcp.IOTransport{Reader: inR, Writer: outW}, Drain: drain})
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close(); go io.Copy(io.Discard, outR); <-done })
	sc := bufio.NewScanner(outR)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	p := &stdioPeer{t: t, in: inW, out: sc}
	p.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := p.next(); m["id"] != "init" || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p, done
}

// blockingServer has one tool, "block", that returns only when its call is
// cancelled (started receives a value when it begins), and "quick".
func blockingServer(started chan<- struct{}) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	type in struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "block", Description: "waits for cancellation"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		<-ctx.Done()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "answered after cancellation"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "quick", Description: "answers at once"}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "quick"}}}, nil, nil
	})
	return s
}

// After the host's notifications/cancelled for a call, no response for that
// call's id is written; later calls are answered as usual, and a
// cancellation of an id that was never called changes nothing.
func TestStdioNoResponseAfterCancelled(t *testing.T) {
	started := make(chan struct{}, 1)
	var runErr error
	p, _ := serveStdio(t, blockingServer(started), time.Minute, &runErr)
	p.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	<-started
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user pressed stop"}}`)
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`)
	// The cancelled handler has returned and its answer was dropped by the
	// time the next call is answered: the calls are answered in order
	// only because nothing for id 7 precedes id 8's answer.
	p.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"quick","arguments":{}}}`)
	m := p.next()
	if m["id"] != float64(8) {
		t.Fatalf("first message after the cancellation: %v, want the answer to id 8", m)
	}
	p.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	if m := p.next(); m["id"] != float64(9) {
		t.Fatalf("after id 8: %v, want the answer to ping id 9 (nothing for the cancelled id 7)", m)
	}
}

// At the end of input, the calls still open are answered before the
// connection ends; a call that cannot end is cancelled once Drain has
// passed, as the go-sdk does.
func TestStdioAnswersOpenCallsAtEndOfInput(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	type in struct{}
	release := make(chan struct{})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "answers once released"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	var runErr error
	p, done := serveStdio(t, s, time.Minute, &runErr)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{}}}`)
	p.in.Close() // end of input while the call is open
	select {
	case <-done:
		t.Fatalf("Run ended (%v) with a call open", runErr)
	case <-time.After(100 * time.Millisecond): // a2ad must still be serving: no upper bound is measured
	}
	close(release)
	m := p.next()
	res, _ := m["result"].(map[string]any)
	if m["id"] != float64(1) || res == nil || res["isError"] == true {
		t.Fatalf("answer %v, want the result of id 1", m)
	}
	<-done
	if runErr != nil {
		t.Errorf("Run: %v, want nil at end of input", runErr)
	}
}
