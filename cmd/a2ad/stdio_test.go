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
