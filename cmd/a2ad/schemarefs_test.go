package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/a2ad/a2ad/internal/natstest"
)

// Host schemas that $ref each other by $id work in the running daemon: the
// reference is resolved from the schema directory (the $id URL is not
// served anywhere), the referenced file's constraints hold the agent's
// artifact, changing only the referenced file is a new version of the
// schema that references it, and a schema using a keyword the validator
// would ignore is refused with its file and pointer.
func TestSchemasReferencingEachOther(t *testing.T) {
	dir := t.TempDir()
	v1, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", "risk_assessment.json"))
	if err != nil {
		t.Fatal(err)
	}
	evidence, _ := os.ReadFile(filepath.Join("..", "..", "testdata", "schemas", "refund_evidence.json"))
	const reasonsInline = `"reasons": {
      "description": "Why the agent reached this assessment, one reason per item.",
      "type": "array",
      "minItems": 1,
      "maxItems": 10,
      "items": {
        "type": "string",
        "minLength": 1,
        "maxLength": 500
      }
    }`
	if !strings.Contains(string(v1), reasonsInline) {
		t.Fatal("testdata/schemas/risk_assessment.json changed: update this test's reasons schema")
	}
	risk := strings.Replace(string(v1), reasonsInline, `"reasons": {"$ref": "reasons.json"}`, 1)
	risk = strings.Replace(risk, `"title":`, `"$id": "https://schemas.a2ad.invalid/risk_assessment.json", "title":`, 1)
	reasons := func(items string) []byte {
		return []byte(`{"$schema": "https://json-schema.org/draft-07/schema", "$id": "https://schemas.a2ad.invalid/reasons.json",
		 "type": "array", "minItems": 1, "maxItems": 10, "items": ` + items + `}`)
	}
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("risk_assessment.json", []byte(risk))
	write("reasons.json", reasons(`{"type": "string", "minLength": 1, "maxLength": 500}`))
	write("refund_evidence.json", evidence)

	srv, _, _ := natstest.Start(t)
	agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), nil)
	d := startDaemon(t, nil, append(external(t, srv.ClientURL()), "--schemas-dir", dir)...)
	h := connectHost(t, d)

	first, err := h.delegateWhenAgentKnown(delegateArgs("C-901", 1999, "", 10))
	if err != nil || first.ErrText != "" || first.State != "completed" {
		t.Fatalf("C-901 under risk_assessment → reasons.json: %v %q %s %s, want completed", err, first.ErrText, first.State, first.Reason)
	}

	// Only reasons.json changes: risk_assessment, which references it, is
	// a new version too, and holds the next artifact to it.
	write("reasons.json", reasons(`{"type": "string", "pattern": "^never$"}`))
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload", func() bool {
		return strings.Contains(d.log.String(), `msg="host schemas reloaded" added=[] changed="[reasons risk_assessment]" removed=[] unchanged=1`)
	})
	second := h.mustCall("delegate", delegateArgs("C-902", 1999, "", 10))
	if second.State != "failed" || second.Reason != "artifact_rejected" {
		t.Fatalf("C-902 under the new reasons.json: %s %s, want failed artifact_rejected", second.State, second.Reason)
	}
	if rec := getRecord(t, d, second.TaskID); len(rec.Verdicts) != 1 || len(rec.Verdicts[0].Violations) == 0 ||
		rec.Verdicts[0].Violations[0].Pointer != "/parts/0/data/reasons/0" || rec.Verdicts[0].Violations[0].Keyword != "pattern" {
		t.Errorf("C-902 verdicts: %+v, want the first at /parts/0/data/reasons/0 (pattern)", rec.Verdicts)
	}

	// A draft-07 schema with a 2019-09 keyword would let extra members
	// through: it is refused, and the schemas in force stay.
	write("risk_assessment.json", []byte(strings.Replace(risk, `"additionalProperties": false`, `"unevaluatedProperties": false`, 1)))
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refused reload", func() bool {
		return strings.Contains(d.log.String(), `msg="host schemas not reloaded; the previous ones stay in force"`) &&
			strings.Contains(d.log.String(), "risk_assessment.json at /unevaluatedProperties: keyword unevaluatedProperties refused")
	})
}
