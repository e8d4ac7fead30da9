package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// inputRequestScenarios are the official MCP conformance suite's SEP-2322
// scenarios, all of which a2ad serves with --conformance-tools (the test
// tools, and the test prompt for input-required-result-non-tool-request).
var inputRequestScenarios = []string{
	"input-required-result-basic-elicitation",
	"input-required-result-basic-sampling",
	"input-required-result-basic-list-roots",
	"input-required-result-request-state",
	"input-required-result-multiple-input-requests",
	"input-required-result-multi-round",
	"input-required-result-missing-input-response",
	"input-required-result-non-tool-request",
	"input-required-result-result-type",
	"input-required-result-unsupported-methods",
	"input-required-result-tampered-state",
	"input-required-result-capability-check",
	"input-required-result-ignore-extra-params",
	"input-required-result-validate-input",
}

// The conformance suite's input-request scenarios pass against the real
// binary with no expected failures: every check SUCCESS, none a warning.
// It runs .ci/conformance against a daemon started here, so it needs the
// suite installed (.ci/conformance installs it into .ci/.cache on its
// first run, from the npm registry); without it the test is skipped.
func TestConformanceInputRequestScenarios(t *testing.T) {
	script, err := filepath.Abs("../../.ci/conformance")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), ".cache", "conformance-0.2.0-alpha.12", ".installed")); err != nil {
		t.Skip("the MCP conformance suite is not installed: run .ci/conformance once")
	}
	dir := t.TempDir()
	d := startDaemon(t, nil, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1", "--conformance-tools")
	token := d.token(t, "a2a:read")
	for _, scenario := range inputRequestScenarios {
		t.Run(scenario, func(t *testing.T) {
			results := filepath.Join(dir, scenario)
			cmd := exec.Command(script, "--scenario", scenario, "--spec-version", "2026-07-28")
			cmd.Env = append(os.Environ(), "A2AD_CONFORMANCE_URL="+d.HTTP+"/mcp", "A2AD_CONFORMANCE_TOKEN="+token,
				"A2AD_CONFORMANCE_EXPECTED_FAILURES=", "A2AD_CONFORMANCE_RESULTS="+results)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf(".ci/conformance --scenario %s: %v\n%s", scenario, err, tail(string(out), 30))
			}
			files, _ := filepath.Glob(filepath.Join(results, "custom", "server-"+scenario+"-*", "checks.json"))
			if len(files) != 1 {
				t.Fatalf("checks.json of %s: %v\n%s", scenario, files, tail(string(out), 30))
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var checks []struct {
				ID, Status, ErrorMessage string
			}
			if err := json.Unmarshal(b, &checks); err != nil || len(checks) == 0 {
				t.Fatalf("checks.json: %v %s", err, b)
			}
			for _, c := range checks {
				if c.Status != "SUCCESS" {
					t.Errorf("%s: %s %s", c.ID, c.Status, strings.TrimSpace(c.ErrorMessage))
				}
			}
		})
	}
}
