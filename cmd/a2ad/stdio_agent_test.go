package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
)

// registerAgent runs a2ad once on the external NATS of args until the
// reference agent's card is approved and one delegation completed, so
// that a later `serve --stdio` on the same data finds the agent at once.
func registerAgent(t *testing.T, args []string) {
	t.Helper()
	d := startDaemon(t, nil, args...)
	h := connectHost(t, d)
	if r, err := h.delegateWhenAgentKnown(delegateArgs("C-1", 1999, "", 10)); err != nil || r.ErrText != "" {
		t.Fatalf("warm-up: %v %s", err, r.ErrText)
	}
	d.kill(t)
}

// A host that declares elicitation and ends its input right after a
// delegate whose task asks a question (`printf … | a2ad serve --stdio`)
// is answered as a host without elicitation: the call's result is the
// task, input-required, with the question; a2ad asks nothing of the
// closed input and exits 0.
func TestServeStdioOneShotWithElicitationGetsTheQuestion(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), nil)
	args := external(t, srv.ClientURL())
	registerAgent(t, args)
	a, _ := json.Marshal(delegateArgs("C-303", 125000, "", 10)) // 125000: the agent asks
	got, stderr, err := stdioAnswers(t, []string{
		`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"printf","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"delegate","arguments":%s}}`, a),
	}, args...)
	if err != nil {
		t.Fatalf("exit %v, want 0\n%s", err, tail(stderr, 20))
	}
	var m struct {
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				State    string `json:"state"`
				Question string `json:"question"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(got[`"call"`]), &m); err != nil || m.Result.IsError || m.Result.StructuredContent.State != "input-required" || m.Result.StructuredContent.Question == "" {
		t.Fatalf("answer to the call: %s (%v), want the task input-required with its question\n%s", got[`"call"`], err, tail(stderr, 10))
	}
}

// A host's cancellation of a call (notifications/cancelled) is never
// logged as a failed call (measured before: WARN "tool call failed", code
// internal_error, "context canceled"), and gets no answer.
func TestServeStdioCancellationIsNotAFailure(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), map[string]string{"C-200": refagent.ModeSlow})
	args := []string{"--config", configFile(t, "log:\n  level: debug\n"), "--nats-url", srv.ClientURL(), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"}
	registerAgent(t, args)
	cmd := exec.Command(bin, append([]string{"serve", "--stdio"}, args...)...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	a, _ := json.Marshal(delegateArgs("C-200", 1999, "", 10)) // slow: 3 s
	_, _ = io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delegate","arguments":%s,"_meta":{"progressToken":"p"}}}`, a)+"\n")
	// The cancellation once the call waits for the task (its first
	// progress notification).
	var answers []string
	for l := range lines {
		if strings.Contains(l, `"method":"notifications/progress"`) {
			break
		}
		answers = append(answers, l)
	}
	_, _ = io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"user pressed stop"}}`+"\n")
	in.Close()
	for l := range lines {
		if !strings.Contains(l, `"method"`) {
			answers = append(answers, l)
		}
	}
	_ = cmd.Wait()
	log := stderr.String()
	if strings.Contains(log, `msg="tool call failed"`) {
		t.Errorf("the cancellation is logged as a failure:\n%s", tail(log, 10))
	}
	// Where the cancellation lands decides whether a line says so: while
	// the call waits for the task it returns the task as it is (nothing
	// logged, CI's run); in a store or NATS call that ends with the
	// context, "tool call cancelled by the host" at debug. Never a failure.
	if strings.Contains(log, "internal_error") {
		t.Errorf("the cancellation is logged as an internal error:\n%s", tail(log, 10))
	}
	if len(answers) != 1 || !strings.HasPrefix(answers[0], `{"jsonrpc":"2.0","id":1,`) {
		t.Errorf("answers %q, want only initialize's: none for the cancelled call", answers)
	}
}
