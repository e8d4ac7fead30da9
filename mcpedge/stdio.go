package mcpedge

import (
	"context"
	"encoding/json"
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
type StdioTransport struct {
	// Inner is the transport wrapped; nil: [mcp.StdioTransport] on
	// os.Stdin and os.Stdout.
	Inner mcp.Transport
	// Drain bounds the wait for open calls at the end of input; zero:
	// [DefaultStdioDrain]. After it, open calls are cancelled as the
	// go-sdk does.
	Drain time.Duration
}

// Connect implements [mcp.Transport].
func (t *StdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inner := t.Inner
	if inner == nil {
		inner = &mcp.StdioTransport{}
	}
	c, err := inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	drain := t.Drain
	if drain <= 0 {
		drain = DefaultStdioDrain
	}
	return &answeringConn{Connection: c, drain: drain, open: map[jsonrpc.ID]bool{}, idle: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// answeringConn tracks the calls it read until they are answered.
type answeringConn struct {
	mcp.Connection
	drain time.Duration

	mu   sync.Mutex
	open map[jsonrpc.ID]bool // calls read and not yet answered; true: cancelled by the host
	idle chan struct{}       // a token when open may have become empty

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: the server stops, nothing more is waited for
}

func (c *answeringConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

func (c *answeringConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		c.waitAnswered(ctx)
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok {
		c.mu.Lock()
		switch {
		case req.IsCall():
			c.open[req.ID] = false
		case req.Method == "notifications/cancelled":
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(req.Params, &p) == nil {
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

func (c *answeringConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return c.Connection.Write(ctx, msg)
	}
	c.mu.Lock()
	cancelled := c.open[resp.ID]
	c.mu.Unlock()
	var err error
	if !cancelled {
		err = c.Connection.Write(ctx, msg)
	}
	c.mu.Lock()
	delete(c.open, resp.ID)
	empty := len(c.open) == 0
	c.mu.Unlock()
	if empty {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
	return err
}

// waitAnswered returns once no call is open, the drain time has passed,
// the connection is closed or ctx is done.
func (c *answeringConn) waitAnswered(ctx context.Context) {
	t := time.NewTimer(c.drain)
	defer t.Stop()
	for {
		c.mu.Lock()
		n := len(c.open)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.idle:
		case <-t.C:
			return
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}
