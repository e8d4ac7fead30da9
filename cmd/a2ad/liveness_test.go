package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// agentProcess is a fraud-review-agent process the test kills and starts
// again.
type agentProcess struct {
	t    *testing.T
	args []string
	cmd  *exec.Cmd
	log  *testlog.Buffer
	done chan struct{}
}

func runAgent(t *testing.T, args ...string) *agentProcess {
	t.Helper()
	a := &agentProcess{t: t, args: args, log: &testlog.Buffer{}}
	a.start()
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(a.log.String(), 20))
		}
	})
	return a
}

func (a *agentProcess) start() {
	a.t.Helper()
	a.cmd = exec.Command(fraudReviewAgent(a.t), a.args...)
	a.cmd.Stderr = a.log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.done = make(chan struct{})
	cmd, done := a.cmd, a.done
	go func() { _ = cmd.Wait(); close(done) }()
}

// kill ends the process with SIGKILL, as a crash would.
func (a *agentProcess) kill() {
	if a.cmd != nil && a.cmd.Process != nil {
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// agentLiveness is one agent of agents_list, as far as liveness goes.
type agentLiveness struct {
	ID                 string `json:"id"`
	Delegable          bool   `json:"delegable"`
	NotDelegableReason string `json:"not_delegable_reason"`
	Reachability       string `json:"reachability"`
	LivenessCheckedAt  string `json:"liveness_checked_at"`
}

func (h *host) agentLiveness(id string) agentLiveness {
	h.t.Helper()
	res, err := h.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		h.t.Fatalf("agents_list: %v %v", err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out struct {
		Agents []agentLiveness `json:"agents"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		h.t.Fatal(err)
	}
	for _, a := range out.Agents {
		if a.ID == id {
			return a
		}
	}
	return agentLiveness{ID: id} // not registered yet
}

// awaitReachability polls agents_list until the agent's reachability is
// want and returns how long that took and the agent as listed.
func (h *host) awaitReachability(id, want string, within time.Duration) (time.Duration, agentLiveness) {
	h.t.Helper()
	start := time.Now()
	for {
		a := h.agentLiveness(id)
		if a.Reachability == want {
			return time.Since(start), a
		}
		if time.Since(start) > within {
			h.t.Fatalf("agent %s still %q after %v, want %s: %+v", id, a.Reachability, within, want, a)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricLine returns the /metrics line of name{labels}, "" if none.
func metricLine(t *testing.T, d *daemonProc, series string) string {
	t.Helper()
	resp, err := http.Get(d.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// livenessWithin is the default probe period plus its jitter (10%), the
// probe timeout and the prober's schedule resolution (period/10): the
// time by which a change of an agent's reachability shows.
const livenessWithin = 5*time.Second + 500*time.Millisecond + 2*time.Second + 500*time.Millisecond

// checkLiveness kills and restarts agent, whose id is id, and checks that
// agents_list, delegate, `a2ad agents list` and /metrics follow within
// livenessWithin.
func checkLiveness(t *testing.T, d *daemonProc, agent *agentProcess, id string, delegate map[string]any, offlineReason string) {
	h := connectHost(t, d)
	took, _ := h.awaitReachability(id, "reachable", 15*time.Second)
	tools := watchTools(t, d)
	skillTool := id + "__" + delegate["skill"].(string)
	tools.await(skillTool, true, 5*time.Second)
	t.Logf("%s reachable %v after the host connected", id, took.Round(time.Millisecond))
	if got := h.mustCall("delegate", delegate); got.State != "completed" {
		t.Fatalf("delegate while reachable: %s", got.State)
	}
	if l := metricLine(t, d, `a2ad_agent_reachable{agent="`+id+`"}`); !strings.HasSuffix(l, " 1") {
		t.Errorf("metrics while reachable: %q, want 1", l)
	}

	agent.kill()
	took, a := h.awaitReachability(id, "offline", livenessWithin)
	t.Logf("%s offline %v after it was killed", id, took.Round(time.Millisecond))
	if a.Delegable || a.NotDelegableReason != "offline: "+offlineReason {
		t.Errorf("offline agent listed delegable %v, reason %q; want false, %q", a.Delegable, a.NotDelegableReason, "offline: "+offlineReason)
	}
	// The per-skill tool goes with it, and the session is told.
	tools.await(skillTool, false, 5*time.Second)
	if _, err := time.Parse(time.RFC3339, a.LivenessCheckedAt); err != nil {
		t.Errorf("liveness_checked_at %q: %v", a.LivenessCheckedAt, err)
	}
	out, err := h.call("delegate", delegate)
	if want := "agent_not_delegable: agent " + id + " is not delegable: offline: " + offlineReason; err != nil || out.ErrText != want {
		t.Errorf("delegate to the offline agent: %v %q, want %q", err, out.ErrText, want)
	}
	if l := metricLine(t, d, `a2ad_agent_reachable{agent="`+id+`"}`); !strings.HasSuffix(l, " 0") {
		t.Errorf("metrics while offline: %q, want 0", l)
	}
	if l := metricLine(t, d, `a2ad_agent_probe_failures_total{agent="`+id+`"}`); l == "" || strings.HasSuffix(l, " 0") {
		t.Errorf("probe failures while offline: %q, want at least 1", l)
	}
	list, err := exec.Command(bin, "agents", "list", "--data-dir", d.DataDir).CombinedOutput()
	if re := `(?m)^` + id + `\s+approved\s+false\s+offline\s+`; err != nil || !regexp.MustCompile(re).Match(list) {
		t.Errorf("agents list (%v) lacks %s:\n%s", err, re, list)
	}

	agent.start()
	took, a = h.awaitReachability(id, "reachable", livenessWithin+2*time.Second) // the agent's own start and connection too
	t.Logf("%s reachable %v after it was started again", id, took.Round(time.Millisecond))
	if !a.Delegable || a.NotDelegableReason != "" {
		t.Errorf("reachable again: delegable %v, reason %q", a.Delegable, a.NotDelegableReason)
	}
	tools.await(skillTool, true, 5*time.Second)
	if got := h.mustCall("delegate", delegate); got.State != "completed" {
		t.Errorf("delegate after the agent came back: %s", got.State)
	}
}

// Liveness over the NATS binding: the reference agent process killed shows
// offline in agents_list (not delegable, with the reason), `a2ad agents
// list` and /metrics within a probe period and timeout; started again, it
// is reachable and delegated to.
func TestAgentLivenessOverNATS(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	args := external(t, srv.ClientURL())
	d := startDaemon(t, nil, args...)
	credFile := filepath.Join(t.TempDir(), "cred")
	if err := os.WriteFile(credFile, []byte(credentialFor(t, srv.ClientURL(), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := runAgent(t, "--nats-url", srv.ClientURL(), "--credential-file", credFile)
	checkLiveness(t, d, agent, "fraud-review", delegateArgs("C-1", 1999, "", 10), "no responder on its NATS subject (fraud-review)")
}

// Liveness over the HTTP binding: the reference agent serving A2A 1.0 over
// HTTP (`fraud-review-agent --http`), killed and started again on its
// address, as over NATS.
func TestAgentLivenessOverHTTP(t *testing.T) {
	addr := freeAddr(t)
	agent := runAgent(t, "--http", addr)
	cfg := configFile(t, "  - id: fraud-http\n    tenants: [default]\n    trust_on_first_use: true\n    card_url: http://"+addr+"\n")
	srv, _, _ := natstest.Start(t)
	d := startDaemon(t, nil, "--config", cfg, "--nats-url", srv.ClientURL(), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0")
	args := delegateArgs("C-2", 1999, "", 10)
	args["agent"] = "fraud-http"
	checkLiveness(t, d, agent, "fraud-http", args,
		"agent fraud-http: probe not sent: the agent's address cannot be reached (connection, DNS or TLS handshake failed)")
}

// toolWatch is a host session that counts notifications/tools/list_changed.
type toolWatch struct {
	t       *testing.T
	session *mcp.ClientSession
	changed chan struct{}
}

// watchTools connects a 2025-11-25 host session (it keeps a stream open
// for the server's notifications) that records each tools/list_changed.
func watchTools(t *testing.T, d *daemonProc) *toolWatch {
	t.Helper()
	w := &toolWatch{t: t, changed: make(chan struct{}, 64)}
	client := mcp.NewClient(&mcp.Implementation{Name: "tool-watch", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { w.changed <- struct{}{} }})
	s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.HTTP + "/mcp",
		HTTPClient: mcpedge.BearerClient(d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w.session = s
	return w
}

func (w *toolWatch) listed(name string) bool {
	w.t.Helper()
	res, err := w.session.ListTools(context.Background(), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == name {
			return true
		}
	}
	return false
}

// await waits until tools/list does (present) or does not list name; when
// that is a change from the list as it was, a tools/list_changed
// notification must have come first.
func (w *toolWatch) await(name string, present bool, within time.Duration) {
	w.t.Helper()
	if w.listed(name) == present {
		return
	}
	select {
	case <-w.changed:
	case <-time.After(within):
		w.t.Fatalf("no tools/list_changed within %v for %s (want listed: %v)", within, name, present)
	}
	deadline := time.Now().Add(within)
	for w.listed(name) != present {
		if time.Now().After(deadline) {
			w.t.Fatalf("tool %s listed %v %v after tools/list_changed", name, !present, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
