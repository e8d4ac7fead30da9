package daemon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/metrics"
)

// HTTPLimits bound what clients of the HTTP listener (hosts on /mcp,
// operators on /v1/, scrapers and probes) can hold of a2ad: connections,
// time and bytes (docs/operations.md, "HTTP limits"). Zero fields take
// [DefaultHTTPLimits].
type HTTPLimits struct {
	// MaxConnections bounds the HTTP connections open at once; beyond,
	// a new connection is closed as soon as it is accepted (a TCP reset)
	// and counted in a2ad_http_connections_refused_total, and the open
	// ones are unharmed. It must fit, with 1024 to spare for NATS and
	// the store, under the process's open-file limit (RLIMIT_NOFILE),
	// which a2ad checks at start. Default 8192.
	MaxConnections int `yaml:"max_connections"`
	// ReadHeaderTimeoutSeconds is how long a client has to send a
	// request's headers, from its first byte (or, on a new connection,
	// from the connection); a connection that sends nothing is closed
	// after it. Default 10.
	ReadHeaderTimeoutSeconds int `yaml:"read_header_timeout_seconds"`
	// ReadTimeoutSeconds is how long a client has to send a whole
	// request, headers and body; it does not bound what a2ad does with
	// it afterwards. At least read_header_timeout_seconds. Default 30.
	ReadTimeoutSeconds int `yaml:"read_timeout_seconds"`
	// WriteTimeoutSeconds is how long one write of a response may take to
	// reach the client. The deadline is renewed at each write, so a tool
	// call that waits (delegate, task_get or task_respond with
	// wait_seconds, at most 50 s) and an SSE stream (GET /mcp,
	// /v1/tasks/watch) are not cut, while a client that stops reading is.
	// Default 30.
	WriteTimeoutSeconds int `yaml:"write_timeout_seconds"`
	// IdleTimeoutSeconds is how long a keep-alive connection may wait,
	// idle, for its next request before a2ad closes it. Default 120.
	IdleTimeoutSeconds int `yaml:"idle_timeout_seconds"`
	// MaxHeaderBytes bounds a request's header lines (method, URL and
	// headers), in bytes; over it a2ad answers 431. Default 65536
	// (64 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxBodyBytes bounds a request's body, in bytes; over it a2ad
	// answers 413 (request_too_large). At most 4194304 (4 MiB), the MCP
	// SDK's own bound. Default 4194304.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
}

// DefaultHTTPLimits are the HTTP limits of fields http_limits leaves zero.
var DefaultHTTPLimits = HTTPLimits{MaxConnections: 8192, ReadHeaderTimeoutSeconds: 10, ReadTimeoutSeconds: 30,
	WriteTimeoutSeconds: 30, IdleTimeoutSeconds: 120, MaxHeaderBytes: 64 << 10, MaxBodyBytes: 4 << 20}

// fdReserve is the open files max_connections leaves for everything else
// (NATS connections, the JetStream store, the log).
const fdReserve = 1024

// Or returns l with each zero field taken from d.
func (l HTTPLimits) Or(d HTTPLimits) HTTPLimits {
	l.MaxConnections = cmp.Or(l.MaxConnections, d.MaxConnections)
	l.ReadHeaderTimeoutSeconds = cmp.Or(l.ReadHeaderTimeoutSeconds, d.ReadHeaderTimeoutSeconds)
	l.ReadTimeoutSeconds = cmp.Or(l.ReadTimeoutSeconds, d.ReadTimeoutSeconds)
	l.WriteTimeoutSeconds = cmp.Or(l.WriteTimeoutSeconds, d.WriteTimeoutSeconds)
	l.IdleTimeoutSeconds = cmp.Or(l.IdleTimeoutSeconds, d.IdleTimeoutSeconds)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, d.MaxHeaderBytes)
	l.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, d.MaxBodyBytes)
	return l
}

// Check refuses HTTP limits no host could work under, naming the key.
func (l HTTPLimits) Check() error {
	switch {
	case l.MaxConnections < 1:
		return fmt.Errorf("config: http_limits.max_connections %d: want at least 1", l.MaxConnections)
	case l.ReadHeaderTimeoutSeconds < 1:
		return fmt.Errorf("config: http_limits.read_header_timeout_seconds %d: want at least 1", l.ReadHeaderTimeoutSeconds)
	case l.ReadTimeoutSeconds < l.ReadHeaderTimeoutSeconds:
		return fmt.Errorf("config: http_limits.read_timeout_seconds %d: want at least read_header_timeout_seconds (%d): it bounds the headers and the body", l.ReadTimeoutSeconds, l.ReadHeaderTimeoutSeconds)
	case l.WriteTimeoutSeconds < 1:
		return fmt.Errorf("config: http_limits.write_timeout_seconds %d: want at least 1", l.WriteTimeoutSeconds)
	case l.IdleTimeoutSeconds < 1:
		return fmt.Errorf("config: http_limits.idle_timeout_seconds %d: want at least 1", l.IdleTimeoutSeconds)
	case l.MaxHeaderBytes < 4096:
		return fmt.Errorf("config: http_limits.max_header_bytes %d: want at least 4096 (a bearer token alone may take 2 KiB)", l.MaxHeaderBytes)
	case l.MaxBodyBytes < 1024 || l.MaxBodyBytes > 4<<20:
		return fmt.Errorf("config: http_limits.max_body_bytes %d: want 1024 to 4194304 (the MCP SDK's own bound)", l.MaxBodyBytes)
	}
	return nil
}

