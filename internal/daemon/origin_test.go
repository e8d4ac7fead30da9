package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/mcpedge"
)

// originRequest sends, with a valid token, an MCP initialize to /mcp or a
// GET of /v1/tasks, with origin as its Origin header ("" for none), and
// returns the status and body.
func originRequest(t *testing.T, c *http.Client, base, dataDir, audience, path, origin string) (int, string) {
	t.Helper()
	scope, method, body := mcpedge.ScopeRead, http.MethodPost, io.Reader(strings.NewReader(initialize))
	if strings.HasPrefix(path, "/v1/") {
		scope, method, body = mcpedge.ScopeAdmin, http.MethodGet, nil
	}
	tok, err := mcpedge.MintDevToken(dataDir, audience, "test-host", "default", scope, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, base+path, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The MCP transport spec (2025-11-25, Streamable HTTP, "Security
// Warning"): servers MUST validate the Origin header and answer 403 to an
// invalid one. A foreign Origin is refused even with a valid token; no
// Origin (go-sdk, curl) and a2ad's own are served.
func TestForeignOriginIsRefused(t *testing.T) {
	s := start(t, nil)
	port := s.d.HTTPURL[strings.LastIndex(s.d.HTTPURL, ":")+1:]
	for _, path := range []string{"/mcp", "/v1/tasks"} {
		for origin, want := range map[string]int{
			"":                      200,
			s.d.HTTPURL:             200,
			"https://evil.example":  403,
			"null":                  403,
			s.d.HTTPURL + ".evil":   403,
			"http://localhost:1234": 403,
			// The loopback listener under its other loopback names (red
			// team: the console at http://localhost:PORT was refused).
			"http://localhost:" + port:  200,
			"http://[::1]:" + port:      200,
			"https://localhost:" + port: 403,
		} {
			status, body := originRequest(t, http.DefaultClient, s.d.HTTPURL, s.dataDir, s.d.Auth.Audience(), path, origin)
			if status != want {
				t.Errorf("%s with Origin %q: status %d, want %d: %s", path, origin, status, want, body)
				continue
			}
			if want == 403 && !strings.Contains(body, `"code":"origin_not_allowed"`) {
				t.Errorf("%s with Origin %q: body %s, want the a2ad error origin_not_allowed", path, origin, body)
			}
		}
	}
	if got := metricLine(t, s.d.HTTPURL, `a2ad_auth_failures_total{edge="http",reason="origin_not_allowed"}`); got != "10" {
		t.Errorf("a2ad_auth_failures_total{reason=origin_not_allowed} = %q, want 10 (5 foreign origins on 2 paths)", got)
	}
}

// metricLine is the value of the sample named series on base's /metrics
// ("" if absent).
func metricLine(t *testing.T, base, series string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}
