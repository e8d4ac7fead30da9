package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/a2ad/a2ad"
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
binding: nats nats://127.0.0.1:4222/a2a.agent.invoice-summary
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
		// Without --card-url the card vouches for no HTTP origin.
		rep.NotDelegableReason != "card has no supportedInterfaces entry a2ad delegates over (protocolBinding urn:a2ad:binding:nats:v1, or JSONRPC or HTTP+JSON over https, at protocolVersion 1.0): "+
			"/supportedInterfaces/0/url: the card was registered over NATS and vouches for no HTTP origin: its origin https://georoute-agent.example.com must be in the agent's allowed_origins; "+
			"/supportedInterfaces/1/protocolBinding: GRPC, which a2ad does not delegate over (only JSONRPC and HTTP+JSON); "+
			"/supportedInterfaces/2/url: the card was registered over NATS and vouches for no HTTP origin: its origin https://georoute-agent.example.com must be in the agent's allowed_origins" ||
		!strings.HasPrefix(rep.Fingerprint, "sha256:") {
		t.Errorf("--json report %+v", rep)
	}

	forged := []byte(strings.Replace(string(raw), `"agentIdentity"`, `"x\nfault: /name: forged"`, 1))
	out, _ = runCheckCard(t, forged, "-")
	if !strings.Contains(out, `note: "/x\nfault: ~1name: forged": unknown field`) || strings.Contains(out, "\nfault: /name") {
		t.Errorf("a member name forged a line:\n%s", out)
	}
}

// check-card's summary gives the real totals, also past the 50 faults or
// notes it lists: 64 skills each without name, description and tags are
// 192 faults; 60 unknown members are 60 notes.
func TestAgentsCheckCardCountsEveryFinding(t *testing.T) {
	var c map[string]any
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &c); err != nil {
		t.Fatal(err)
	}
	skills := c["skills"]
	var bare []any
	for i := range 64 {
		bare = append(bare, map[string]any{"id": fmt.Sprint("s", i)})
	}
	c["skills"] = bare
	b, _ := json.Marshal(c)
	out, code := runCheckCard(t, b, "-")
	if code != 1 || !strings.HasSuffix(out, "\nfault: (card): and 142 more faults\nrefused: 192 faults, 0 notes\n") {
		t.Errorf("exit %d, output ends %q; want exit 1, 50 faults listed, and 142 more, refused: 192 faults", code, out[max(0, len(out)-120):])
	}
	out, _ = runCheckCard(t, b, "-", "--json")
	var rep cardReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.FaultCount != 192 || len(rep.Faults) != 51 {
		t.Errorf("--json: fault_count %d, %d faults listed (%v); want 192, 51", rep.FaultCount, len(rep.Faults), err)
	}

	c["skills"] = skills
	for i := range 60 {
		c[fmt.Sprint("x-later-field-", i)] = i
	}
	b, _ = json.Marshal(c)
	out, code = runCheckCard(t, b, "-")
	if code != 0 || !strings.Contains(out, "\nnote: (card): and 10 more notes\n") || !strings.HasSuffix(out, "\naccepted: 60 notes, 0 warnings\n") {
		t.Errorf("exit %d, output\n%s\nwant exit 0, and 10 more notes, accepted: 60 notes", code, out)
	}
}

