package daemon_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// startLimited runs a2ad with the given HTTP and rate limits on a real
// embedded NATS server, with the reference agent (misbehaving as asked).
func startLimited(t *testing.T, limits daemon.HTTPLimits, rates mcpedge.RateLimits, misbehave map[string]string, more ...func(*daemon.Config)) *daemon.Daemon {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	var logTo io.Writer = io.Discard
	if os.Getenv("A2AD_TEST_LOG") != "" {
		logTo = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := daemon.Config{
		NATSURL: ns.ClientURL(), HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), HTTPLimits: limits, RateLimits: rates,
		Agents: []daemon.AgentConfig{{
			AgentConfig:     agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default", "acme"}, TrustOnFirstUse: true},
			EvidenceSchemas: map[string]string{"assess_refund_risk": "refund_evidence"},
		}},
	}
	for _, f := range more {
		f(&cfg)
	}
	d, err := daemon.Start(context.Background(), cfg, log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	nc, err := nats.Connect(ns.ClientURL(), refagent.ConnectOptions("fraud-review", "")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := refagent.New(nc, refagent.Config{AgentID: "fraud-review", Card: a2ad.FraudReviewCard(), Misbehave: misbehave, Logger: log, Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	waitFor(t, "agent approved", func() bool {
		r, err := d.Service.Agents.Get(context.Background(), "fraud-review")
		return err == nil && r.Delegable
	})
	return d
}

func devToken(t *testing.T, d *daemon.Daemon, sub, tenant, scope string) string {
	t.Helper()
	tok, err := mcpedge.MintDevToken(d.Config.DataDir, d.Auth.Audience(), sub, tenant, scope, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func hostSession(t *testing.T, d *daemon.Daemon, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// rawConn is one HTTP/1.1 keep-alive connection spoken by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, d *daemon.Daemon) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(d.HTTPURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// get sends GET path on the connection and returns the response's status
// and body.
func (c *rawConn) get(t *testing.T, path string) (int, string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// closedByServer reports whether the server closed the connection (EOF
// or a reset) within a generous while (20 s: less than the default
// read_timeout_seconds, which net/http would take for an idle timeout
// left unset), rather than keeping it open.
func (c *rawConn) closedByServer(t *testing.T) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

// metricIn is the value of the series name{labels} in a /metrics body.
func metricIn(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}

// A keep-alive connection left idle is closed after idle_timeout_seconds
// (before issue 14 it never was), and a connection that sends nothing
// after read_header_timeout_seconds.
func TestHTTPIdleConnectionsAreClosed(t *testing.T) {
	d := startLimited(t, daemon.HTTPLimits{IdleTimeoutSeconds: 1, ReadHeaderTimeoutSeconds: 1}, mcpedge.RateLimits{}, nil)
	t.Run("keep-alive after GET /healthz", func(t *testing.T) {
		c := dialRaw(t, d)
		if code, body := c.get(t, "/healthz"); code != http.StatusOK || body != `{"status":"ok","version":"devel"}`+"\n" {
			t.Fatalf("GET /healthz: %d %q", code, body)
		}
		if !c.closedByServer(t) {
			t.Error("an idle keep-alive connection was still open after 20 s, want it closed after idle_timeout_seconds (1)")
		}
	})
	t.Run("nothing sent", func(t *testing.T) {
		c := dialRaw(t, d)
		if !c.closedByServer(t) {
			t.Error("a connection that sent nothing was still open after 20 s, want it closed after read_header_timeout_seconds (1)")
		}
	})
}

// Over max_connections a new connection is closed at once, counted, and
// the open ones go on answering.
func TestHTTPMaxConnectionsRefusesNewOnesOnly(t *testing.T) {
	const max = 4
	d := startLimited(t, daemon.HTTPLimits{MaxConnections: max}, mcpedge.RateLimits{}, nil)
	var open []*rawConn
	for range max {
		c := dialRaw(t, d)
		if code, _ := c.get(t, "/healthz"); code != http.StatusOK {
			t.Fatalf("GET /healthz: %d", code)
		}
		open = append(open, c)
	}
	for i := range 3 {
		// The kernel completes the handshake and a2ad resets the
		// connection: the dial, the write or the read fails.
		nc, err := net.Dial("tcp", strings.TrimPrefix(d.HTTPURL, "http://"))
		if err != nil {
			continue
		}
		c := &rawConn{Conn: nc, r: bufio.NewReader(nc)}
		t.Cleanup(func() { nc.Close() })
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err == nil {
			if !c.closedByServer(t) {
				t.Fatalf("connection %d over max_connections was kept open, want it closed at once", max+i+1)
			}
		}
	}
	for i, c := range open {
		if code, _ := c.get(t, "/healthz"); code != http.StatusOK {
			t.Errorf("open connection %d: GET /healthz %d after the refusals, want 200", i, code)
		}
	}
	_, metrics := open[0].get(t, "/metrics")
	if n := metricIn(t, metrics, "a2ad_http_connections_refused_total"); n != 3 {
		t.Errorf("a2ad_http_connections_refused_total = %v, want 3", n)
	}
	if n := metricIn(t, metrics, "a2ad_http_connections_open"); n != max {
		t.Errorf("a2ad_http_connections_open = %v, want %d", n, max)
	}
}

// A tool call that waits longer than write_timeout_seconds (delegate and
// task_get with wait_seconds), and an SSE stream of the admin API that
// runs longer, are not cut by it: the deadline bounds each write.
func TestHTTPLongCallsOutliveTheWriteTimeout(t *testing.T) {
	d := startLimited(t, daemon.HTTPLimits{WriteTimeoutSeconds: 1, ReadHeaderTimeoutSeconds: 1, ReadTimeoutSeconds: 1}, mcpedge.RateLimits{}, map[string]string{"C-801": "silent", "C-802": "silent"})
	cs := hostSession(t, d, devToken(t, d, "host", "default", "a2a:read a2a:delegate"))

	args := delegateArgs(evidence("C-801", 1999))
	args["wait_seconds"] = 3
	start := time.Now()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("delegate waiting 3 s with a 1 s write timeout: %v %s", err, errText(res))
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("delegate returned after %v: the agent answered, so the call did not outlive the write timeout", took)
	}
	out := res.StructuredContent.(map[string]any)
	if out["state"] != "submitted" {
		t.Fatalf("delegate: state %v, want submitted (the agent is silent)", out["state"])
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "task_get", Arguments: map[string]any{"task_id": out["task_id"], "wait_seconds": 2}})
	if err != nil || res.IsError {
		t.Fatalf("task_get waiting 2 s with a 1 s write timeout: %v %+v", err, res)
	}

	watchOutlivesTheWriteTimeout(t, d, http.DefaultClient, cs, "C-802", 1)
}

// The same over HTTP/2 (TLS, as browsers and most HTTP clients speak to
// an https listener): measured before, a long delegate and an SSE stream
// were reset at the write timeout (INTERNAL_ERROR), since HTTP/2 arms a
// timer per stream from its write deadline whether anything is written
// or not. A deadline is now set only while a write is under way.
func TestHTTPLongCallsOutliveTheWriteTimeoutOverHTTP2(t *testing.T) {
	ca := testcert.NewCA(t, "h2 test CA")
	certFile, keyFile := ca.Server(t).WriteFiles(t, t.TempDir(), "server")
	d := startLimited(t, daemon.HTTPLimits{WriteTimeoutSeconds: 1, ReadHeaderTimeoutSeconds: 1, ReadTimeoutSeconds: 1}, mcpedge.RateLimits{},
		map[string]string{"C-811": "silent", "C-812": "silent"},
		func(c *daemon.Config) { c.TLS = daemon.TLSConfig{CertFile: certFile, KeyFile: keyFile} })
	var protos sync.Map
	h2 := &protoRecorder{next: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}, seen: &protos}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "h2-host", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp",
			HTTPClient: &http.Client{Transport: mcpedge.BearerTransport(devToken(t, d, "host", "default", "a2a:read a2a:delegate"), h2)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	args := delegateArgs(evidence("C-811", 1999))
	args["wait_seconds"] = 3
	start := time.Now()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("delegate waiting 3 s over HTTP/2 with a 1 s write timeout: %v %s", err, errText(res))
	}
	if took := time.Since(start); took < 2*time.Second || res.StructuredContent.(map[string]any)["state"] != "submitted" {
		t.Fatalf("delegate returned after %v with %v: want submitted after its 3 s wait", took, res.StructuredContent)
	}
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Fatal("the host did not speak HTTP/2")
	}

	watchOutlivesTheWriteTimeout(t, d, &http.Client{Transport: h2}, cs, "C-812", 2)
}

// watchOutlivesTheWriteTimeout opens GET /v1/tasks/watch with client
// (speaking HTTP major version proto), waits past the write deadline its
// first write set, delegates caseID through cs, and wants the stream to
// deliver the new task.
func watchOutlivesTheWriteTimeout(t *testing.T, d *daemon.Daemon, client *http.Client, cs *mcp.ClientSession, caseID string, proto int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, d.HTTPURL+"/v1/tasks/watch", nil)
	req.Header.Set("Authorization", "Bearer "+devToken(t, d, "ops", "default", "a2a:admin"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != proto {
		t.Fatalf("GET /v1/tasks/watch: %d over %s, want 200 over HTTP/%d", resp.StatusCode, resp.Proto, proto)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l := <-lines; l != ": watching" {
		t.Fatalf("watch: first line %q", l)
	}
	time.Sleep(2500 * time.Millisecond) // past the write deadline the first write set
	args := delegateArgs(evidence(caseID, 1999))
	args["wait_seconds"] = 0
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: args}); err != nil || res.IsError {
		t.Fatalf("delegate: %v %+v", err, res)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the watch stream (%s) ended after the write timeout, want it to deliver the new task", resp.Proto)
			}
			if l == "event: task" {
				return
			}
		case <-timeout:
			t.Fatalf("no task event on the watch stream (%s) within 30 s", resp.Proto)
		}
	}
}

// protoRecorder notes the protocol of each response.
type protoRecorder struct {
	next http.RoundTripper
	seen *sync.Map
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if err == nil {
		p.seen.Store(resp.Proto, true)
	}
	return resp, err
}

// Headers over max_header_bytes get 431; bodies over max_body_bytes get
// 413 request_too_large, whether Content-Length announces them or not,
// on /mcp and /v1/ alike; a body under the limit is served.
func TestHTTPHeaderAndBodyLimits(t *testing.T) {
	d := startLimited(t, daemon.HTTPLimits{MaxHeaderBytes: 4096, MaxBodyBytes: 2048}, mcpedge.RateLimits{}, nil)
	host := devToken(t, d, "host", "default", "a2a:read a2a:delegate")
	ops := devToken(t, d, "ops", "default", "a2a:admin")

	req, _ := http.NewRequest(http.MethodGet, d.HTTPURL+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("a", 16<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("16 KiB of headers: %d, want 431", resp.StatusCode)
	}

	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"task_get","arguments":{"task_id":"` + strings.Repeat("x", 4096) + `"}}}`
	want := `{"error":{"code":"request_too_large","message":"the request body is larger than 2048 bytes (http_limits.max_body_bytes)"}}` + "\n"
	for _, c := range []struct {
		name, method, path, token string
		body                      io.Reader
	}{
		{"/mcp with Content-Length", http.MethodPost, "/mcp", host, strings.NewReader(big)},
		{"/mcp chunked", http.MethodPost, "/mcp", host, io.MultiReader(strings.NewReader(big))},
		{"/v1/ with Content-Length", http.MethodPost, "/v1/tasks/t-1/cancel", ops, strings.NewReader(big)},
	} {
		req, _ := http.NewRequest(c.method, d.HTTPURL+c.path, c.body)
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != want {
			t.Errorf("%s: %d %s, want 413 %s", c.name, resp.StatusCode, b, want)
		}
	}

	cs := hostSession(t, d, host) // initialize, tools/list…: small bodies
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Errorf("agents_list under the body limit: %v %+v", err, res)
	}
}

// postMCP sends one JSON-RPC body to /mcp as a host without a session.
func postMCP(t *testing.T, d *daemon.Daemon, token, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, d.HTTPURL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A principal over its write limit gets 429 with Retry-After (its go-sdk
// session survives and its reads go on); another principal of the tenant
// writes until the tenant's limit, and another tenant is unaffected; the
// admin API is limited the same way, and a batch spends one write per
// message; a2ad_rate_limited_total counts each
// refusal by edge, class and scope.
func TestRateLimitsPerPrincipalAndTenant(t *testing.T) {
	// 0.001 a second: no token comes back while the test runs, so
	// Retry-After is exactly 1000 s.
	d := startLimited(t, daemon.HTTPLimits{}, mcpedge.RateLimits{
		PerPrincipal: mcpedge.RateClasses{Writes: mcpedge.Rate{PerSecond: 0.001, Burst: 2}},
		PerTenant:    mcpedge.RateClasses{Writes: mcpedge.Rate{PerSecond: 0.001, Burst: 3}},
	}, nil)
	scopes := "a2a:read a2a:delegate"
	alice, bob, carol := devToken(t, d, "alice", "default", scopes), devToken(t, d, "bob", "default", scopes), devToken(t, d, "carol", "acme", scopes)
	cancel := func(cs *mcp.ClientSession) (*mcp.CallToolResult, error) {
		return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "task_cancel", Arguments: map[string]any{"task_id": "t-nope"}})
	}

	a := hostSession(t, d, alice)
	for i := range 2 {
		res, err := cancel(a)
		if err != nil || !res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "task_not_found:") {
			t.Fatalf("alice's write %d within her limit: %v %+v, want the tool's own answer (task_not_found)", i+1, err, res)
		}
	}
	if _, err := cancel(a); err == nil || !strings.Contains(err.Error(), "Too Many Requests") {
		t.Fatalf("alice's third write: %v, want the go-sdk client's error for HTTP 429", err)
	}
	resp := postMCP(t, d, alice, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delegate","arguments":{}}}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1000" ||
		string(b) != `{"error":{"code":"rate_limited","message":"too many writes for this principal; retry after 1000 s"}}`+"\n" {
		t.Errorf("alice's delegate over her limit: %d Retry-After %q %s, want 429, 1000 and rate_limited for this principal",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if res, err := a.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Errorf("alice's read on the same session, her writes limited: %v %+v, want it served", err, res)
	}

	bs := hostSession(t, d, bob)
	if res, err := cancel(bs); err != nil || !res.IsError {
		t.Errorf("bob's first write (the tenant's third): %v %+v, want the tool's own answer", err, res)
	}
	resp = postMCP(t, d, bob, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"task_respond","arguments":{}}}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1000" || !strings.Contains(string(b), "too many writes for this tenant") {
		t.Errorf("bob's second write, over the tenant's limit: %d %q %s, want 429 for this tenant", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if res, err := cancel(hostSession(t, d, carol)); err != nil || !res.IsError {
		t.Errorf("carol (tenant acme): %v %+v, want the tool's own answer", err, res)
	}

	// A JSON-RPC batch (MCP before 2025-06-18) spends a write per message:
	// three are more than dave's burst of two will ever hold.
	batch := `[` + strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delegate","arguments":{}}},`, 2) +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delegate","arguments":{}}}]`
	resp = postMCP(t, d, devToken(t, d, "dave", "acme", scopes), batch)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" ||
		string(b) != `{"error":{"code":"rate_limited","message":"a batch of 3 writes is more than the principal's burst allows at once; send fewer at a time"}}`+"\n" {
		t.Errorf("a batch of 3 delegates over a burst of 2: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}

	// Measured before: a byte after the JSON made the SDK run the call
	// (it reads the first value) while the limits saw no tool, a read: ten
	// delegates over the limit made ten tasks; a batch so, twenty. Now
	// such a body is refused before anything runs, limits or not.
	erin := devToken(t, d, "erin", "fresh", scopes)
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delegate","arguments":{}}} x`,
		batch + ` x`,
		`{"jsonrpc":"2.0","id":10,"method":"tools/call"`,
	} {
		resp := postMCP(t, d, erin, body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := `{"error":{"code":"invalid_request","message":"the request body is not one JSON value: send one JSON-RPC 2.0 message (or, before protocol 2025-06-18, one batch) per POST"}}` + "\n"; resp.StatusCode != http.StatusBadRequest || string(b) != want {
			t.Errorf("POST %.40q…: %d %s, want 400 invalid_request", body, resp.StatusCode, b)
		}
	}

	// A POST whose one JSON value is not a JSON-RPC message a2ad can read
	// is answered 400 with the JSON-RPC error, in a2ad's words (the go-sdk
	// answered with its libraries' text, "invalid ID type map[string]…").
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string or an integer (JSON-RPC 2.0 §4)"}}`,
		`{"jsonrpc":"1.0","id":5,"method":"ping"}`:       `{"jsonrpc":"2.0","id":5,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`,
		`[]`: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: an empty batch ([]) holds no message"}}`,
		`{"jsonrpc":"2.0","id":"s","method":"tools/call","params":"x"}`: `{"jsonrpc":"2.0","id":"s","error":{"code":-32602,"message":"invalid params: params of tools/call must be a JSON object"}}`,
		// Measured before: "unmarshaling … into a *mcp.ListToolsParams".
		`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{"cursor":5}}`: `{"jsonrpc":"2.0","id":"l","error":{"code":-32602,"message":"invalid params: /params/cursor of tools/list must be a string"}}`,
	} {
		resp := postMCP(t, d, erin, body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || string(b) != want+"\n" {
			t.Errorf("POST %s: %d %s, want 400 %s", body, resp.StatusCode, b, want)
		}
	}

	ops := devToken(t, d, "ops", "operators", "a2a:admin")
	for i, want := range []int{http.StatusNotFound, http.StatusNotFound, http.StatusTooManyRequests} {
		req, _ := http.NewRequest(http.MethodPost, d.HTTPURL+"/v1/tasks/t-nope/cancel", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+ops)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("admin write %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}

	resp, err := http.Get(d.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for series, want := range map[string]float64{
		`a2ad_rate_limited_total{class="write",edge="mcp",scope="principal"}`:   3,
		`a2ad_rate_limited_total{class="write",edge="mcp",scope="tenant"}`:      1,
		`a2ad_rate_limited_total{class="read",edge="mcp",scope="principal"}`:    0,
		`a2ad_rate_limited_total{class="write",edge="admin",scope="principal"}`: 1,
	} {
		if n := metricIn(t, string(b), series); n != want {
			t.Errorf("%s = %v, want %v", series, n, want)
		}
	}
}

// errText is a tool result's error text ("" for none).
func errText(res *mcp.CallToolResult) string {
	if res == nil || !res.IsError || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}
