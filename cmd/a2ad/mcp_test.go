package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hostServer is one entry of a host configuration's mcpServers, as the
// README gives it.
type hostServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
}

// readmeHostConfigs are the host configurations of README.md's "Use from
// an MCP host", in order, with the placeholders replaced by repl (old,
// new pairs): what a user copies is what the tests run.
func readmeHostConfigs(t *testing.T, repl ...string) []hostServer {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Use from an MCP host\n")
	if !ok {
		t.Fatal(`README.md has no "## Use from an MCP host" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	r := strings.NewReplacer(repl...)
	var out []hostServer
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		var cfg struct {
			MCPServers map[string]hostServer `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(r.Replace(m[1])), &cfg); err != nil || len(cfg.MCPServers) != 1 {
			t.Fatalf("README host configuration %q: %v (want one server under mcpServers)", m[1], err)
		}
		s := cfg.MCPServers["a2ad"]
		if s.Command == "" && s.URL == "" {
			t.Fatalf("README host configuration %q: no server named a2ad", m[1])
		}
		out = append(out, s)
	}
	return out
}

// bridgeWindow is a host window: the go-sdk client over stdio to an
// `a2ad mcp` process started as the configuration says.
type bridgeWindow struct {
	session  *mcp.ClientSession
	stderr   *testlog.Buffer
	mu       sync.Mutex
	progress []string // progress messages of calls with a token
	asked    []string // elicitation messages
}

// openWindow starts `a2ad mcp` as cfg (command "a2ad" is the binary under
// test) and initializes a session in era; the elicitation handler answers
// "yes" to a question on a case C-1x01, and cancels the others (the
// question then comes back in the call's result).
func openWindow(t *testing.T, cfg hostServer, era string) *bridgeWindow {
	t.Helper()
	if cfg.Command != "a2ad" {
		t.Fatalf("host configuration runs %q, want a2ad", cfg.Command)
	}
	w := &bridgeWindow{stderr: &testlog.Buffer{}}
	cmd := exec.Command(bin, cfg.Args...)
	cmd.Stderr = w.stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "ide-window", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			w.mu.Lock()
			w.asked = append(w.asked, r.Params.Message)
			w.mu.Unlock()
			if regexp.MustCompile(`Case C-1\d01:`).MatchString(r.Params.Message) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
			}
			return &mcp.ElicitResult{Action: "cancel"}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			w.mu.Lock()
			w.progress = append(w.progress, r.Params.Message)
			w.mu.Unlock()
		},
	})
	s, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatalf("a2ad %v (%s): %v\n%s", cfg.Args, era, err, w.stderr.String())
	}
	t.Cleanup(func() {
		_ = s.Close()
		if t.Failed() {
			t.Logf("a2ad %v stderr:\n%s", cfg.Args, tail(w.stderr.String(), 30))
		}
	})
	if got := s.InitializeResult().ProtocolVersion; got != era {
		t.Fatalf("a2ad %v: the session speaks %s, want %s", cfg.Args, got, era)
	}
	w.session = s
	return w
}

// call runs a tool; err is a JSON-RPC error.
func (w *bridgeWindow) call(tool string, args map[string]any, progress string) (toolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if progress != "" {
		p.SetProgressToken(progress)
	}
	res, err := w.session.CallTool(context.Background(), p)
	if err != nil {
		return toolResult{}, err
	}
	var out toolResult
	if res.IsError {
		out.ErrText = res.Content[0].(*mcp.TextContent).Text
		return out, nil
	}
	b, _ := json.Marshal(res.StructuredContent)
	err = json.Unmarshal(b, &out)
	return out, err
}

func (w *bridgeWindow) mustCall(t *testing.T, tool string, args map[string]any) toolResult {
	t.Helper()
	out, err := w.call(tool, args, "")
	if err != nil || out.ErrText != "" {
		t.Fatalf("%s: %v %s", tool, err, out.ErrText)
	}
	return out
}

const bridgeConfig = `
principals:
  my-ide:
    tenant: default
    scopes: [a2a:read, a2a:delegate]
  reader:
    scopes: [a2a:read]
`

