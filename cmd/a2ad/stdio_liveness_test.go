package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/testlog"
)

// stdioSession is `a2ad serve --stdio` with its input kept open: a host
// window.
type stdioSession struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	log    *testlog.Buffer
	exited chan struct{}
}

func startStdio(t *testing.T, args ...string) *stdioSession {
	t.Helper()
	s := &stdioSession{t: t, lines: make(chan string, 100), log: &testlog.Buffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"serve", "--stdio"}, args...)...)
	s.cmd.Stderr = s.log
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("a2ad serve --stdio log:\n%s", tail(s.log.String(), 30))
		}
	})
	return s
}

// send writes one JSON-RPC message.
func (s *stdioSession) send(msg string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, msg+"\n"); err != nil {
		s.t.Fatalf("write to a2ad: %v", err)
	}
}

// answer returns the response to request id (its JSON text), skipping
// notifications.
func (s *stdioSession) answer(id string, within time.Duration) string {
	s.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("a2ad ended its output before answering %s\n%s", id, tail(s.log.String(), 20))
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Method == "" && string(m.ID) == id {
				return l
			}
		case <-timer.C:
			s.t.Fatalf("no answer to %s within %v\n%s", id, within, tail(s.log.String(), 20))
		}
	}
}

// initialize performs the handshake.
func (s *stdioSession) initialize() {
	s.t.Helper()
	s.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ide","version":"1"}}}`)
	s.answer(`"init"`, 30*time.Second)
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// delegate calls the delegate tool and returns its result's structured
// content (state) and error text, if any.
func (s *stdioSession) delegate(id string, args map[string]any) (state, errText string) {
	s.t.Helper()
	a, _ := json.Marshal(args)
	s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":"delegate","arguments":%s}}`, id, a))
	var m struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			StructuredContent struct {
				State string `json:"state"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	line := s.answer(fmt.Sprintf("%q", id), 60*time.Second)
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		s.t.Fatalf("answer %s: %v", line, err)
	}
	if m.Result.IsError {
		if len(m.Result.Content) > 0 {
			return "", m.Result.Content[0].Text
		}
		return "", line
	}
	return m.Result.StructuredContent.State, ""
}

// stop closes the input and waits for a2ad to exit.
func (s *stdioSession) stop() {
	s.t.Helper()
	s.in.Close()
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("a2ad serve --stdio did not exit after its input closed\n%s", tail(s.log.String(), 20))
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The embedded stdio mode's start-up race (issue 17): an agent process
// that ran before a2ad, connected to the embedded NATS of an earlier run,
// reconnects about a second after a2ad starts. The first delegate right
// after the initialize handshake succeeds (completed), in each of 3 runs;
// before, it failed agent_offline in 3 of 3.
func TestServeStdioFirstDelegateAfterStartFindsTheRunningAgent(t *testing.T) {
	dataDir, addr := t.TempDir(), freeAddr(t)
	args := []string{"--config", configFile(t, ""), "--data-dir", dataDir, "--nats-listen", addr}
	first := startStdio(t, args...)
	first.initialize()
	credFile := filepath.Join(t.TempDir(), "cred")
	if err := os.WriteFile(credFile, []byte(credentialFor(t, "nats://"+addr, dataDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The real agent process, with its own reconnect policy (every second).
	startAgentProcess(t, fraudReviewAgent(t), "--nats-url", "nats://"+addr, "--credential-file", credFile)
	until := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		state, errText := first.delegate(fmt.Sprintf("warm-%d", n), delegateArgs("C-1", 1999, "", 10))
		if state == "completed" {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("warm-up delegate: %q %s", state, errText)
		}
		time.Sleep(100 * time.Millisecond)
	}
	first.stop()
	for run := range 3 {
		s := startStdio(t, args...)
		start := time.Now()
		s.initialize()
		state, errText := s.delegate("first", delegateArgs(fmt.Sprintf("C-%d", 10+run), 1999, "", 10))
		if state != "completed" || errText != "" {
			t.Errorf("run %d: first delegate after start: state %q, error %q; want completed", run, state, errText)
		} else {
			t.Logf("run %d: first delegate completed %v after start", run, time.Since(start).Round(time.Millisecond))
		}
		s.stop()
	}
}
