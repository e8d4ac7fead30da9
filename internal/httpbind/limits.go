package httpbind

import (
	"errors"
	"fmt"
	"io"
	"time"

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
	return fmt.Sprintf("httpbind: agent %s: %s larger than a2ad's limit of %d bytes; refused", e.AgentID, e.What, e.Limit)
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
