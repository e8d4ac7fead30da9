package mcpedge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
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

// A line a2ad cannot read as a JSON-RPC message is answered with a
// JSON-RPC error in a2ad's words — -32700 for what is not JSON or nests
// deeper than 1000, -32600 for what is not a request, -32602 for params
// that are not an object — with the id when it is readable and null when
// not, and the session goes on: the ping after each is answered.
func TestStdioMalformedLinesAreAnswered(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = s.Run(context.Background(), &StdioTransport{In: inR, Out: outW, Drain: time.Minute})
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	p := &stdioPeer{t: t, in: inW, out: sc}
	p.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := p.next(); m["id"] != "init" || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	deep := strings.Repeat(`{"a":`, 1001) + "1" + strings.Repeat("}", 1001)
	for i, c := range []struct {
		line, want string
	}{
		{`{bad`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the message is not valid JSON (RFC 8259)"}}`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string or an integer (JSON-RPC 2.0 §4)"}}`},
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string or an integer (JSON-RPC 2.0 §4)"}}`},
		{`{"jsonrpc":"1.0","id":5,"method":"ping"}`, `{"jsonrpc":"2.0","id":5,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`},
		{`[]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: an empty batch ([]) holds no message"}}`},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: JSON-RPC batches (arrays) are not accepted; send one JSON-RPC object per message (MCP 2025-06-18 and later)"}}`},
		{`42`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC message must be a JSON object"}}`},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"x","arguments":` + deep + `}}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the message nests arrays and objects deeper than 1000 levels"}}`},
		{`{"jsonrpc":"2.0","id":"s","method":"tools/call","params":"x"}`, `{"jsonrpc":"2.0","id":"s","error":{"code":-32602,"message":"invalid params: params of tools/call must be a JSON object"}}`},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}`, `{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"invalid params: /params/name of tools/call must be a string, the tool's name"}}`},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"delegate","arguments":[1]}}`, `{"jsonrpc":"2.0","id":8,"error":{"code":-32602,"message":"invalid params: /params/arguments of tools/call delegate must be a JSON object"}}`},
		{`{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"cursor":5}}`, `{"jsonrpc":"2.0","id":10,"error":{"code":-32602,"message":"invalid params: /params/cursor of tools/list must be a string"}}`},
		{`{"jsonrpc":"2.0","id":11,"method":"ping","params":{"_meta":[1]}}`, `{"jsonrpc":"2.0","id":11,"error":{"code":-32602,"message":"invalid params: /params/_meta of ping must be an object"}}`},
		{`{"jsonrpc":"2.0","result":{}}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a message without method is a response and needs the id of the request it answers"}}`},
	} {
		p.send(c.line)
		if !p.out.Scan() {
			t.Fatalf("%.40s: no answer: %v", c.line, p.out.Err())
		}
		if got := p.out.Text(); got != c.want {
			t.Errorf("%.40s:\n got %s\nwant %s", c.line, got, c.want)
		}
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 100+i))
		if m := p.next(); m["id"] != float64(100+i) || m["result"] == nil {
			t.Fatalf("after %.40s: %v, want the answer to ping %d", c.line, m, 100+i)
		}
	}
	inW.Close()
	<-done
	if runErr != nil {
		t.Errorf("Run: %v, want nil at end of input", runErr)
	}
}

// A host that declared elicitation and then ended its input is never
// left waiting for: the elicitation a2ad's tool asks for is answered for
// it as cancelled (whether it was written before the end of input or
// would be after it), so the call is answered, with what the tool returns
// to a user who did not answer.
func TestStdioElicitationAfterEndOfInputIsCancelled(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	type in struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "asks the user"}, func(_ context.Context, req *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, any, error) {
		if req.Params.RequestState == "" {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{AnswerInput: &mcp.ElicitParams{Mode: "form", Message: "which?", RequestedSchema: answerSchema}},
				RequestState: "s"}, nil, nil
		}
		r, _ := req.Params.InputResponses[AnswerInput].(*mcp.ElicitResult)
		if r == nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no response"}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "user: " + r.Action}}}, nil, nil
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = s.Run(context.Background(), &StdioTransport{In: inR, Out: outW, Drain: time.Minute})
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	p := &stdioPeer{t: t, in: inW, out: sc}
	p.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := p.next(); m["id"] != "init" {
		t.Fatalf("initialize: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"ask","arguments":{}}}`)
	inW.Close()
	for {
		m := p.next()
		if m["method"] != nil {
			continue // the elicitation, written before the end of input was read
		}
		res, _ := m["result"].(map[string]any)
		content, _ := res["content"].([]any)
		if m["id"] != "call" || len(content) != 1 || content[0].(map[string]any)["text"] != "user: cancel" {
			t.Fatalf("answer %v, want id call with \"user: cancel\"", m)
		}
		break
	}
	<-done
	if runErr != nil {
		t.Errorf("Run: %v", runErr)
	}
}

// libraryText are phrases of the go-sdk's and encoding/json's errors that
// name Go types or decoding steps: no host may read them.
var libraryText = []string{"Go struct", "Go value", "interface {}", "unmarshal", "mcpedge.", "mcp.", "json: ", "validating root", "invalid ID type", "map[string]"}

// FuzzStdioLine: whatever one line between an initialize and a ping, a2ad's
// stdio session answers without a library's words and goes on to answer
// the ping (tools with a2ad's argument types and argument check).
func FuzzStdioLine(f *testing.F) {
	for _, s := range []string{`{bad`, `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `[]`, `{"jsonrpc":"1.0","id":5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"task_get","arguments":{"task_id":"x","wait_seconds":1e+23}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":"x"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delegate","arguments":{"budget":{"deadline_seconds":1e30}}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"task_get","arguments":{},"requestState":5}}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":5}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":5}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\n\r") {
			return
		}
		s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
		mcp.AddTool(s, &mcp.Tool{Name: "task_get", InputSchema: encodedInputSchema[TaskGetInput]()}, func(context.Context, *mcp.CallToolRequest, TaskGetInput) (*mcp.CallToolResult, TaskOutput, error) {
			return nil, TaskOutput{}, nil
		})
		mcp.AddTool(s, &mcp.Tool{Name: "delegate", InputSchema: encodedInputSchema[DelegateInput]()}, func(context.Context, *mcp.CallToolRequest, DelegateInput) (*mcp.CallToolResult, TaskOutput, error) {
			return nil, TaskOutput{}, nil
		})
		s.AddReceivingMiddleware(secondInitialize, checkToolArguments(schemaLimits{}))
		in := `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
			line + "\n" + `{"jsonrpc":"2.0","id":"end","method":"ping"}` + "\n"
		var out bytes.Buffer
		ran := make(chan error, 1)
		go func() {
			ran <- s.Run(context.Background(), &StdioTransport{In: strings.NewReader(in), Out: &out, Drain: time.Second})
		}()
		select {
		case err := <-ran:
			if err != nil {
				t.Fatalf("%q: Run: %v", line, err)
			}
		case <-time.After(10 * time.Second): // the drain is 1 s: a2ad hangs
			t.Fatalf("%q: Run has not returned after 10 s", line)
		}
		ended := false
		for l := range strings.SplitSeq(out.String(), "\n") {
			for _, lib := range libraryText {
				if strings.Contains(l, lib) {
					t.Fatalf("%q: a host reads %q: %s", line, lib, l)
				}
			}
			ended = ended || strings.HasPrefix(l, `{"jsonrpc":"2.0","id":"end","result"`)
		}
		if !ended {
			t.Fatalf("%q: the ping after it is not answered:\n%s", line, out.String())
		}
	})
}
