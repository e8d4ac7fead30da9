package main

import (
	"testing"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
)

// An agent's artifact sealed by lastChunk is what the host gets, though the
// agent sends a whole replacement afterwards; the refusal is in the task's
// history with its pointer. An endless chunk stream fails its task at the
// chunk past max_parts, with a reason naming the artifact and the limit.
func TestSealedArtifactAndEndlessChunks(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""),
		map[string]string{"C-911": refagent.ModeReplaceAfterLast, "C-912": refagent.ModeEndlessChunks})
	d := startDaemon(t, nil, external(t, srv.ClientURL())...)
	h := connectHost(t, d)

	sealed, err := h.delegateWhenAgentKnown(delegateArgs("C-911", 1999, "", 10))
	if err != nil || sealed.ErrText != "" || sealed.State != "completed" {
		t.Fatalf("C-911: %v %q %s %s, want completed", err, sealed.ErrText, sealed.State, sealed.Reason)
	}
	if len(sealed.Artifacts) != 1 || len(sealed.Artifacts[0].Parts) != 1 {
		t.Fatalf("C-911 artifacts: %+v, want the one sealed", sealed.Artifacts)
	}
	// The honest assessment of 1,999 cents scores 0.1; the replacement 0.
	if data := sealed.Artifacts[0].Parts[0].Data; data["score"] != 0.1 {
		t.Errorf("the host got %v, want the sealed assessment (score 0.1), not the replacement", data)
	}
	const refusal = "refused at /artifactUpdate/artifact: artifact risk-assessment was sealed by its lastChunk; the content it was sealed with stands"
	found := false
	for _, tr := range getRecord(t, d, sealed.TaskID).History {
		found = found || tr.Refused && tr.Reason == refusal
	}
	if !found {
		t.Errorf("C-911 history has no refusal %q: %+v", refusal, getRecord(t, d, sealed.TaskID).History)
	}

	endless := h.mustCall("delegate", delegateArgs("C-912", 1999, "", 10))
	if want := "artifact_too_large: artifact risk-assessment passed max_parts (16 parts)"; endless.State != "failed" || endless.Reason != want {
		t.Errorf("C-912: %s %q, want failed %q", endless.State, endless.Reason, want)
	}
}
