package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
)

// SIGHUP reloads the host schemas without dropping tasks: a task keeps the
// schema version it was delegated with — through the reload and through a
// restart — while new tasks get the new version; a refused reload changes
// nothing.
func TestSchemaReloadKeepsEachTaskOnItsVersion(t *testing.T) {
	dir := t.TempDir()
	v1, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", "risk_assessment.json"))
	if err != nil {
		t.Fatal(err)
	}
	evidence, _ := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", "refund_evidence.json"))
	// v2 also requires reviewer_id, which the reference agent never sends.
	v2 := []byte(strings.Replace(string(v1), `"required": ["case_id",`, `"required": ["reviewer_id", "case_id",`, 1))
	v2 = []byte(strings.Replace(string(v2), `"properties": {`, `"properties": {"reviewer_id": {"type": "string"},`, 1))
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("risk_assessment.json", v1)
	write("refund_evidence.json", evidence)

	srv, _, _ := natstest.Start(t)
	slow := map[string]string{"C-801": refagent.ModeSlow, "C-803": refagent.ModeSlow}
	agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), slow)
	flags := append(external(t, srv.ClientURL()), "--schemas-dir", dir)
	d := startDaemon(t, nil, flags...)
	h := connectHost(t, d)

	// C-801 is delegated under v1; the agent works on it for 3 s.
	first, err := h.delegateWhenAgentKnown(delegateArgs("C-801", 1999, "", 0))
	if err != nil || first.ErrText != "" {
		t.Fatalf("delegate C-801: %v %s", err, first.ErrText)
	}
	write("risk_assessment.json", v2)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload", func() bool {
		return strings.Contains(d.log.String(), `msg="host schemas reloaded" added=[] changed=[risk_assessment] removed=[] unchanged=1`)
	})
	if got := h.waitFinal(first.TaskID, 30*time.Second); got.State != "completed" {
		t.Errorf("C-801, delegated under v1: %s %s, want completed", got.State, got.Reason)
	}
	// A new task is held to v2.
	second := h.mustCall("delegate", delegateArgs("C-802", 1999, "", 10))
	if second.State != "failed" || second.Reason != "artifact_rejected" {
		t.Errorf("C-802, delegated under v2: %s %s, want failed artifact_rejected", second.State, second.Reason)
	}
	if rec := getRecord(t, d, second.TaskID); len(rec.Verdicts) != 1 || len(rec.Verdicts[0].Violations) != 1 ||
		rec.Verdicts[0].Violations[0].Pointer != "/parts/0/data/reviewer_id" || rec.Verdicts[0].Violations[0].Keyword != "required" {
		t.Errorf("C-802 verdicts: %+v", rec.Verdicts)
	}

	// A schema reaching outside its file is refused: v2 stays in force.
	write("risk_assessment.json", []byte(`{"$ref": "http://evil.example/schema.json"}`))
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refused reload", func() bool {
		return strings.Contains(d.log.String(), `msg="host schemas not reloaded; the previous ones stay in force"`) &&
			strings.Contains(d.log.String(), "risk_assessment.json at /$ref")
	})

	// C-803 is delegated under v2, then a2ad restarts with v1 on disk: the
	// task is still held to v2, read back from the archive.
	third := h.mustCall("delegate", delegateArgs("C-803", 1999, "", 0))
	write("risk_assessment.json", v1)
	d.kill(t)
	d2 := startDaemon(t, nil, flags...)
	h2 := connectHost(t, d2)
	if got := h2.waitFinal(third.TaskID, 30*time.Second); got.State != "failed" || got.Reason != "artifact_rejected" {
		t.Errorf("C-803, delegated under v2, completed after a restart with v1: %s %s, want failed artifact_rejected", got.State, got.Reason)
	}
	if got := h2.mustCall("delegate", delegateArgs("C-804", 1999, "", 10)); got.State != "completed" {
		t.Errorf("C-804, delegated under v1 after the restart: %s %s, want completed", got.State, got.Reason)
	}
}
