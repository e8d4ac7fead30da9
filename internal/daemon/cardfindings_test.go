package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/testlog"
)

// An agent registering over NATS a refused card is answered with every
// fault and its JSON pointer; an accepted card with members a2ad does not
// know (a template's `example` for `examples`, a later top-level field) is
// registered and delegable, with notes on its record for the operator, and
// the stored card keeps those members.
func TestRegistrationAnswersEveryFaultAndNote(t *testing.T) {
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "invoice-summary", Tenants: []string{"default"}, TrustOnFirstUse: true}},
			{AgentConfig: agentcard.AgentConfig{ID: "half-written", Tenants: []string{"default"}, TrustOnFirstUse: true}},
		}}, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	card := func(name string) json.RawMessage {
		raw, err := os.ReadFile("../../testdata/cards/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	send := func(id string, raw json.RawMessage) natsbind.RegisterResponse {
		body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: id, Card: raw})
		return newRegistrar(t, d, id).register(id, mint(t, d, id, time.Hour), body)
	}

	resp := send("half-written", card("missing-fields.json"))
	wantErr := "agentcard: 6 faults: /skills/0/tags: must be an array; /description: required; /supportedInterfaces/0/protocolVersion: required; " +
		"/version: required; /defaultOutputModes: required; /skills/0/name: required"
	if resp.Code != natsbind.RegisterInvalid || resp.Status != "" || resp.Error != wantErr {
		t.Errorf("refused registration answered %+v, want invalid: %s", resp, wantErr)
	}

	resp = send("invoice-summary", card("template-example.json"))
	if resp.Status != string(agentcard.StatusApproved) || resp.Code != "" {
		t.Errorf("registration answered %+v, want approved", resp)
	}
	wantNotes := []agentcard.Note{
		{Pointer: "/skills/0/example", Reason: "unknown field: kept, not used (did you mean examples?)"},
		{Pointer: "/agentIdentity", Reason: "unknown field: kept, not used"},
	}
	rec, err := d.Service.Agents.Get(context.Background(), "invoice-summary")
	if err != nil || rec.Fingerprint != resp.Fingerprint || !rec.Delegable || !reflect.DeepEqual(rec.Notes, wantNotes) {
		t.Fatalf("record %+v, %v; want delegable with notes %+v", rec, err, wantNotes)
	}
	var stored map[string]any
	if err := json.Unmarshal(rec.Card, &stored); err != nil || stored["agentIdentity"] == nil {
		t.Errorf("the stored card lost agentIdentity: %s (%v)", rec.Card, err)
	}
}

// A skill id misspelled under evidence_schemas or evidence_keys makes that
// check apply to no skill: when the agent's card is known (registration,
// and a start with the stored card) each such id is a note on the agent,
// naming the skill meant, and a warning in the log.
func TestConfiguredSkillTheCardLacksIsANoteAndAWarning(t *testing.T) {
	dir := t.TempDir()
	cfg := daemon.Config{DataDir: dir, NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true},
			EvidenceSchemas: map[string]string{"asses_refund_risk": "refund_evidence"},
			EvidenceKeys:    map[string][]string{"assess_refund_rsk": {"case_id"}, "*": {"case_id"}},
		}}}
	var logs testlog.Buffer
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: "fraud-review", Card: a2ad.FraudReviewCard()})
	if resp := newRegistrar(t, d, "fraud-review").register("fraud-review", mint(t, d, "fraud-review", time.Hour), body); resp.Status != string(agentcard.StatusApproved) {
		t.Fatalf("registration answered %+v, want approved", resp)
	}
	want := []agentcard.Note{
		{Pointer: "/skills", Reason: "evidence_schemas configures skill asses_refund_risk, which the card does not declare: that configuration applies to no skill (did you mean assess_refund_risk?)"},
		{Pointer: "/skills", Reason: "evidence_keys configures skill assess_refund_rsk, which the card does not declare: that configuration applies to no skill (did you mean assess_refund_risk?)"},
	}
	rec, err := d.Service.Agents.Get(context.Background(), "fraud-review")
	if err != nil || !reflect.DeepEqual(rec.Notes, want) || !rec.Delegable {
		t.Fatalf("record notes %+v (delegable %v), %v; want %+v", rec.Notes, rec.Delegable, err, want)
	}
	warned := func(log string) bool {
		for _, n := range want {
			if !strings.Contains(log, `level=WARN msg="agent configuration names a skill its card does not declare" agent=fraud-review note="`+n.Reason+`"`) {
				return false
			}
		}
		return true
	}
	if !warned(logs.String()) {
		t.Errorf("no warning for each at registration:\n%s", logs.String())
	}
	d.Stop()

	var again testlog.Buffer
	d, err = daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(&again, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if !warned(again.String()) {
		t.Errorf("no warning for each at a start with the stored card:\n%s", again.String())
	}
}
