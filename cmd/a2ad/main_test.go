package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"github.com/a2ad/a2ad/internal/testlog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bin is the real a2ad binary, built once for these tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "a2ad-bin-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "a2ad")
	// A2AD_TEST_RACE=0 builds the binary without the race detector, to
	// measure (docs/durability.md); by default it is race-instrumented.
	buildArgs := []string{"build", "-race", "-o", bin, "."}
	if os.Getenv("A2AD_TEST_RACE") == "0" {
		buildArgs = []string{"build", "-o", bin, "."}
	}
	if out, err := exec.Command("go", buildArgs...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building a2ad: %v\n%s", err, out)
		os.Exit(1)
	}
	// This package runs the real binary, race-instrumented, through crash
	// and restart tests that wait out leases and reconciliation graces:
	// more than go test's default 10 minutes under -race on two cores. Only
	// that default is raised, and only for the test binary run directly:
	// `go test` itself kills a package's binary one minute after its own
	// -timeout (default 10 m), which is why the README's test command
	// passes -timeout 30m.
	flag.Parse()
	if f := flag.Lookup("test.timeout"); f != nil && f.Value.String() == (10*time.Minute).String() {
		_ = f.Value.Set((25 * time.Minute).String())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testConfig = `
agents:
  - id: fraud-review
    tenants: [default]
    trust_on_first_use: true
    evidence_schemas:
      assess_refund_risk: refund_evidence
`

func writeConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a2ad.yaml")
	if err := os.WriteFile(p, []byte(testConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startAgent starts the reference agent on an external NATS at url.
func startAgent(t *testing.T, url string) *refagent.Agent {
	t.Helper()
	return agentOn(t, url, credentialFor(t, url, ""), nil)
}

// delegateC7 returns a call of a small refund case that completes at once.
// Fresh each time: the SDK stamps per-session metadata into the params.
func delegateC7() *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "delegate", Arguments: map[string]any{
		"agent": "fraud-review", "skill": "assess_refund_risk", "objective": "Assess this refund.",
		"evidence":      map[string]any{"case_id": "C-7", "amount_cents": 1999, "currency": "EUR"},
		"output_schema": "risk_assessment", "wait_seconds": 10,
	}}
}

func TestDemoExitsZeroWithAllFiveVerdicts(t *testing.T) {
	cmd := exec.Command(bin, "demo")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a2ad demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"agent asks: Case C-41: the refund of 125000 cents is above the manual review threshold of 50000 cents.",
		"host answers: yes",
		"left out of the brief (not allowed for fraud-review): /customer_email",
		`"case_id":"C-41"`,
		"verdict: completed — as expected",
		"verdict: failed (artifact_rejected) — as expected",
		"resume    input-required  working",
		"demo: all 5 cases ended as expected",
		"reference agent fraud-review-http serves A2A 1.0 over HTTP; its card, fetched from http://127.0.0.1:",
		"is approved (trust on first use): binding JSONRPC http://127.0.0.1:",
		"== C-42 over HTTP: a standard A2A agent (the official Go SDK, JSON-RPC) asks, is answered, completes",
		"agent asks: Case C-42: the refund of 90000 cents is above the manual review threshold of 50000 cents.",
		`validated artifact risk-assessment: {"case_id":"C-42","policy_version":"fraud-policy-2026.11","reasons":["amount 90000 cents above 50000","3 prior refunds in the last 90 days (3 or more)","identity not verified by a human reviewer"],"risk_level":"high","score":0.9}`,
		"== what an operator sees: the audit trail of tsk-",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("demo output lacks %q\n%s", want, out)
		}
	}
	// The trail of the rejected artifact, in the order it happened. The
	// delegation's acceptance is recorded once the agent has answered the
	// brief, so the agent's start, which it may report before it answers,
	// can come before or after it.
	trail := regexp.MustCompile(`(?s)task\.transition +host:demo-host +default +(tsk-\S+) +fraud-review +-→submitted \(submit\).*` +
		`task\.transition +agent:fraud-review +default .*submitted→working \(start\).*` +
		`artifact\.verdict +daemon +default .* artifact risk-assessment invalid: /parts/0/data \(additionalProperties\).*` +
		`task\.transition +daemon +default .*working→failed \(fail\) reason="artifact_rejected"`)
	accepted := regexp.MustCompile(`(?s)task\.transition +host:demo-host +default +(tsk-\S+) +fraud-review +-→submitted \(submit\).*` +
		`delegation\.accepted +host:demo-host +default +tsk-\S+ +fraud-review +brief=sha256:[0-9a-f]{64}.*` +
		`task\.transition +daemon +default .*working→failed \(fail\) reason="artifact_rejected"`)
	if !trail.Match(out) || !accepted.Match(out) {
		t.Errorf("demo output lacks the audit trail of C-13\n%s", out)
	}
}

