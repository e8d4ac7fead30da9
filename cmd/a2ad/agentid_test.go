package main

import (
	"encoding/json"
	"github.com/a2ad/a2ad/internal/testlog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	agentBinOnce sync.Once
	agentBin     string
)

// fraudReviewAgent builds cmd/fraud-review-agent once, next to a2ad.
func fraudReviewAgent(t *testing.T) string {
	t.Helper()
	agentBinOnce.Do(func() {
		p := filepath.Join(filepath.Dir(bin), "fraud-review-agent")
		if out, err := exec.Command("go", "build", "-o", p, "../fraud-review-agent").CombinedOutput(); err != nil {
			t.Fatalf("building fraud-review-agent: %v\n%s", err, out)
		}
		agentBin = p
	})
	if agentBin == "" {
		t.Fatal("fraud-review-agent was not built")
	}
	return agentBin
}

// The README's way to run an agent, with the real binaries: the operator
// mints the agent's credential into a file, the agent connects with it and
// registers. Without a credential, or with another agent's, it gets nowhere.
func TestAgentRunsWithTheCredentialTheOperatorMinted(t *testing.T) {
	agent := fraudReviewAgent(t)
	dataDir := t.TempDir()
	_, natsURL, _ := serveHTTP(t, dataDir)
	dir := t.TempDir()
	mintTo := func(id string) string {
		out, err := exec.Command(bin, "agents", "credential", id, "--out", "-", "--data-dir", dataDir).Output()
		if err != nil {
			t.Fatalf("agents credential %s: %v", id, err)
		}
		p := filepath.Join(dir, id+".jwt")
		if err := os.WriteFile(p, out, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	start := func(args ...string) (*exec.Cmd, *testlog.Buffer) {
		cmd := exec.Command(agent, append([]string{"--nats-url", natsURL}, args...)...)
		var logs testlog.Buffer
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &logs
	}

	// Another agent's credential for this agent id: refused before
	// connecting.
	other := mintTo("other-agent")
	out, err := exec.Command(agent, "--nats-url", natsURL, "--agent-id", "fraud-review", "--credential-file", other).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `the credential is for agent \"other-agent\", not --agent-id \"fraud-review\"`) {
		t.Errorf("another agent's credential: %v\n%s", err, out)
	}

	// No credential: the embedded server refuses the connection.
	_, logs := start()
	waitUntil(t, "the credential-less agent to be refused", func() bool {
		return strings.Contains(logs.String(), "Authorization Violation")
	})

	// The agent's own credential: the agent id comes from it, the card is
	// registered and approved (trust on first use), and delegable.
	start("--credential-file", mintTo("fraud-review"))
	waitUntil(t, "fraud-review to be registered and delegable", func() bool {
		out, err := exec.Command(bin, "agents", "show", "fraud-review", "--json", "--data-dir", dataDir).Output()
		var rec struct {
			Status    string `json:"status"`
			Delegable bool   `json:"delegable"`
		}
		return err == nil && json.Unmarshal(out, &rec) == nil && rec.Status == "approved" && rec.Delegable
	})
}
