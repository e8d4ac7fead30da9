package mcpedge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// Cancellation on Streamable HTTP sessions (2025-11-25). A host cancels a
// call with notifications/cancelled on another POST of its session; the
// go-sdk v1.8.0 cancels the handler but still writes the call's response
// on the call's stream. MCP says the receiver SHOULD NOT send a response
// for a cancelled request (basic/utilities/cancellation): [HTTPHandler]
// notes each cancellation before the go-sdk sees it and drops the
// cancelled call's response event from its stream. (2026-07-28 has no
// sessions: a call is cancelled by closing its request, and nothing can be
// written after that. stdio: [StdioTransport].)

// sessionCall names one call of one session.
type sessionCall struct{ session, id string }

// cancellations are the calls open on sessions, and whether each was
// cancelled. Entries live while the call's POST is served.
type cancellations struct {
	mu   sync.Mutex
	open map[sessionCall]bool
}

func (c *cancellations) begin(k sessionCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = map[sessionCall]bool{}
	}
	c.open[k] = false
}

func (c *cancellations) end(k sessionCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, k)
}

// cancel marks k cancelled if it is open (a cancellation of a call that
// was answered, or never made, is ignored, as MCP says).
func (c *cancellations) cancel(k sessionCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.open[k]; ok {
		c.open[k] = true
	}
}

func (c *cancellations) cancelled(k sessionCall) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[k]
}

// dropCancelled is the ResponseWriter of one call's POST: once the call is
// cancelled, the server-sent event carrying its response is not written.
// Progress notifications and anything else still go out.
type dropCancelled struct {
	http.ResponseWriter
	cx  *cancellations
	key sessionCall
}

func (d *dropCancelled) Write(b []byte) (int, error) {
	if d.cx.cancelled(d.key) && isResponseEvent(b, d.key.id) {
		return len(b), nil
	}
	return d.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush (the go-sdk flushes
// each event).
func (d *dropCancelled) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// isResponseEvent reports whether b, one server-sent event as the go-sdk
// writes it (one Write per event), carries the JSON-RPC response to id.
func isResponseEvent(b []byte, id string) bool {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(data, &m) == nil && m.Method == "" && canonicalID(m.ID) == id {
			return true
		}
	}
	return false
}

// canonicalID is a JSON-RPC id as one string whatever its spelling
// ("n:7" for 7 and 7.0, "s:7" for "7"); "" for none, null or another type.
func canonicalID(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	switch v := v.(type) {
	case float64:
		return "n:" + strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		return "s:" + v
	}
	return ""
}
