package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
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
