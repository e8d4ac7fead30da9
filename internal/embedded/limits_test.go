package embedded

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// startLimited starts the embedded server with limits l (no
// authorization unless password is set).
func startLimited(t *testing.T, l Limits, password string) *server.Server {
	t.Helper()
	s, err := Start(Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", MaxStore: 64 << 20, Limits: l, DaemonPassword: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// raw is a client that speaks the NATS protocol by hand, as an agent
// ignoring its library's checks would.
type raw struct {
	c    net.Conn
	r    *bufio.Reader
	wait time.Duration // for each line; default 10 s
}

func dialRaw(t *testing.T, s *server.Server) *raw {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &raw{c: c, r: bufio.NewReader(c)}
	if line := r.line(t); !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("first line %q, want INFO", line)
	}
	return r
}

// line reads one protocol line (without CRLF); "EOF" once the server has
// closed the connection.
func (r *raw) line(t *testing.T) string {
	t.Helper()
	wait := r.wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	_ = r.c.SetReadDeadline(time.Now().Add(wait))
	l, err := r.r.ReadString('\n')
	if err != nil {
		if l == "" {
			return "EOF"
		}
	}
	return strings.TrimRight(l, "\r\n")
}

func (r *raw) send(t *testing.T, s string) {
	t.Helper()
	if _, err := r.c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func connect(t *testing.T, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), append(opts, nats.MaxReconnects(0))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// echoes reports whether nc still publishes and receives: a round trip
// through the server on a fresh subject.
func echoes(t *testing.T, nc *nats.Conn) bool {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if nc.Publish(inbox, []byte("ping")) != nil {
		return false
	}
	m, err := sub.NextMsg(5 * time.Second)
	return err == nil && string(m.Data) == "ping"
}

// A message over MaxPayload is refused: nats.go refuses to send it
// (nats.ErrMaxPayload, the limit is in the server's INFO) and a client
// that sends it anyway is cut off with "Maximum Payload Violation"; other
// connections, and the one nats.go protected, go on.
func TestMaxPayloadRefusesOnlyTheOversizedPublisher(t *testing.T) {
	s := startLimited(t, Limits{}, "")
	agent, other := connect(t, s), connect(t, s)
	if got := agent.MaxPayload(); got != MaxPayload {
		t.Fatalf("max_payload announced %d, want %d", got, MaxPayload)
	}
	if err := agent.Publish("a2a.events.x.t", make([]byte, MaxPayload+1)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("publish of %d bytes: %v, want nats.ErrMaxPayload", MaxPayload+1, err)
	}
	if err := agent.Publish("a2a.events.x.t", make([]byte, MaxPayload-64)); err != nil {
		t.Fatalf("publish just under the limit: %v", err)
	}
	r := dialRaw(t, s)
	r.send(t, "CONNECT {\"verbose\":false}\r\nPUB a2a.events.x.t 1048577\r\n")
	if got := r.line(t); got != "-ERR 'Maximum Payload Violation'" {
		t.Fatalf("raw oversized PUB answered %q, want -ERR 'Maximum Payload Violation'", got)
	}
	if got := r.line(t); got != "EOF" {
		t.Fatalf("after the violation the server sent %q, want the connection closed", got)
	}
	if !echoes(t, agent) || !echoes(t, other) {
		t.Fatal("the other connections were harmed by one client's oversized message")
	}
}

// A SUB beyond MaxSubscriptions on one connection is refused and the
// client told (nats.ErrMaxSubscriptionsExceeded); its earlier
// subscriptions and its connection stay.
func TestMaxSubscriptionsPerConnection(t *testing.T) {
	s := startLimited(t, Limits{MaxSubscriptions: 8}, "")
	errs := make(chan error, 16)
	nc := connect(t, s, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	var subs []*nats.Subscription
	for i := range 8 {
		sub, err := nc.SubscribeSync("a2a.agent.x." + string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ninth, err := nc.SubscribeSync("a2a.agent.x.ninth")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrMaxSubscriptionsExceeded) {
			t.Fatalf("ninth subscription: %v, want nats.ErrMaxSubscriptionsExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ninth subscription of eight allowed was not refused")
	}
	pub := connect(t, s)
	_ = pub.Publish("a2a.agent.x.a", []byte("to the first"))
	_ = pub.Publish("a2a.agent.x.ninth", []byte("to the ninth"))
	_ = pub.Flush()
	if m, err := subs[0].NextMsg(5 * time.Second); err != nil || string(m.Data) != "to the first" {
		t.Fatalf("first subscription after the refusal: %v", err)
	}
	if m, err := ninth.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("the refused subscription received %q", m.Data)
	}
	if !nc.IsConnected() {
		t.Fatal("the connection was closed for one subscription too many")
	}
}

// Beyond MaxConnections a new connection is refused: the server sends
// its INFO and "-ERR 'maximum connections exceeded'" and closes it, never
// answering its PING (nats.go fails to connect, with that error or the
// broken pipe of the closed connection, as the race goes); those open are
// unharmed.
func TestMaxConnectionsRefusesNewOnly(t *testing.T) {
	s := startLimited(t, Limits{MaxConnections: 3}, "")
	open := []*nats.Conn{connect(t, s), connect(t, s), connect(t, s)}
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a fourth connection of three allowed was kept open; it read %q", got)
	}
	if strings.Contains(string(got), "PONG") {
		t.Fatalf("a fourth connection of three allowed was answered: %q", got)
	}
	if nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("nats.go connected as a fourth connection of three allowed")
	}
	for i, nc := range open {
		if !echoes(t, nc) {
			t.Fatalf("open connection %d harmed by the refused ones", i)
		}
	}
}

// A connection that never authenticates is closed after AuthTimeout: idle
// unauthenticated connections cannot pile up.
func TestAuthTimeoutClosesSilentConnections(t *testing.T) {
	s := startLimited(t, Limits{AuthTimeout: time.Second}, strings.Repeat("p", 32))
	r := dialRaw(t, s)
	r.wait = DefaultLimits.AuthTimeout - time.Second // the configured second, not the default
	if got := r.line(t); got != "-ERR 'Authentication Timeout'" {
		t.Fatalf("silent connection got %q, want -ERR 'Authentication Timeout'", got)
	}
	if got := r.line(t); got != "EOF" {
		t.Fatalf("after the timeout the server sent %q, want the connection closed", got)
	}
}

// A subscriber that stops reading is closed as a slow consumer once the
// server holds MaxPendingBytes for it; the publisher and a subscriber
// that reads get every message.
func TestMaxPendingClosesTheSlowConsumerOnly(t *testing.T) {
	s := startLimited(t, Limits{MaxPendingBytes: 1 << 20}, "")
	slow := dialRaw(t, s)
	slow.send(t, "CONNECT {\"verbose\":false}\r\nSUB flood 1\r\nPING\r\n")
	if got := slow.line(t); got != "PONG" {
		t.Fatalf("slow subscriber: %q, want PONG", got)
	}
	reader := connect(t, s)
	got := make(chan struct{}, 64)
	if _, err := reader.Subscribe("flood", func(*nats.Msg) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	_ = reader.Flush()
	pub := connect(t, s)
	const n = 48 // 48 MiB for a reader that reads nothing
	chunk := make([]byte, MaxPayload-1024)
	for i := range n {
		if err := pub.Publish("flood", chunk); err != nil {
			t.Fatal(err)
		}
		_ = pub.Flush()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("the reading subscriber did not get message %d within 10 s (slow consumers closed: %d, reader %v, last error %v)",
				i+1, s.NumSlowConsumersClients(), reader.Status(), reader.LastError())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.NumSlowConsumersClients() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s.NumSlowConsumersClients() == 0 {
		t.Fatal("the subscriber that reads nothing was never closed as a slow consumer")
	}
	if !echoes(t, pub) || !echoes(t, reader) {
		t.Fatal("the publisher or the reading subscriber was harmed by the slow one")
	}
}

// Port 0 is a free port, as for a2ad's HTTP listener, not nats-server's
// default 4222 (red team: --nats-listen 127.0.0.1:0 took 4222).
func TestPortZeroIsAFreePort(t *testing.T) {
	s, err := Start(Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", MaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr.Port == 0 || addr.Port == server.DEFAULT_PORT {
		t.Fatalf("listening on %v, want a free port other than %d", s.Addr(), server.DEFAULT_PORT)
	}
}