// bridgeRig is a running daemon with the reference agent, and the paths
// the README's placeholders stand for.
type bridgeRig struct {
	d         *daemonProc
	config    string
	tokenFile string
}

func startBridgeRig(t *testing.T, agent bool, misbehave map[string]string) *bridgeRig {
	t.Helper()
	r := &bridgeRig{config: configFile(t, bridgeConfig), tokenFile: filepath.Join(t.TempDir(), "host.jwt")}
	r.d = startDaemon(t, nil, "--config", r.config, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0")
	if agent {
		agentOn(t, r.d.NATS, credentialFor(t, r.d.NATS, r.d.DataDir), misbehave)
	}
	return r
}

func (r *bridgeRig) hostConfigs(t *testing.T) []hostServer {
	return readmeHostConfigs(t, "/abs/path/a2ad-data", r.d.DataDir, "/abs/path/a2ad.yaml", r.config,
		"/abs/path/host.jwt", r.tokenFile, "https://a2ad.example.com/mcp", r.d.HTTP+"/mcp", "http://127.0.0.1:8080/mcp", r.d.HTTP+"/mcp",
		"<token>", r.d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate))
}

// Two IDE windows at once, each `a2ad mcp` as the README configures it
// (data directory only; a named principal), one per protocol era, share
// the running daemon: each lists the agent, delegates to completion with
// the validated artifact and sees progress, answers a question by
// elicitation and another by task_respond, and cancels a task.
func TestMCPBridgeWindowsShareTheDaemon(t *testing.T) {
	r := startBridgeRig(t, true, nil)
	cfgs := r.hostConfigs(t)
	if len(cfgs) != 4 {
		t.Fatalf("README gives %d host configurations, want 4 (stdio by data directory, by principal, by URL and token file; HTTP)", len(cfgs))
	}
	start := time.Now()
	windows := []struct {
		prefix, era string
		cfg         hostServer
	}{{"C-11", "2025-11-25", cfgs[0]}, {"C-12", "2026-07-28", cfgs[1]}}
	var wg sync.WaitGroup
	for _, win := range windows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(win.era, func(t *testing.T) { windowScenario(t, openWindow(t, win.cfg, win.era), win.prefix) })
		}()
	}
	wg.Wait()
	t.Logf("two windows, each: four delegations, a task_respond and a task_cancel: %s", time.Since(start).Round(time.Millisecond))
}

