package httpbind

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/a2ad/a2ad/artifact"

	"github.com/a2ad/a2ad/internal/a2a"
)

// Defaults of [Limits]. Sizes are bytes, durations wall time.
const (
	// DefaultMaxResponseBytes bounds one response body of an RPC
	// (SendMessage, GetTask, ListTasks, CancelTask, …): 4 MiB. A larger
	// answer is refused, never truncated.
	DefaultMaxResponseBytes = 4 << 20
	// DefaultMaxEventBytes bounds one Server-Sent Event of a stream
	// (SubscribeToTask; WHATWG HTML §9.2 event stream, from its first
	// line to the blank line that ends it): 1 MiB. A stream as a whole
	// is bounded by its caller's context, not by size.
	DefaultMaxEventBytes = 1 << 20
	// DefaultDialTimeout bounds establishing a TCP connection: 10 s.
	DefaultDialTimeout = 10 * time.Second
	// DefaultTLSHandshakeTimeout bounds a TLS handshake: 10 s.
	DefaultTLSHandshakeTimeout = 10 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for a response's
	// headers once the request is written: 30 s. The deadline of a whole
	// call is its caller's context (the broker gives SendMessage 5 s).
	DefaultResponseHeaderTimeout = 30 * time.Second
	// DefaultMaxResponseHeaderBytes bounds a response's header block: 64 KiB.
	DefaultMaxResponseHeaderBytes = 64 << 10
)

