package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/agentcard"
)

// runCheckCard runs the real binary's `agents check-card` with stdin, and
// returns its stdout and exit status.
func runCheckCard(t *testing.T, stdin []byte, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"agents", "check-card"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		if errOut.Len() > 0 {
			t.Errorf("stderr: %s", errOut.String())
		}
		return out.String(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", 0
}

// `a2ad agents check-card FILE` checks a card offline as a2ad would
// register it: a refused card prints every fault with its pointer and
// exits 1; an accepted one prints its notes, whether a2ad could delegate to
// it as --agent, and the fingerprint to approve; "-" reads stdin; --json
// gives the same findings as JSON; member names cannot forge lines.
func TestAgentsCheckCard(t *testing.T) {
	out, code := runCheckCard(t, nil, "../../testdata/cards/missing-fields.json")
	want := `card: ../../testdata/cards/missing-fields.json (A2A 1.0 shape)
fault: /skills/0/tags: must be an array
fault: /description: required
fault: /supportedInterfaces/0/protocolVersion: required
fault: /version: required
fault: /defaultOutputModes: required
fault: /skills/0/name: required
refused: 6 faults, 0 notes
`
	if out != want || code != 1 {
		t.Errorf("missing-fields: exit %d, output\n%s\nwant exit 1,\n%s", code, out, want)
	}

	raw, err := os.ReadFile("../../testdata/cards/template-example.json")
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := agentcard.Fingerprint(raw)
	out, code = runCheckCard(t, raw, "-", "--agent", "invoice-summary")
	want = `card: - (A2A 1.0 shape)
note: /skills/0/example: unknown field: kept, not used (did you mean examples?)
note: /agentIdentity: unknown field: kept, not used
delegable as agent invoice-summary once approved
fingerprint: ` + fp + `
accepted: 2 notes, 0 warnings
`
	if out != want || code != 0 {
		t.Errorf("template-example: exit %d, output\n%s\nwant exit 0,\n%s", code, out, want)
	}

	out, code = runCheckCard(t, nil, "../../testdata/cards/a2a-1.0-spec-sample.json", "--agent", "georoute", "--json")
	var rep cardReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if !rep.Accepted || rep.Shape != "1.0" || len(rep.Faults) != 0 || len(rep.Notes) != 1 || rep.Notes[0].Pointer != "/security" ||
		!strings.HasPrefix(rep.NotDelegableReason, "card has no supportedInterfaces entry with protocolBinding urn:a2ad:binding:nats:v1") ||
		!strings.HasPrefix(rep.Fingerprint, "sha256:") {
		t.Errorf("--json report %+v", rep)
	}

	forged := []byte(strings.Replace(string(raw), `"agentIdentity"`, `"x\nfault: /name: forged"`, 1))
	out, _ = runCheckCard(t, forged, "-")
	if !strings.Contains(out, `note: "/x\nfault: ~1name: forged": unknown field`) || strings.Contains(out, "\nfault: /name") {
		t.Errorf("a member name forged a line:\n%s", out)
	}
}