func TestServeStdioWithExternalNATS(t *testing.T) {
	ns, _, js := natstest.Start(t)
	startAgent(t, ns.ClientURL())
	var stderr testlog.Buffer
	cmd := exec.Command(bin, "serve", "--stdio", "--config", writeConfig(t), "--nats-url", ns.ClientURL(), "--data-dir", t.TempDir())
	cmd.Stderr = &stderr
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "AUTOMEMLIMIT=")
	})
	cmd.Env = append(cmd.Env, "GOMEMLIMIT=1GiB")
	client := mcp.NewClient(&mcp.Implementation{Name: "stdio-host", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The session keeps the child's stdin open until Close (go-sdk#1061).
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nstderr: %s", err, stderr.String())
	}
	defer session.Close()

	var agents *mcp.CallToolResult
	deadline := time.Now().Add(10 * time.Second)
	for {
		agents, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(agents.StructuredContent)
		if strings.Contains(string(b), `"delegable":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent never became delegable: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := session.CallTool(ctx, delegateC7())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(b), `"state":"completed"`) || !strings.Contains(string(b), `"risk_level":"low"`) {
		t.Fatalf("delegate over stdio: %s %v", b, res.Content)
	}
	if !strings.Contains(stderr.String(), "a2ad serving") {
		t.Errorf("logs did not go to stderr: %q", stderr.String())
	}
	if want := `msg="Go runtime" go_gc_percent=400 go_gc_source="a2ad default under a memory limit" go_memory_limit_bytes=1073741824 go_memory_limit_source=GOMEMLIMIT`; !strings.Contains(stderr.String(), want) {
		t.Errorf("startup log lacks %s: %q", want, stderr.String())
	}
	// The stdio principal is the configured one (default: subject local,
	// tenant default, scopes a2a:read a2a:delegate, so every tool).
	var out struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(b, &out)
	kv, err := js.KeyValue(ctx, task.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, out.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	var rec task.Record
	_ = json.Unmarshal(e.Value(), &rec)
	if rec.Tenant != "default" || rec.Subject != "local" {
		t.Errorf("stdio task tenant %q subject %q, want default local", rec.Tenant, rec.Subject)
	}
	// a2ad's own five, and the reference agent's per-skill tool (whose
	// name has "__"), once the registry has reported its approval.
	if tools, err := session.ListTools(ctx, nil); err != nil || len(slices.DeleteFunc(tools.Tools, func(t *mcp.Tool) bool { return strings.Contains(t.Name, "__") })) != 5 {
		t.Errorf("stdio tools/list: %v", err)
	}
}

var servingLine = regexp.MustCompile(`nats=((?:nats|tls)://\S+) mcp=(https?://\S+)/mcp`)

// serveHTTP starts `a2ad serve` with an embedded NATS server on free ports
// and returns the NATS URL and HTTP base URL it reports.
func serveHTTP(t *testing.T, dataDir string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", writeConfig(t), "--data-dir", dataDir,
		"--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	select {
	case m := <-found:
		return cmd, m[1], m[2]
	case <-time.After(20 * time.Second):
		t.Fatal("a2ad serve did not report its listeners")
	}
	return nil, "", ""
}

func TestServeHTTPAndTasksCLI(t *testing.T) {
	dataDir := t.TempDir()
	cmd, natsURL, httpURL := serveHTTP(t, dataDir)
	// The agent's credential, minted through the admin API of the daemon
	// of dataDir (the CLI's default path).
	out, err := exec.Command(bin, "agents", "credential", "fraud-review", "--out", "-", "--data-dir", dataDir, "--ttl", "1h").Output()
	if err != nil {
		t.Fatalf("a2ad agents credential: %v", err)
	}
	agentOn(t, natsURL, strings.TrimSpace(string(out)), nil)

	// The host's token, minted by the CLI with the data directory's key.
	tokOut, err := exec.Command(bin, "token", "mint", "--data-dir", dataDir, "--sub", "http-host", "--tenant", "default",
		"--scope", "a2a:read a2a:delegate", "--ttl", "10m").Output()
	if err != nil {
		t.Fatalf("token mint: %v", err)
	}
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "http-host", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: httpURL + "/mcp",
		HTTPClient: mcpedge.BearerClient(strings.TrimSpace(string(tokOut)))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	var taskID string
	deadline := time.Now().Add(10 * time.Second)
	for taskID == "" {
		res, err := session.CallTool(ctx, delegateC7())
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			taskID = res.StructuredContent.(map[string]any)["task_id"].(string)
			break
		}
		if time.Now().After(deadline) { // the agent registers asynchronously
			t.Fatalf("delegate kept failing: %v", res.Content[0].(*mcp.TextContent).Text)
		}
		time.Sleep(50 * time.Millisecond)
	}

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--server", httpURL, "--data-dir", dataDir)...).CombinedOutput()
		if err != nil {
			t.Fatalf("a2ad %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	list := run("tasks", "list")
	if !regexp.MustCompile(`(?m)^TASK\s+STATE\s+AGENT\s+SKILL\s+TENANT\s+AGE\s+REASON$`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^`+taskID+`\s+completed\s+fraud-review\s+assess_refund_risk\s+default\s+\d+s\s*$`).MatchString(list) {
		t.Errorf("tasks list:\n%s", list)
	}
	get := run("tasks", "get", taskID)
	for _, want := range []string{"State:     completed", "risk-assessment valid", "submit    -          submitted  host",
		"start     submitted  working    agent", "complete  working    completed  agent"} {
		if !strings.Contains(get, want) {
			t.Errorf("tasks get lacks %q:\n%s", want, get)
		}
	}
	var rec struct {
		TaskID  string `json:"task_id"`
		State   string `json:"state"`
		History []any  `json:"history"`
	}
	if err := json.Unmarshal([]byte(run("tasks", "get", taskID, "--json")), &rec); err != nil || rec.TaskID != taskID || rec.State != "completed" || len(rec.History) != 3 {
		t.Errorf("tasks get --json: %+v %v", rec, err)
	}
	out, err = exec.Command(bin, "tasks", "get", "tsk-nope", "--server", httpURL, "--data-dir", dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "task_not_found") {
		t.Errorf("unknown task: %v %s", err, out)
	}

	// SIGTERM stops the daemon cleanly; the task survives in the data dir.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	cmd2, _, httpURL2 := serveHTTP(t, dataDir)
	defer func() { _ = cmd2.Process.Signal(syscall.SIGTERM) }()
	out2, err := exec.Command(bin, "tasks", "get", taskID, "--server", httpURL2, "--data-dir", dataDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out2), "State:     completed") {
		t.Errorf("after restart: %v\n%s", err, out2)
	}
}

func TestServeRefusesUnknownConfigKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(p, []byte("agentz: []\n"), 0o600)
	out, err := exec.Command(bin, "serve", "--config", p, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "line 1: unknown key agentz (did you mean agents?)") {
		t.Errorf("got %v: %s", err, out)
	}
}

// The no-flag defaults are what `a2ad serve` uses; they are asserted from
// --help rather than by binding the fixed ports, which a running a2ad may hold.
func TestServeDefaults(t *testing.T) {
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	// Whitespace folded: the column of the descriptions moves with the longest flag.
	help := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{`--data-dir string directory for the embedded NATS JetStream state (default "./a2ad-data")`,
		`(default "127.0.0.1:8080")`, `(default "127.0.0.1:4222")`, "--nats-url string", "--stdio"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, out)
		}
	}
}

// A daemon configured with an identity provider's public key accepts the
// tokens `a2ad token mint --key` signs with the private half, and refuses
// the development key's.
func TestTokenMintWithAConfiguredKey(t *testing.T) {
	dir := t.TempDir()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	privDER, _ := x509.MarshalPKCS8PrivateKey(priv)
	pubDER, _ := x509.MarshalPKIXPublicKey(pub)
	keyFile, pubFile := filepath.Join(dir, "idp.key"), filepath.Join(dir, "idp-public.pem")
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600)
	_ = os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600)
	cfg := filepath.Join(dir, "a2ad.yaml")
	_ = os.WriteFile(cfg, []byte(testConfig+"auth:\n  issuer: https://idp.example.com\n  audience: https://a2ad.example.com/mcp\n  public_key_file: "+pubFile+"\n"), 0o600)
	d := startDaemon(t, nil, "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")

	mint := func(args ...string) string {
		out, err := exec.Command(bin, append([]string{"token", "mint", "--sub", "h", "--audience", "https://a2ad.example.com/mcp"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("token mint %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	status := func(token string) int {
		req, _ := http.NewRequest(http.MethodPost, d.HTTP+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := mint("--key", keyFile, "--issuer", "https://idp.example.com")
	if got := status(good); got != 200 {
		t.Errorf("token signed with the configured key: %d, want 200", got)
	}
	sig := good[strings.LastIndexByte(good, '.')+1:]
	if strings.Contains(d.log.String(), sig) {
		t.Errorf("a2ad logged the token")
	}
	dev, err := mcpedge.MintDevToken(t.TempDir(), "https://a2ad.example.com/mcp", "h", "default", "a2a:read", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := status(dev); got != 401 {
		t.Errorf("a token from some development key: %d, want 401", got)
	}
	// This daemon has no development key: the CLI says so rather than make one.
	if out, err := exec.Command(bin, "token", "mint", "--sub", "h", "--data-dir", filepath.Join(dir, "data")).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "no development key in") {
		t.Errorf("token mint without a development key: %v %s", err, out)
	}
	out, err := exec.Command(bin, "token", "mint", "--sub", "h", "--key", keyFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--key needs --issuer") {
		t.Errorf("--key without --issuer: %v %s", err, out)
	}
}

// An operator approves a configured agent at the fingerprint it reviewed,
// and quarantines it again, with `a2ad agents` against the running daemon.
func TestAgentsCLIApproveAndQuarantine(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "a2ad.yaml")
	_ = os.WriteFile(cfg, []byte("agents:\n  - id: fraud-review\n    tenants: [default]\n"), 0o600) // explicit approval
	dataDir := filepath.Join(dir, "data")
	d := startDaemon(t, nil, "--config", cfg, "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	agentOn(t, d.NATS, credentialFor(t, d.NATS, d.DataDir), nil)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--data-dir", dataDir)...).CombinedOutput()
		return string(out), err
	}
	var rec struct {
		Status      string `json:"status"`
		Fingerprint string `json:"fingerprint"`
		Delegable   bool   `json:"delegable"`
	}
	waitUntil(t, "the agent's registration", func() bool {
		out, err := run("agents", "show", "fraud-review", "--json")
		return err == nil && json.Unmarshal([]byte(out), &rec) == nil && rec.Status == "pending"
	})
	if rec.Fingerprint != "sha256:25def1edcba40677aa566a020fe76c1d30dc9124faf5eaaafbdff4e119f157a5" || rec.Delegable {
		t.Fatalf("pending agent: %+v", rec)
	}
	if out, _ := run("agents", "list"); !regexp.MustCompile(`(?m)^fraud-review\s+pending\s+false\s+unknown\s+sha256:25def1ed`).MatchString(out) {
		t.Errorf("agents list:\n%s", out)
	}
	h := connectHost(t, d)
	args := delegateArgs("C-7", 1999, "", 5)
	if out, err := h.call("delegate", args); err != nil || !strings.HasPrefix(out.ErrText, "agent_not_found:") {
		t.Errorf("delegate to a pending agent (invisible to hosts until approved): %v %q", err, out.ErrText)
	}
	if out, err := run("agents", "approve", "fraud-review", "--fingerprint", "sha256:0000"); err == nil || !strings.Contains(out, "fingerprint_mismatch") {
		t.Errorf("approve at another fingerprint: %v %s", err, out)
	}
	if out, err := run("agents", "approve", "fraud-review", "--fingerprint", rec.Fingerprint); err != nil ||
		!regexp.MustCompile(`(?m)^Status:\s+approved$`).MatchString(out) || !regexp.MustCompile(`(?m)^Delegable:\s+true$`).MatchString(out) {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if got := h.mustCall("delegate", args); got.State != "completed" {
		t.Errorf("delegate after approval: %s", got.State)
	}
	if out, err := run("agents", "quarantine", "fraud-review", "--reason", "card under review"); err != nil || !strings.Contains(out, "quarantined") {
		t.Fatalf("quarantine: %v\n%s", err, out)
	}
	if out, err := h.call("delegate", delegateArgs("C-8", 1999, "", 5)); err != nil || !strings.HasPrefix(out.ErrText, "agent_not_delegable:") ||
		!strings.Contains(out.ErrText, "card under review") {
		t.Errorf("delegate to a quarantined agent: %v %q", err, out.ErrText)
	}
}

func TestServeLogsTheNATSURLWithoutItsPassword(t *testing.T) {
	for in, want := range map[string]string{
		"nats://a2ad:s3cret-pw@nats.a2ad.svc:4222":         "nats://a2ad:xxxxx@nats.a2ad.svc:4222",
		"nats://127.0.0.1:4222":                            "nats://127.0.0.1:4222",
		"nats://s3cret-token@127.0.0.1:4222":               "nats://xxxxx@127.0.0.1:4222",
		"a2ad:s3cret-pw@127.0.0.1:4222":                    "a2ad:xxxxx@127.0.0.1:4222",
		"nats://a2ad:pw1@n1:4222, nats://a2ad:pw2@n2:4222": "nats://a2ad:xxxxx@n1:4222,nats://a2ad:xxxxx@n2:4222",
	} {
		if got := daemon.RedactURLs(in); got != want {
			t.Errorf("RedactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestServeStoppedWhileStarting: SIGTERM while a2ad still waits for its
// NATS server (here: nothing listens) is a requested stop: exit 0, said
// in the log, not "a2ad did not start".
func TestServeStoppedWhileStarting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	var stderr testlog.Buffer
	cmd := exec.Command(bin, "serve", "--nats-url", url, "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the Go runtime line", func() bool { return strings.Contains(stderr.String(), `msg="Go runtime"`) })
	time.Sleep(500 * time.Millisecond) // into the wait for NATS
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve stopped while starting: %v, want exit 0\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `msg="a2ad stopped while starting"`) || strings.Contains(stderr.String(), "did not start") {
		t.Errorf("log:\n%s\nwant \"a2ad stopped while starting\", not \"did not start\"", stderr.String())
	}
}
