package mcpedge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultStdioDrain is how long [StdioTransport] waits, once its input has
// ended, for the answers of calls still being worked on: the longest tool
// wait (50 s) and time to write the answer.
const DefaultStdioDrain = broker.MaxWait + 10*time.Second

// StdioTransport is the transport of `a2ad serve --stdio`: the go-sdk's
// newline-delimited JSON-RPC on stdin and stdout, with two guarantees the
// go-sdk v1.8.0 does not give on its own.
//
//   - Every call read is answered before the connection ends. A host that
//     writes its requests and closes stdin (`printf '…' | a2ad serve
//     --stdio`) gets every response: at the end of input the connection
//     waits for the calls still open, at most Drain, before it reports
//     the end (go-sdk#1061 cancels them at once and drops their answers).
//   - No response goes out for a call after the host's
//     `notifications/cancelled` for it (MCP 2025-11-25, basic/utilities/
//     cancellation: "the receiver SHOULD NOT send a response for the
//     cancelled request"). The cancelled call's context ends as before;
//     its answer, whatever it is, is dropped. A cancellation for a call
//     that was already answered, or never made, changes nothing.
//   - A line that is not a JSON-RPC message a2ad can read is answered with
//     a JSON-RPC error in a2ad's words (-32700, -32600, -32602; see
//     [screen]) and the session goes on (go-sdk v1.8.0 ends it).
//   - Once the input has ended, nothing is asked of the host: a request
//     a2ad would put to it (or had put, unanswered) is answered for it,
//     an elicitation as cancelled (the call then returns the question in
//     its result, as for a host without elicitation).
type StdioTransport struct {
	// Inner is the transport wrapped; nil: [mcp.StdioTransport] on
	// os.Stdin and os.Stdout.
	Inner mcp.Transport
	// Drain bounds the wait for open calls at the end of input; zero:
	// [DefaultStdioDrain]. After it, open calls are cancelled as the
	// go-sdk does.
	Drain time.Duration
	// In and Out are the input and output of the default transport; nil:
	// os.Stdin and os.Stdout. Unused when Inner is set.
	In  io.Reader
	Out io.Writer
}

// lockedWriter serialises the writes of the go-sdk (one message and its
// newline per Write) and of the screen (its error responses).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) Close() error { return nil }

// screenLines copies in to pw one line at a time, each line a JSON-RPC
// message [screen] lets through; a line it refuses is answered on out
// with its JSON-RPC error, in a2ad's words, and the session goes on
// (the go-sdk v1.8.0 ends the session at the first line it cannot read).
// Blank lines are skipped. A line longer than [mcp.DefaultMaxLineLength]
// is refused whole. At the end of in, pw is closed.
func screenLines(in io.Reader, pw *io.PipeWriter, out io.Writer) {
	r := bufio.NewReaderSize(in, 64*1024)
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > mcp.DefaultMaxLineLength {
				tooLong, line = true, line[:0]
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		switch {
		case tooLong:
			e := &screenError{Code: -32600, Message: fmt.Sprintf("invalid request: a message longer than %d bytes is not read", mcp.DefaultMaxLineLength)}
			_, _ = out.Write(append(e.response(), '\n'))
		case len(bytes.TrimSpace(line)) == 0:
		default:
			if e := screen(line); e != nil {
				_, _ = out.Write(append(e.response(), '\n'))
			} else {
				if line[len(line)-1] != '\n' {
					line = append(line, '\n')
				}
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
		}
		line, tooLong = line[:0], false
		if err != nil {
			_ = pw.Close()
			return
		}
	}
}

// Connect implements [mcp.Transport].
func (t *StdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inner := t.Inner
	if inner == nil {
		in, out := t.In, t.Out
		if in == nil {
			in = os.Stdin
		}
		if out == nil {
			out = os.Stdout
		}
		w := &lockedWriter{w: out}
		pr, pw := io.Pipe()
		go screenLines(in, pw, w)
		inner = &mcp.IOTransport{Reader: pr, Writer: w}
	}
	c, err := inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	drain := t.Drain
	if drain <= 0 {
		drain = DefaultStdioDrain
	}
	return &answeringConn{Connection: c, drain: drain, open: map[jsonrpc.ID]bool{}, asked: map[jsonrpc.ID]string{}, idle: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// answeringConn tracks the calls it read until they are answered.
type answeringConn struct {
	mcp.Connection
	drain time.Duration

	mu   sync.Mutex
	open map[jsonrpc.ID]bool // calls read and not yet answered; true: cancelled by the host
	idle chan struct{}       // a token when open may have become empty, or synth filled

	asked  map[jsonrpc.ID]string // requests a2ad put to the host, not yet answered: their methods
	endErr error                 // the input's end, once read
	synth  []*jsonrpc.Response   // answers a2ad gives itself, after endErr, for requests in asked
	// deadline ends the drain (set at the first wait; Read is called by
	// one goroutine).
	deadline time.Time

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: the server stops, nothing more is waited for
}

func (c *answeringConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

func (c *answeringConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	c.mu.Lock()
	ended := c.endErr
	c.mu.Unlock()
	if ended != nil {
		return c.afterEnd(ctx, ended)
	}
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		c.mu.Lock()
		c.endErr = err
		// Nothing the host would answer can arrive now: every request a2ad
		// put to it is answered for it (see [endedResponse]).
		for id, method := range c.asked {
			c.synth = append(c.synth, endedResponse(id, method))
		}
		c.mu.Unlock()
		return c.afterEnd(ctx, err)
	}
	switch m := msg.(type) {
	case *jsonrpc.Response:
		c.mu.Lock()
		delete(c.asked, m.ID)
		c.mu.Unlock()
	case *jsonrpc.Request:
		c.mu.Lock()
		switch {
		case m.IsCall():
			c.open[m.ID] = false
		case m.Method == "notifications/cancelled":
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(m.Params, &p) == nil {
				if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
					if _, open := c.open[id]; open {
						c.open[id] = true
					}
				}
			}
		}
		c.mu.Unlock()
	}
	return msg, nil
}

// afterEnd is Read once the input has ended: the answers a2ad gives
// itself for the requests it put to the host, then, once every call is
// answered (or the drain time has passed), the end.
func (c *answeringConn) afterEnd(ctx context.Context, err error) (jsonrpc.Message, error) {
	if m := c.nextSynth(); m != nil {
		return m, nil
	}
	if c.waitAnswered(ctx) {
		if m := c.nextSynth(); m != nil {
			return m, nil
		}
	}
	return nil, err
}

func (c *answeringConn) nextSynth() jsonrpc.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.synth) == 0 {
		return nil
	}
	m := c.synth[0]
	c.synth = c.synth[1:]
	delete(c.asked, m.ID)
	return m
}

