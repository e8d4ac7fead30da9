package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A host that writes its requests and closes stdin at once
// (`printf '…' | a2ad serve --stdio`) gets every answer before a2ad exits:
// 20 runs of 20, each with the three calls answered once each (in any
// order: calls are served concurrently) and a2ad exiting 0. Before issue 15, 19 of 20 runs lost answers
// (go-sdk#1061: the end of input cancelled the calls still open).
func TestServeStdioAnswersPipedInputInFull(t *testing.T) {
	input := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"printf","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"agents_list","arguments":{}}}`,
	}, "\n") + "\n"
	const runs = 20
	full := 0
	for i := range runs {
		cmd := exec.Command(bin, "serve", "--stdio", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1")
		cmd.Stdin = strings.NewReader(input) // closed by exec once copied: EOF right after the requests
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("run %d: exit %v\n%s", i, err, stderr.String())
			continue
		}
		var got []int
		for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
			var m struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil || m.Result == nil || m.Error != nil {
				t.Errorf("run %d: line %q is not a result", i, line)
			}
			switch {
			case m.ID == 2 && strings.Count(string(m.Result), `"inputSchema"`) != 5:
				t.Errorf("run %d: tools/list lists not five tools: %s", i, m.Result)
			case m.ID == 3 && (!strings.Contains(string(m.Result), `"agents":[]`) || strings.Contains(string(m.Result), `"isError":true`)):
				t.Errorf("run %d: agents_list: %s", i, m.Result)
			}
			got = append(got, m.ID)
		}
		slices.Sort(got)
		if slices.Equal(got, []int{1, 2, 3}) {
			full++
		} else {
			t.Errorf("run %d: answers to ids %v, want 1, 2 and 3 once each\n%s", i, got, tail(stderr.String(), 20))
		}
	}
	if full != runs {
		t.Errorf("%d of %d runs answered in full", full, runs)
	}
}

// stdioAnswers runs `a2ad serve --stdio` with args on the lines as its
// whole input and returns its answers by id (as the JSON text of the id),
// its stderr and its exit error.
func stdioAnswers(t *testing.T, lines []string, args ...string) (map[string]string, string, error) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--stdio"}, args...)...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	got := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Method == "" {
			got[string(m.ID)] += line
		}
	}
	return got, stderr.String(), err
}

// On `serve --stdio`, a line that is not a JSON-RPC message a2ad can read,
// a tool outside the principal's scopes and a second initialize are each
// answered with a JSON-RPC error in a2ad's words and a non-zero code, tool
// arguments of the wrong type with a tool error naming the argument, and
// the session goes on: the ping at
// the end is answered and a2ad exits 0.
func TestServeStdioAnswersEveryFaultAndGoesOn(t *testing.T) {
	cfg := configFile(t, "principal:\n  scopes: [a2a:read]\n")
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"printf","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{bad`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"1.0","id":3,"method":"ping"}`,
		`[]`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"task_get","arguments":{"task_id":"x","wait_seconds":1e+23}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"task_cancel","arguments":{"task_id":"tsk-x"}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"printf","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"ping"}`,
	}
	got, stderr, err := stdioAnswers(t, lines, "--config", cfg, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:-1")
	if err != nil {
		t.Fatalf("exit %v, want 0\n%s", err, tail(stderr, 20))
	}
	want := map[string]string{
		"null": `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the message is not valid JSON (RFC 8259)"}}` +
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string or an integer (JSON-RPC 2.0 §4)"}}` +
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: an empty batch ([]) holds no message"}}`,
		"3": `{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`,
		"4": `{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"invalid_argument: tool task_get: /wait_seconds: want an integer from -9223372036854775808 to 9223372036854775807, in digits (no fraction, no exponent) (its input schema is in tools/list)"}],"isError":true}}`,
		"5": `{"jsonrpc":"2.0","id":5,"error":{"code":-32003,"message":"insufficient_scope: tool task_cancel needs scope a2a:delegate, which this principal does not have"}}`,
		"6": `{"jsonrpc":"2.0","id":6,"error":{"code":-32600,"message":"invalid request: initialize was already received on this session; send it once, first"}}`,
		"9": `{"jsonrpc":"2.0","id":9,"result":{}}`,
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("answer to id %s:\n got %s\nwant %s", id, got[id], w)
		}
	}
}
