package main

import (
	"bytes"
	"github.com/a2ad/a2ad/internal/corpus"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/agentcard"
)

// `agents list` has a BINDING column and `agents show` a Binding line with
// the interface a2ad uses, its card origin, and the auth warnings.
func TestAgentsCLIShowsTheBinding(t *testing.T) {
	recs := []agentcard.Record{
		{AgentID: "fraud-review", Status: agentcard.StatusApproved, Delegable: true, Fingerprint: "sha256:25def1ed", Binding: agentcard.BindingNATS,
			Interface: &agentcard.Interface{URL: "nats://127.0.0.1:4222/a2a.agent.fraud-review", ProtocolBinding: "urn:a2ad:binding:nats:v1", ProtocolVersion: "1.0"}},
		{AgentID: "movie-agent", Status: agentcard.StatusApproved, Delegable: true, Fingerprint: "sha256:0e5a", Binding: agentcard.BindingJSONRPC,
			Interface:    &agentcard.Interface{URL: "https://rpc.vendor.example/a2a/jsonrpc", ProtocolBinding: "JSONRPC", ProtocolVersion: "1.0"},
			CardOrigin:   "https://rpc.vendor.example",
			AuthWarnings: []agentcard.Note{{Pointer: "/securityRequirements", Reason: "a2ad cannot authenticate as the card requires: no http.auth is configured"}}},
		{AgentID: "refund-ledger", Status: agentcard.StatusPending, NotDelegableReason: "pending: awaiting operator approval"},
	}
	var list bytes.Buffer
	if err := printAgents(&list, recs); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^AGENT\s+STATUS\s+DELEGABLE\s+REACHABLE\s+BINDING\s+FINGERPRINT\s+WARNINGS\s+REASON$`,
		`(?m)^fraud-review\s+approved\s+true\s+unknown\s+nats\s+sha256:25def1ed\s+0\s*$`,
		`(?m)^movie-agent\s+approved\s+true\s+(unknown|reachable)\s+JSONRPC\s+sha256:0e5a\s+0\s*$`,
		`(?m)^refund-ledger\s+pending\s+false\s+unknown\s+0\s+pending: awaiting operator approval$`,
	} {
		if !regexp.MustCompile(re).MatchString(list.String()) {
			t.Errorf("agents list lacks %s:\n%s", re, list.String())
		}
	}
	var show bytes.Buffer
	if err := printAgent(&show, &recs[1]); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^Binding:\s+JSONRPC https://rpc\.vendor\.example/a2a/jsonrpc$`,
		`(?m)^Card origin:\s+https://rpc\.vendor\.example$`,
		`(?m)^Warning:\s+/securityRequirements: a2ad cannot authenticate as the card requires: no http.auth is configured$`,
	} {
		if !regexp.MustCompile(re).MatchString(show.String()) {
			t.Errorf("agents show lacks %s:\n%s", re, show.String())
		}
	}
	show.Reset()
	if err := printAgent(&show, &recs[0]); err != nil || !regexp.MustCompile(`(?m)^Binding:\s+nats nats://127\.0\.0\.1:4222/a2a\.agent\.fraud-review$`).MatchString(show.String()) {
		t.Errorf("agents show of a NATS agent (%v):\n%s", err, show.String())
	}
}

// Against the real binary: an agent whose card a2ad fetches, the
// @a2a-js/sdk 1.3 card of issue 16 served on a loopback origin, trusted on
// first use, is delegable over JSONRPC, and `a2ad agents show` and
// `agents list` say so.
func TestAgentsShowHTTPAgent(t *testing.T) {
	cardOrigin := corpus.ServeJSSDKCard(t, "../..")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "a2ad.yaml")
	_ = os.WriteFile(cfg, []byte("agents:\n  - id: movie-agent\n    tenants: [default]\n    trust_on_first_use: true\n    card_url: "+cardOrigin+"\n"), 0o600)
	dataDir := filepath.Join(dir, "data")
	startDaemon(t, nil, "--config", cfg, "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--data-dir", dataDir)...).CombinedOutput()
		return string(out), err
	}
	var out string
	var err error
	waitUntil(t, "the fetched card", func() bool {
		out, err = run("agents", "show", "movie-agent")
		return err == nil && strings.Contains(out, "\nBinding:")
	})
	for _, re := range []string{
		`(?m)^Delegable:\s+true$`,
		`(?m)^Binding:\s+JSONRPC ` + regexp.QuoteMeta(cardOrigin) + `/a2a/jsonrpc$`,
		`(?m)^Card origin:\s+` + regexp.QuoteMeta(cardOrigin) + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("agents show lacks %s:\n%s", re, out)
		}
	}
	if out, err := run("agents", "list"); err != nil || !regexp.MustCompile(`(?m)^movie-agent\s+approved\s+true\s+(unknown|reachable)\s+JSONRPC\s+sha256:`).MatchString(out) {
		t.Errorf("agents list (%v):\n%s", err, out)
	}
}