// Limits bound what a2ad accepts from an HTTP agent. Zero fields take
// the Default* values.
type Limits struct {
	MaxResponseBytes       int64
	MaxEventBytes          int64
	DialTimeout            time.Duration
	TLSHandshakeTimeout    time.Duration
	ResponseHeaderTimeout  time.Duration
	MaxResponseHeaderBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	if l.DialTimeout <= 0 {
		l.DialTimeout = DefaultDialTimeout
	}
	if l.TLSHandshakeTimeout <= 0 {
		l.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if l.ResponseHeaderTimeout <= 0 {
		l.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if l.MaxResponseHeaderBytes <= 0 {
		l.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	return l
}

// LimitError: an agent's response body, or one event of its stream, is
// larger than a2ad accepts. It wraps a2a.ErrDecode (the agent answered,
// but not with an A2A 1.0 payload a2ad takes).
type LimitError struct {
	AgentID string
	// What is "response body" or "stream event"; Limit is in bytes.
	What  string
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("agent %s: %s larger than a2ad's limit of %d bytes; refused", e.AgentID, e.What, e.Limit)
}

// Unwrap makes the error a2a.ErrDecode's class.
func (e *LimitError) Unwrap() error { return a2a.ErrDecode }

// limitedBody bounds a response body: reading past max bytes fails with
// a *LimitError, so a decoder never takes a truncated prefix for the
// answer. With perEvent, the count restarts at each blank line (the end
// of a Server-Sent Event). Read errors other than io.EOF (the network
// failing) are recorded in call, if any.
type limitedBody struct {
	rc       io.ReadCloser
	err      *LimitError
	max      int64
	perEvent bool
	n        int64
	nl       bool // the last byte was a line feed (a \r before it ignored)
	call     *callInfo
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.n > b.max {
		return 0, b.err
	}
	if !b.perEvent {
		if rem := b.max + 1 - b.n; int64(len(p)) > rem {
			p = p[:rem]
		}
	}
	k, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.call != nil {
		b.call.setBodyErr(err)
	}
	if !b.perEvent {
		b.n += int64(k)
		if b.n > b.max {
			return k - int(b.n-b.max), b.err
		}
		return k, err
	}
	for i, c := range p[:k] {
		switch c {
		case '\n':
			if b.nl {
				b.n = 0
			}
			b.nl = true
		case '\r':
		default:
			b.nl = false
			b.n++
			if b.n > b.max {
				return i, b.err
			}
		}
	}
	return k, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// DuplicateError: an agent's answer (a response body, or one event of its
// stream) has an object with two members of one name. Decoded by a2a-go
// it would keep one of them silently, and a2ad's own checks (artifact
// validation among them) would see a value other readers do not: refused
// whole, as an answer that is not A2A 1.0 a2ad takes (a2a.ErrDecode).
type DuplicateError struct {
	AgentID string
	// What is "response body" or "stream event".
	What string
	// Trailing: the body has more than one JSON value (a2a-go would read
	// the first only), not a duplicate member.
	Trailing bool
}

func (e *DuplicateError) Error() string {
	if e.Trailing {
		return fmt.Sprintf("agent %s: %s has more after its JSON value; refused", e.AgentID, e.What)
	}
	return fmt.Sprintf("agent %s: %s has an object with two members of one name (RFC 8259 §4); refused", e.AgentID, e.What)
}

// Unwrap makes the error a2a.ErrDecode's class.
func (e *DuplicateError) Unwrap() error { return a2a.ErrDecode }

// checkedBody reads a whole response body (bounded before it) and checks
// it before anyone decodes it: a2a-go decodes the first JSON value of a
// body and ignores what follows, so the body must be one JSON value with
// nothing but white space after it, and no object in it may hold two
// members of one name. A body that is not JSON at all is a2a-go's to
// refuse.
func checkedBody(agentID string, rc io.ReadCloser) (io.ReadCloser, error) {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var first json.RawMessage
	if dec.Decode(&first) == nil {
		if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
			return nil, &DuplicateError{AgentID: agentID, What: "response body", Trailing: true}
		}
		if _, dup := artifact.DuplicateMember(first); dup {
			return nil, &DuplicateError{AgentID: agentID, What: "response body"}
		}
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// checkedEvents passes a Server-Sent Events stream on one event at a time,
// each once its data has been checked for duplicate member names. It reads
// events exactly as a2a-go's parser does (lines end at "\n", one "\r"
// before it dropped; an empty line ends an event; "data:" lines, one
// space after the colon dropped, joined with "\n"), so no framing can make
// the two see different events. An event with a duplicate ends the stream
// with a *DuplicateError. Events are bounded before it (limitedBody).
type checkedEvents struct {
	agentID string
	rc      io.ReadCloser
	in      []byte // read, not yet released
	scan    int    // in[:scan] is whole lines of the current event
	data    []byte // the current event's data so far
	out     []byte // checked, not yet handed on
	err     error
}

func (c *checkedEvents) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		buf := make([]byte, 32<<10)
		n, err := c.rc.Read(buf)
		c.in = append(c.in, buf[:n]...)
		for c.err == nil {
			i := bytes.IndexByte(c.in[c.scan:], '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimSuffix(c.in[c.scan:c.scan+i], []byte("\r"))
			c.scan += i + 1
			if len(line) == 0 {
				c.release()
				continue
			}
			c.addLine(line)
		}
		if err != nil && c.err == nil {
			// The stream ended: its last line, and event, as a2a-go takes them.
			if c.scan < len(c.in) {
				c.addLine(bytes.TrimSuffix(c.in[c.scan:], []byte("\r")))
				c.scan = len(c.in)
			}
			c.release()
			if c.err == nil {
				c.err = err
			}
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// addLine takes one line of the current event.
func (c *checkedEvents) addLine(line []byte) {
	v, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	v = bytes.TrimPrefix(v, []byte(" "))
	if len(c.data) > 0 {
		c.data = append(c.data, '\n')
	}
	c.data = append(c.data, v...)
}

// release checks the current event's data and hands its bytes on, or ends
// the stream.
func (c *checkedEvents) release() {
	if len(c.data) > 0 && json.Valid(c.data) {
		if _, dup := artifact.DuplicateMember(c.data); dup {
			c.err = &DuplicateError{AgentID: c.agentID, What: "stream event"}
			c.in, c.scan, c.data = nil, 0, nil
			return
		}
	}
	c.out = append(c.out, c.in[:c.scan]...)
	c.in, c.scan, c.data = c.in[c.scan:], 0, c.data[:0]
}

func (c *checkedEvents) Close() error { return c.rc.Close() }
