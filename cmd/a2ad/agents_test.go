package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/agentcard"
)

// An operator sees which card fields are phrased as instructions to a
// model, and what kind: a count in the list, pointer and kind in show.
func TestAgentsCLIShowsCardWarnings(t *testing.T) {
	rec := agentcard.Record{AgentID: "fraud-review", Status: agentcard.StatusQuarantined, Fingerprint: "sha256:25def1ed",
		Card: json.RawMessage(`{"name":"Fraud Review"}`),
		Warnings: []agentcard.Warning{
			{Pointer: "/skills/0/id", Kind: "instruction_override"},
			{Pointer: "/skills/0/description", Kind: "exfiltration"},
		}}
	var list bytes.Buffer
	if err := printAgents(&list, []agentcard.Record{rec, {AgentID: "refund-ledger", Status: agentcard.StatusApproved}}); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^AGENT\s+STATUS\s+DELEGABLE\s+REACHABLE\s+BINDING\s+FINGERPRINT\s+WARNINGS\s+REASON$`, `(?m)^fraud-review\s+quarantined\s+false\s+unknown\s+sha256:25def1ed\s+2\s*$`, `(?m)^refund-ledger\s+approved\s+false\s+unknown\s+0\s*$`} {
		if !regexp.MustCompile(re).MatchString(list.String()) {
			t.Errorf("agents list lacks %s:\n%s", re, list.String())
		}
	}
	var show bytes.Buffer
	if err := printAgent(&show, &rec); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"card text phrased as instructions to a model at /skills/0/id (instruction_override)\n",
		"card text phrased as instructions to a model at /skills/0/description (exfiltration)\n",
	} {
		if !strings.Contains(show.String(), want) {
			t.Errorf("agents show lacks %q:\n%s", want, show.String())
		}
	}
}