// A NATS-binding interface URL with any scheme nats.go dials (tls, ws,
// wss) is accepted; one naming another agent id than --agent is a note and
// the agent stays delegable (docs/nats-binding.md §3.3 says SHOULD).
func TestAgentsCheckCardNATSInterfaceURLs(t *testing.T) {
	card := func(url string) []byte {
		var c map[string]any
		if err := json.Unmarshal(a2ad.FraudReviewCard(), &c); err != nil {
			t.Fatal(err)
		}
		c["supportedInterfaces"].([]any)[0].(map[string]any)["url"] = url
		b, _ := json.Marshal(c)
		return b
	}
	for _, url := range []string{"tls://nats.example.com:4222/a2a.agent.fraud-review", "ws://127.0.0.1:8080/a2a.agent.fraud-review",
		"wss://nats.example.com:443/a2a.agent.fraud-review", "nats://127.0.0.1:4222/a2a.agent.fraud-review/"} {
		out, code := runCheckCard(t, card(url), "-", "--agent", "fraud-review")
		if code != 0 || strings.Contains(out, "note:") || !strings.Contains(out, "\ndelegable as agent fraud-review once approved\n") {
			t.Errorf("%s: exit %d:\n%s\nwant accepted, no note, delegable", url, code, out)
		}
	}
	out, code := runCheckCard(t, card("nats://127.0.0.1:4222/a2a.agent.fraud-review"), "-", "--agent", "fraud-review-2")
	want := "note: /supportedInterfaces/0/url: names agent fraud-review, not fraud-review-2: a2ad addresses the agent by its configured id fraud-review-2 (docs/nats-binding.md §3.3: the URL's agent id SHOULD be the same)\n" +
		"delegable as agent fraud-review-2 once approved\n" +
		"binding: nats nats://127.0.0.1:4222/a2a.agent.fraud-review\n"
	if code != 0 || !strings.Contains(out, want) || !strings.HasSuffix(out, "accepted: 1 notes, 0 warnings\n") {
		t.Errorf("another agent id: exit %d:\n%s\nwant accepted with\n%s", code, out, want)
	}
}

// A 0.3 card is refused for every fault at once, at the pointers of the
// card as presented (red15-hostile finding 5).
func TestAgentsCheckCard03EveryFault(t *testing.T) {
	b, err := os.ReadFile("../../testdata/cards/fraud-review-0.3.json")
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	_ = json.Unmarshal(b, &c)
	delete(c, "description")
	c["url"] = "ftp://x"
	c["securitySchemes"] = map[string]any{"s": map[string]any{"type": "apiKey", "name": "k", "in": "header"}}
	c["security"] = []any{map[string]any{"nope": []any{}}}
	c["additionalInterfaces"] = []any{map[string]any{"transport": "GRPC"}}
	whole, _ := json.Marshal(c)
	out, code := runCheckCard(t, whole, "-")
	want := `card: - (A2A 0.3 shape)
fault: /additionalInterfaces/0: url and transport are required
fault: /description: required
fault: /url: scheme "ftp" is not allowed (want nats, tls, ws, wss, https, http, grpc)
fault: /security/0/nope: names a security scheme that securitySchemes does not declare
refused: 4 faults, 0 notes
`
	if code != 1 || out != want {
		t.Errorf("exit %d, output\n%s\nwant exit 1,\n%s", code, out, want)
	}
}

// With --card-url, check-card says over which HTTP interface a2ad would
// delegate to an agent whose card it fetches there: the @a2a-js/sdk 1.3
// card of issue 16 from its origin, over JSONRPC; from another origin, not.
func TestAgentsCheckCardHTTPInterface(t *testing.T) {
	const file = "../../testdata/cards/a2a-js-1.3-mixed.json"
	out, code := runCheckCard(t, nil, file, "--agent", "movie-agent", "--card-url", "http://localhost:41241")
	if code != 0 || !strings.Contains(out, "\ndelegable as agent movie-agent once approved\nbinding: JSONRPC http://localhost:41241/a2a/jsonrpc\n") {
		t.Errorf("from its origin: exit %d:\n%s", code, out)
	}
	out, code = runCheckCard(t, nil, file, "--agent", "movie-agent", "--card-url", "https://movies.example")
	if code != 0 || !strings.Contains(out, "\nnot delegable as agent movie-agent: card has no supportedInterfaces entry a2ad delegates over") ||
		!strings.Contains(out, "/supportedInterfaces/0/url: its origin http://localhost:41241 is neither the card's origin https://movies.example nor in the agent's allowed_origins") {
		t.Errorf("from another origin: exit %d:\n%s", code, out)
	}
	if out, err := exec.Command(bin, "agents", "check-card", file, "--agent", "movie-agent", "--card-url", "ftp://movies.example").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "--card-url: agentcard: card URL \"ftp://movies.example\": scheme must be https (http only on a loopback host)") {
		t.Errorf("a card URL a2ad would not fetch: %v:\n%s", err, out)
	}
}
