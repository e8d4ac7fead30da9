package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Under 2,000 idle connections that sent nothing and 2,000 keep-alive
// connections idle after one GET /healthz, all unauthenticated and all
// still open, a host connecting afterwards lists agents and delegates a
// task to completion over /mcp. (Before issue 14 the keep-alive ones were
// never closed, and 19,981 of them took every file descriptor.)
func TestHTTPIdleConnectionFlood(t *testing.T) {
	const silent, keepAlive = 2000, 2000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 2*(silent+keepAlive) {
		// Go raises the soft limit to the hard one at start (Go 1.19+):
		// this is the hard limit.
		t.Skipf("RLIMIT_NOFILE %d: this test and a2ad need %d open files", lim.Cur, 2*(silent+keepAlive))
	}
	// Timeouts far beyond the test, so that the flood stays open: what is
	// proved is that it does not crowd out hosts, not that it is cut.
	cfg := configFile(t, "http_limits:\n  read_header_timeout_seconds: 600\n  read_timeout_seconds: 600\n  idle_timeout_seconds: 600\n")
	d := startDaemon(t, nil, "--config", cfg, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0")
	agentOn(t, d.NATS, credential(t, d, "fraud-review"), nil)
	addr := strings.TrimPrefix(d.HTTP, "http://")

	start := time.Now()
	conns := make([]net.Conn, silent+keepAlive)
	readers := make([]*bufio.Reader, len(conns))
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(conns); i += 32 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				conns[i] = c
				if i < silent {
					continue
				}
				readers[i] = bufio.NewReader(c)
				if err := healthz(c, readers[i]); err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d silent and %d keep-alive connections open in %v", silent, keepAlive, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	h := connectHost(t, d)
	h.mustCall("agents_list", map[string]any{})
	out, err := h.delegateWhenAgentKnown(delegateArgs("C-7", 1999, "", 20))
	if err != nil || out.ErrText != "" {
		t.Fatalf("delegate under the flood: %v %s", err, out.ErrText)
	}
	if out.State != "completed" {
		out = h.waitFinal(out.TaskID, 30*time.Second)
	}
	if out.State != "completed" {
		t.Fatalf("the delegation under the flood ended %s (%s), want completed", out.State, out.Reason)
	}
	t.Logf("a new host connected, listed agents and delegated to completion in %v", time.Since(start).Round(time.Millisecond))

	// The flood was open all along: a2ad counts it, refused none of it,
	// and its connections still answer.
	resp, err := http.Get(d.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := seriesValue(string(b), "a2ad_http_connections_open"); n < silent+keepAlive+1 {
		t.Errorf("a2ad_http_connections_open = %v, want at least %d (the flood, the host, this scrape)", n, silent+keepAlive+1)
	}
	if n := seriesValue(string(b), "a2ad_http_connections_refused_total"); n != 0 {
		t.Errorf("a2ad_http_connections_refused_total = %v, want 0 (under the default max_connections, 8192)", n)
	}
	if err := healthz(conns[silent], readers[silent]); err != nil {
		t.Errorf("a keep-alive connection of the flood: %v, want it still served", err)
	}
}

// healthz sends GET /healthz on c and reads the answer (keep-alive).
func healthz(c net.Conn, r *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), `{"status":"ok","version":"`) || resp.Close {
		return fmt.Errorf("GET /healthz: %d %q close=%v", resp.StatusCode, b, resp.Close)
	}
	return nil
}

// seriesValue is the value of an unlabelled series in a /metrics body
// (-1 when absent).
func seriesValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