// endedResponse is the answer a2ad gives itself for a request it put to
// a host whose input has ended: an elicitation is cancelled, as a user
// who closed the form would (the call then returns the question in its
// result, as to a host without elicitation); anything else is an error.
func endedResponse(id jsonrpc.ID, method string) *jsonrpc.Response {
	if method == "elicitation/create" {
		return &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"action":"cancel"}`)}
	}
	return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the host's input has ended: no answer can come"}}
}

func (c *answeringConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			c.mu.Lock()
			if c.endErr != nil { // never sent: no answer could come
				c.synth = append(c.synth, endedResponse(req.ID, req.Method))
				c.mu.Unlock()
				c.wake()
				return nil
			}
			c.asked[req.ID] = req.Method
			c.mu.Unlock()
		}
		return c.Connection.Write(ctx, msg)
	}
	c.mu.Lock()
	cancelled := c.open[resp.ID]
	c.mu.Unlock()
	if resp.Error != nil && (strings.Contains(resp.Error.Error(), "unmarshaling") || strings.Contains(resp.Error.Error(), "Go struct")) {
		// The go-sdk's words for params of the wrong types ("unmarshaling
		// … into a *mcp.…Params"): a2ad's instead.
		msg = &jsonrpc.Response{ID: resp.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "invalid params: a member of params has another type than MCP 2025-11-25 gives it (see the method's schema)"}}
	}
	var err error
	if !cancelled {
		err = c.Connection.Write(ctx, msg)
	}
	c.mu.Lock()
	delete(c.open, resp.ID)
	empty := len(c.open) == 0
	c.mu.Unlock()
	if empty {
		c.wake()
	}
	return err
}

func (c *answeringConn) wake() {
	select {
	case c.idle <- struct{}{}:
	default:
	}
}

// waitAnswered returns once no call is open, the drain time has passed,
// the connection is closed or ctx is done (false), or an answer a2ad gives
// itself is ready (true).
func (c *answeringConn) waitAnswered(ctx context.Context) bool {
	if c.deadline.IsZero() {
		c.deadline = time.Now().Add(c.drain)
	}
	t := time.NewTimer(time.Until(c.deadline))
	defer t.Stop()
	for {
		c.mu.Lock()
		n, synth := len(c.open), len(c.synth)
		c.mu.Unlock()
		if synth > 0 {
			return true
		}
		if n == 0 {
			return false
		}
		select {
		case <-c.idle:
		case <-t.C:
			return false
		case <-c.closed:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