// fitConnections checks max_connections against the open-file limit
// (RLIMIT_NOFILE, which Go raises to its hard limit at start): a
// configured value that does not fit is an error saying what to do; the
// default is lowered to fit, with a warning.
func fitConnections(configured int, l HTTPLimits, nofile uint64, natsConns int, log *slog.Logger) (HTTPLimits, error) {
	reserve := fdReserve + int64(natsConns)
	if nofile == 0 || int64(l.MaxConnections)+reserve <= int64(nofile) {
		return l, nil
	}
	room := int64(nofile) - reserve
	if configured != 0 || room < 16 {
		of := fmt.Sprintf("%d of them for NATS and its store", fdReserve)
		if natsConns > 0 {
			of = fmt.Sprintf("%d of them for the embedded NATS server's connections (nats_limits.max_connections) and %d for its store", natsConns, fdReserve)
		}
		return l, fmt.Errorf("config: http_limits.max_connections %d: this process may open %d files (RLIMIT_NOFILE) and a2ad keeps %s; "+
			"want at most %d, or raise the limit (ulimit -n, LimitNOFILE= in the systemd unit)", l.MaxConnections, nofile, of, max(room, 0))
	}
	log.Warn("http_limits.max_connections lowered to fit the open-file limit (RLIMIT_NOFILE); raise the limit for more",
		"max_connections", room, "default", l.MaxConnections, "rlimit_nofile", nofile)
	l.MaxConnections = int(room)
	return l, nil
}

// newHTTPServer returns the HTTP server of h under the limits l: header,
// request, idle and per-write deadlines, and the header and body bounds
// ([boundRequests]).
//
// http.Server's WriteTimeout alone runs from the end of a request's
// headers, so a 50 s delegate or an SSE stream would lose its connection
// to it: it only covers what net/http writes itself (a 431, a 400), and
// [boundRequests] sets a deadline for each write of a handler only (in
// HTTP/2 a passed deadline resets the stream, written to or not).
// ReadTimeout can stay as it is: net/http clears the read deadline once
// the body is read (to watch for the client going away), so it never
// cuts a handler that waits.
func newHTTPServer(h http.Handler, l HTTPLimits) *http.Server {
	return &http.Server{
		Handler:           boundRequests(h, l),
		ReadHeaderTimeout: time.Duration(l.ReadHeaderTimeoutSeconds) * time.Second,
		ReadTimeout:       time.Duration(l.ReadTimeoutSeconds) * time.Second,
		WriteTimeout:      time.Duration(l.WriteTimeoutSeconds) * time.Second,
		IdleTimeout:       time.Duration(l.IdleTimeoutSeconds) * time.Second,
		// net/http answers 431 over it (it allows 4096 bytes more).
		MaxHeaderBytes: l.MaxHeaderBytes,
	}
}

// boundRequests gives each request of h the body and write bounds of l: a
// body over MaxBodyBytes is answered 413 (at once when Content-Length
// says so, else when the handler reads past it), and each write of the
// response (headers, writes, flushes, and the last flush after h returns)
// has WriteTimeoutSeconds from its start.
func boundRequests(h http.Handler, l HTTPLimits) http.Handler {
	writeTimeout := time.Duration(l.WriteTimeoutSeconds) * time.Second
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: writeTimeout}
		// No deadline while the handler waits: HTTP/2 resets a stream
		// whose deadline passes, written to or not (a delegate waiting
		// for its agent, an SSE stream between events).
		bw.clear()
		if r.ContentLength > l.MaxBodyBytes {
			bw.Header().Set("Connection", "close") // the unread body is not drained
			tooLarge(bw, l.MaxBodyBytes)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(bw, r.Body, l.MaxBodyBytes)
		}
		h.ServeHTTP(bw, r)
		bw.renew()
	})
}

// tooLarge answers 413 in a2ad's words, in the shape of the admin API's
// and the token challenges' errors.
func tooLarge(w http.ResponseWriter, limit int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "request_too_large",
		"message": fmt.Sprintf("the request body is larger than %d bytes (http_limits.max_body_bytes)", limit)}})
}

// deadlineWriter sets the write deadline (of the connection in HTTP/1.1,
// of the stream in HTTP/2) for the time of each write and clears it after,
// so that the write timeout bounds each write, not the request: a client
// that stops reading is cut off, a handler that waits is not.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *deadlineWriter) renew() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout)) }
func (w *deadlineWriter) clear() { _ = w.rc.SetWriteDeadline(time.Time{}) }

func (w *deadlineWriter) WriteHeader(code int) {
	w.renew()
	w.ResponseWriter.WriteHeader(code)
	w.clear()
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.renew()
	defer w.clear()
	return w.ResponseWriter.Write(b)
}

// Flush makes the writer an http.Flusher, as SSE handlers expect.
func (w *deadlineWriter) Flush() {
	w.renew()
	_ = w.rc.Flush()
	w.clear()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// connLimitListener accepts at most max connections open at once: over
// it, a new connection is closed at once with a TCP reset and counted.
//
// golang.org/x/net/netutil.LimitListener blocks in Accept instead, which
// leaves new connections in the kernel's accept queue: their clients see
// a connection that never answers (until their own timeout), and once
// the queue is full the kernel drops SYNs. A reset tells a client at once
// that a2ad is full, and the connections already open go on unharmed.
type connLimitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
	m    *metrics.HTTP
}

func limitConnections(ln net.Listener, max int, m *metrics.HTTP) net.Listener {
	return &connLimitListener{Listener: ln, max: int64(max), m: m}
}

func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset: nothing lingers in TIME_WAIT here
			}
			_ = c.Close()
			l.m.ConnectionsRefused.Inc()
			continue
		}
		l.m.ConnectionsOpen.Inc()
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// limitedConn gives its place back when closed, once.
type limitedConn struct {
	net.Conn
	l    *connLimitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.m.ConnectionsOpen.Dec()
	})
	return err
}

// CloseWrite lets net/http half-close the connection before closing it
// (it does so for a response that ends the connection).
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