func windowScenario(t *testing.T, w *bridgeWindow, p string) {
	// The agent registers after a2ad started: wait for it to be listed.
	var agents struct {
		Agents []struct {
			ID        string `json:"id"`
			Delegable bool   `json:"delegable"`
		} `json:"agents"`
	}
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res, err := w.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("agents_list: %v %+v", err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &agents)
		if len(agents.Agents) == 1 && agents.Agents[0].ID == "fraud-review" && agents.Agents[0].Delegable {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("agents_list: %s, want fraud-review delegable", b)
		}
	}

	// Delegation to completion, progress seen on the way. A first
	// delegate right after the agent registered may find it offline
	// (the start-up race the liveness work removes): tried again.
	var done toolResult
	for i := 0; ; i++ {
		var err error
		done, err = w.call("delegate", delegateArgs(p+"07", 1200, "", 20), "progress-"+p)
		if err != nil {
			t.Fatalf("delegate: %v", err)
		}
		if !strings.HasPrefix(done.ErrText, "agent_offline") || i == 20 {
			t.Logf("first delegation after %d agent_offline answers", i)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if done.ErrText != "" || done.State != "completed" || len(done.Artifacts) != 1 || len(done.Artifacts[0].Parts) != 1 {
		t.Fatalf("delegate %s07: %+v, want completed with one artifact", p, done)
	}
	if d := done.Artifacts[0].Parts[0].Data; d["case_id"] != p+"07" || d["policy_version"] != refagent.PolicyVersion {
		t.Errorf("artifact %v, want case_id %s07, policy_version %s", d, p, refagent.PolicyVersion)
	}
	waitUntil(t, "progress ending with state: completed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.progress) > 0 && w.progress[len(w.progress)-1] == "state: completed"
	})

	// A question answered by the user (elicitation), on the same call.
	elicited := w.mustCall(t, "delegate", delegateArgs(p+"01", 125000, "", 30))
	if elicited.State != "completed" || len(elicited.Artifacts) != 1 {
		t.Fatalf("delegate %s01 answered by elicitation: %+v, want completed", p, elicited)
	}
	w.mu.Lock()
	asked := strings.Join(w.asked, "\n")
	w.mu.Unlock()
	if want := fmt.Sprintf("Case %s01: the refund of 125000 cents is above the manual review threshold", p); !strings.Contains(asked, want) {
		t.Errorf("elicitation messages %q, want one with %q", asked, want)
	}

	// A question the user closed: it comes back in the result, answered
	// with task_respond.
	q := w.mustCall(t, "delegate", delegateArgs(p+"02", 125000, "", 30))
	if q.State != "input-required" || !strings.Contains(q.Question, "Case "+p+"02:") {
		t.Fatalf("delegate %s02 with the form closed: state %s question %q, want input-required with the agent's question", p, q.State, q.Question)
	}
	if got := w.mustCall(t, "task_respond", map[string]any{"task_id": q.TaskID, "answer": "yes", "wait_seconds": 30}); got.State != "completed" || len(got.Artifacts) != 1 {
		t.Fatalf("task_respond: %+v, want completed", got)
	}

	// task_cancel.
	c := w.mustCall(t, "delegate", delegateArgs(p+"03", 125000, "", 30))
	if c.State != "input-required" {
		t.Fatalf("delegate %s03: state %s, want input-required", p, c.State)
	}
	if got := w.mustCall(t, "task_cancel", map[string]any{"task_id": c.TaskID}); got.State != "canceled" {
		t.Fatalf("task_cancel: state %s, want canceled", got.State)
	}
}

// The host token from a file is read at each request: a read-only token
// is refused delegate with insufficient_scope (in the words and code of
// stdio), an unreadable file is a clear error, and a token written to
// the file afterwards works without restarting the window. A principal of
// the configuration gets its scopes: "reader" is refused delegate too.
func TestMCPBridgeTokens(t *testing.T) {
	r := startBridgeRig(t, false, nil)
	cfgs := r.hostConfigs(t)
	if err := os.WriteFile(r.tokenFile, []byte(r.d.token(t, mcpedge.ScopeRead)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := openWindow(t, cfgs[2], "2025-11-25")
	wantScope := fmt.Sprintf("insufficient_scope: tool delegate needs scope a2a:delegate, which this principal does not have (a2ad at %s/mcp answered 403); give the principal that scope (--scope, or its scopes in the daemon's configuration)", r.d.HTTP)
	// The go-sdk client reports every -32003 as ErrConnectionClosed
	// (its jsonrpc2.ErrClientClosing has that code), with the message
	// after it; the session goes on.
	_, err := w.call("delegate", delegateArgs("T-1", 1200, "", 0), "")
	if err == nil || !strings.HasSuffix(err.Error(), `calling "tools/call": `+wantScope) {
		t.Fatalf("delegate with a read-only token: %v, want -32003 %q", err, wantScope)
	}
	var je *jsonrpc.Error
	if _, err := w.call("agents_list", map[string]any{}, ""); err != nil {
		t.Fatalf("agents_list after a refused call on the same session: %v", err)
	}

	if err := os.WriteFile(r.tokenFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = w.call("agents_list", map[string]any{}, "")
	wantEmpty := fmt.Sprintf("unauthorized: a2ad mcp has no host token to send: --token-file %s is empty; write a token the daemon accepts to %s (a2ad token mint --sub NAME > %s); it is read again at the next request", r.tokenFile, r.tokenFile, r.tokenFile)
	if !errors.As(err, &je) || je.Code != mcpedge.CodeHostTokenRefused || je.Message != wantEmpty {
		t.Fatalf("agents_list with an empty token file: %v, want -32011 %q", err, wantEmpty)
	}

	// Rotated: a token with a2a:delegate, no restart.
	if err := os.WriteFile(r.tokenFile, []byte(r.d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := w.call("delegate", delegateArgs("T-2", 1200, "", 0), ""); err != nil || !strings.HasPrefix(out.ErrText, "agent_not_found") {
		t.Fatalf("delegate after the token was rotated: %v %+v, want the daemon's own answer (no agent configured here is running: agent_not_found)", err, out)
	}

	reader := openWindow(t, hostServer{Command: "a2ad", Args: []string{"mcp", "--data-dir", r.d.DataDir, "--config", r.config, "--principal", "reader"}}, "2026-07-28")
	_, err = reader.call("delegate", delegateArgs("T-3", 1200, "", 0), "")
	if err == nil || !strings.HasSuffix(err.Error(), `calling "tools/call": `+wantScope) {
		t.Fatalf("delegate as principal reader: %v, want -32003 %q", err, wantScope)
	}
	tools, err := reader.session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "agents_list,task_get" {
		t.Errorf("reader's tools/list: %v, want agents_list and task_get only", names)
	}
}

// rawWindow is a host speaking JSON-RPC lines to `a2ad mcp` itself (a
// go-sdk client gives up at a failed initialize; a host may try again).
type rawWindow struct {
	t      *testing.T
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *testlog.Buffer
}

func startRawWindow(t *testing.T, args ...string) *rawWindow {
	t.Helper()
	cmd := exec.Command(bin, args...)
	w := &rawWindow{t: t, stderr: &testlog.Buffer{}}
	cmd.Stderr = w.stderr
	var err error
	if w.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.out = bufio.NewScanner(stdout)
	w.out.Buffer(nil, 1<<20)
	t.Cleanup(func() {
		_ = w.in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a2ad mcp exited %v, want 0 at the end of its input", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("a2ad mcp did not exit at the end of its input")
		}
		if t.Failed() {
			t.Logf("a2ad mcp stderr:\n%s", tail(w.stderr.String(), 30))
		}
	})
	return w
}

// ask writes line and returns the answer to id (messages without that id,
// such as notifications, are skipped).
func (w *rawWindow) ask(id int, line string) string {
	w.t.Helper()
	if _, err := io.WriteString(w.in, line+"\n"); err != nil {
		w.t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		for w.out.Scan() {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(w.out.Bytes(), &m) == nil && string(m.ID) == fmt.Sprint(id) {
				got <- w.out.Text()
				return
			}
		}
		got <- ""
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(60 * time.Second):
		w.t.Fatalf("no answer to id %d", id)
		return ""
	}
}

func (w *rawWindow) send(line string) {
	if _, err := io.WriteString(w.in, line+"\n"); err != nil {
		w.t.Fatal(err)
	}
}

const (
	rawInitialize = `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ide","version":"1"}}}`
	rawAgentsList = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"agents_list","arguments":{}}}`
)

// With no daemon running, a host's request gets a JSON-RPC error in
// a2ad's words naming the fix, and a2ad mcp keeps running (an unreadable
// line is answered too); started, the
// daemon takes the next request; restarted (on another port: --http-addr
// :0) under the open window, the same session goes on — a2ad mcp finds it
// through the data directory and re-establishes the daemon session.
func TestMCPBridgeDaemonDownThenUp(t *testing.T) {
	cfg := configFile(t, "")
	dir := t.TempDir()
	flags := []string{"--config", cfg, "--data-dir", dir, "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0"}
	d := startDaemon(t, nil, flags...) // makes the development key
	d.kill(t)

	w := startRawWindow(t, "mcp", "--data-dir", dir)
	got := w.ask(1, fmt.Sprintf(rawInitialize, 1))
	want := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"error":{"code":-32010,"message":"a2ad_unavailable: no a2ad answers at %s/mcp (connection refused); start the daemon (a2ad serve --data-dir %s), or pass --url with the running daemon's MCP URL; a2ad mcp connects again on the next request"}}`, d.HTTP, dir)
	if got != want {
		t.Fatalf("initialize with the daemon down:\n got %s\nwant %s", got, want)
	}
	// stderr is copied by another goroutine: it may lag the answer.
	waitUntil(t, "stderr saying a2ad_unavailable", func() bool {
		return strings.Contains(w.stderr.String(), "a2ad_unavailable: no a2ad answers at")
	})

	d = startDaemon(t, nil, flags...)
	if got := w.ask(2, fmt.Sprintf(rawInitialize, 2)); !strings.Contains(got, `"result":{`) || !strings.Contains(got, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize once the daemon runs: %s", got)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A line that is not JSON is answered as on serve --stdio.
	w.send(`{bad`)
	if !w.out.Scan() || w.out.Text() != `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the message is not valid JSON (RFC 8259)"}}` {
		t.Fatalf("answer to an unreadable line: %s", w.out.Text())
	}
	if got := w.ask(3, fmt.Sprintf(rawAgentsList, 3)); !strings.Contains(got, `"agents":[]`) || strings.Contains(got, `"isError":true`) {
		t.Fatalf("agents_list: %s", got)
	}

	d.kill(t)
	got = w.ask(4, fmt.Sprintf(rawAgentsList, 4))
	if !strings.Contains(got, `"code":-32010,"message":"a2ad_unavailable: no a2ad answers at `+d.HTTP+`/mcp`) {
		t.Fatalf("agents_list with the daemon stopped: %s", got)
	}
	d2 := startDaemon(t, nil, flags...)
	if d2.HTTP == d.HTTP {
		t.Logf("the daemon came back on the same port %s", d2.HTTP)
	}
	if got := w.ask(5, fmt.Sprintf(rawAgentsList, 5)); !strings.Contains(got, `"agents":[]`) || strings.Contains(got, `"error"`) {
		t.Fatalf("agents_list after the daemon restarted: %s", got)
	}
	waitUntil(t, "stderr saying the session was re-established", func() bool {
		return strings.Contains(w.stderr.String(), "the daemon session was re-established")
	})
}

// Faults in a2ad mcp's flags are refused at start, naming the flag and the
// fix, with exit status 1 and nothing on stdout.
func TestMCPFlagFaults(t *testing.T) {
	empty := t.TempDir()
	cfg := configFile(t, bridgeConfig)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--principal", "my-ide"}, "mcp: --principal my-ide needs --config FILE, the daemon's configuration whose principals: names it"},
		{[]string{"--principal", "nobody", "--config", cfg, "--data-dir", empty}, "mcp: --principal nobody: not in " + cfg + "'s principals: (it names my-ide, reader)"},
		{[]string{"--token-file", "x", "--subject", "me"}, "mcp: --token-file and --principal/--subject/--tenant/--scope are two sources of the host token: give one"},
		{[]string{"--url", "ftp://h/mcp", "--token-file", "x"}, `mcp: --url "ftp://h/mcp": want an http:// or https:// URL of the daemon's /mcp, e.g. http://127.0.0.1:8080/mcp`},
		{[]string{"--subject", "me", "--scope", "a2a:read,a2a:delegate", "--data-dir", empty}, `mcp: --scope "a2a:read,a2a:delegate": scopes are separated by spaces, not commas: --scope "a2a:read a2a:delegate", or repeat --scope for each`},
		{[]string{"--data-dir", empty}, "mcp: no development key in " + empty + " to mint host tokens with: give the --data-dir of the daemon (a2ad serve makes the key at its first start), or --token-file with a token its auth accepts"},
		{[]string{"--ttl", "10s", "--data-dir", empty}, "mcp: --ttl 10s: want 1m to 24h"},
		{[]string{"--url", "http://a2ad.example.com/mcp", "--token-file", "x"}, `mcp: --url "http://a2ad.example.com/mcp": http:// is plain text and the host token would cross the network readable: use the daemon's https:// URL (with --ca for a private CA), or http:// on loopback only`},
	}
	for _, c := range cases {
		cmd := exec.Command(bin, append([]string{"mcp"}, c.args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || stdout.Len() != 0 || strings.TrimSpace(stderr.String()) != "Error: "+c.want {
			t.Errorf("a2ad mcp %v: exit %v, stdout %q, stderr %q; want 1 and %q", c.args, err, stdout.String(), stderr.String(), c.want)
		}
	}
}

// headerTransport adds a host configuration's headers to each request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The README's Streamable HTTP configuration (URL and bearer header)
// connects the go-sdk client to the daemon as it stands.
func TestMCPREADMEHTTPHostConfiguration(t *testing.T) {
	r := startBridgeRig(t, false, nil)
	cfg := r.hostConfigs(t)[3]
	if cfg.Type != "http" || cfg.Command != "" {
		t.Fatalf("README's last host configuration: %+v, want type http", cfg)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "http-host", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: &http.Client{Transport: headerTransport(cfg.Headers)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("agents_list: %v %+v", err, res)
	}
}

// A call the host cancels (notifications/cancelled) gets no answer, and
// the session goes on: the ping after it is answered.
func TestMCPBridgeCancelledCallIsNotAnswered(t *testing.T) {
	r := startBridgeRig(t, true, map[string]string{"C-1301": refagent.ModeSilent})
	w := startRawWindow(t, "mcp", "--data-dir", r.d.DataDir)
	if got := w.ask(1, fmt.Sprintf(rawInitialize, 1)); !strings.Contains(got, `"result":{`) {
		t.Fatalf("initialize: %s", got)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// The agent registers after a2ad started: wait for it to be listed.
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if got := w.ask(2, fmt.Sprintf(rawAgentsList, 2)); strings.Contains(got, `"delegable":true`) {
			break
		} else if time.Now().After(until) {
			t.Fatalf("agents_list: %s", got)
		}
	}
	// The silent agent never reports: delegate would answer "working"
	// after its 3 s wait, within the 5 s watched below, if not cancelled.
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"fraud-review","skill":"assess_refund_risk","objective":"Assess the fraud risk of this refund.","evidence":{"case_id":"C-1301","amount_cents":1200,"currency":"EUR"},"output_schema":"risk_assessment","wait_seconds":3}}}`)
	time.Sleep(500 * time.Millisecond)
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user pressed stop"}}`)
	// ask skips every line before the ping's answer: none may be id 3.
	if _, err := io.WriteString(w.in, `{"jsonrpc":"2.0","id":4,"method":"ping"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	lines := make(chan string)
	go func() {
		for w.out.Scan() {
			lines <- w.out.Text()
		}
		close(lines)
	}()
	for pinged := false; ; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("a2ad mcp closed its output")
			}
			if strings.Contains(l, `"id":3`) {
				t.Fatalf("an answer to the cancelled call: %s", l)
			}
			if strings.HasPrefix(l, `{"jsonrpc":"2.0","id":4,"result":{}`) {
				pinged = true
			}
		case <-deadline:
			if !pinged {
				t.Fatal("the ping after the cancellation was not answered")
			}
			return // 5 s with no answer to the cancelled call (it would have come after 3)
		}
	}
}

// A token file that is not a regular file (a pipe, a device: a symlink to
// /dev/zero) is refused without reading it; a regular one is read only up
// to the bound.
func TestMCPTokenFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("a"), maxTokenFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	// Something writes to the pipe, so that opening it does not block.
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			_, _ = f.Write(bytes.Repeat([]byte("a"), 1<<20))
			f.Close()
		}
	}()
	for path, want := range map[string]string{
		fifo: "--token-file " + fifo + " is not a regular file: write the token to a file",
		zero: "--token-file " + zero + " is not a regular file: write the token to a file",
		big:  fmt.Sprintf("--token-file %s holds more than %d bytes; a token is at most that", big, maxTokenFile),
	} {
		tok, err := tokenFromFile(path)()
		if err == nil || err.Error() != want || tok != "" {
			t.Errorf("token from %s = %q, %v; want %q", path, tok, err, want)
		}
	}
}
