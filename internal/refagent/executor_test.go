package refagent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// streamOf runs one SendStreamingMessage through the executor's handler
// (a2asrv's, decorated) and returns what the stream yields, one line per
// event: the stream natsagent publishes.
func streamOf(t *testing.T, x *Executor, m *a2a.Message) []string {
	t.Helper()
	var out []string
	for ev, err := range x.Handler().SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: m}) {
		if err != nil {
			t.Fatalf("stream error after %q: %v", out, err)
		}
		out = append(out, describe(t, ev))
	}
	return out
}

func describe(t *testing.T, ev a2a.Event) string {
	t.Helper()
	switch v := ev.(type) {
	case *a2a.Task:
		s := "task " + string(v.Status.State)
		if len(v.History) > 0 {
			s += fmt.Sprintf(" history=%d", len(v.History))
		}
		for _, art := range v.Artifacts {
			s += " artifact " + riskOf(t, art)
		}
		return s
	case *a2a.TaskStatusUpdateEvent:
		return "status " + string(v.Status.State)
	case *a2a.TaskArtifactUpdateEvent:
		return fmt.Sprintf("artifact append=%t last=%t %s", v.Append, v.LastChunk, riskOf(t, v.Artifact))
	}
	return fmt.Sprintf("%T", ev)
}

func riskOf(t *testing.T, art *a2a.Artifact) string {
	t.Helper()
	if art.ID != artifactID || art.Name != artifactName || len(art.Parts) != 1 {
		return fmt.Sprintf("bad artifact %s/%s/%d", art.ID, art.Name, len(art.Parts))
	}
	d, ok := art.Parts[0].Content.(a2a.Data)
	if !ok {
		return fmt.Sprintf("part %T", art.Parts[0].Content)
	}
	b, err := json.Marshal(d.Value)
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		RiskLevel string `json:"risk_level"`
	}
	_ = json.Unmarshal(b, &a)
	return a.RiskLevel
}

// TestExecutorModes: every mode of the reference agent as the stream the
// one executor yields through a2asrv, including those a2a-go's task
// manager would refuse from an executor (ModeIllegalTransition).
func TestExecutorModes(t *testing.T) {
	done := []string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING", "artifact append=false last=true low", "status TASK_STATE_COMPLETED"}
	endless := []string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING", "artifact append=false last=false low"}
	for range EndlessChunks {
		endless = append(endless, "artifact append=true last=false low")
	}
	endless = append(endless, "status TASK_STATE_COMPLETED")
	for _, tc := range []struct {
		mode, evidence string
		want           []string
	}{
		{"", `{"case_id":"c","amount_cents":100}`, done},
		{"", `{"amount_cents":100}`, []string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_REJECTED"}},
		{"", `{"case_id":"c","amount_cents":25000,"manual_review_above_cents":10000}`,
			[]string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING", "status TASK_STATE_INPUT_REQUIRED"}},
		{ModeSlow, `{"case_id":"c","amount_cents":100}`, done},
		{ModeIllegalTransition, `{"case_id":"c","amount_cents":100}`, append(slices.Clone(done), "status TASK_STATE_WORKING")},
		{ModeAuthRequired, `{"case_id":"c","amount_cents":100}`, []string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING",
			"status TASK_STATE_AUTH_REQUIRED", "status TASK_STATE_WORKING", "artifact append=false last=true low", "status TASK_STATE_COMPLETED"}},
		{ModeReplaceAfterLast, `{"case_id":"c","amount_cents":100}`, []string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING",
			"artifact append=false last=true low", "artifact append=false last=false low", "status TASK_STATE_COMPLETED"}},
		{ModeEndlessChunks, `{"case_id":"c","amount_cents":100}`, endless},
		{ModeInvalidArtifact, `{"case_id":"c","amount_cents":100}`, []string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING",
			"artifact append=false last=true extreme", "status TASK_STATE_COMPLETED"}},
		{ModeStructuredQuestion, `{"case_id":"c","amount_cents":100}`,
			[]string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING", "status TASK_STATE_INPUT_REQUIRED"}},
	} {
		t.Run(cmpName(tc.mode, tc.evidence), func(t *testing.T) {
			x, err := newExecutor(map[string]string{"c": tc.mode}, false, 1, nil, nil, executorHooks{})
			if tc.mode == "" {
				x, err = newExecutor(nil, false, 1, nil, nil, executorHooks{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer x.Stop()
			got := streamOf(t, x, briefMessage(t, "tsk-1", tc.evidence))
			if !slices.Equal(got, tc.want) {
				t.Errorf("stream\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func cmpName(mode, evidence string) string {
	if mode == "" {
		mode = "normal"
	}
	return mode + "/" + strings.NewReplacer(`"`, "", ":", "=", ",", "_", "{", "", "}", "").Replace(evidence)
}

// TestExecutorReportAtOnce: with report-at-once a task that needs nothing
// more is, after the SUBMITTED task of the reply, one Task event,
// COMPLETED with the assessment, without history
// (the brief is not echoed); a task that asks is unchanged.
func TestExecutorReportAtOnce(t *testing.T) {
	x, err := newExecutor(nil, false, 0, nil, func() bool { return true }, executorHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Stop()
	if got, want := streamOf(t, x, briefMessage(t, "tsk-1", `{"case_id":"c","amount_cents":100}`)),
		[]string{"task TASK_STATE_SUBMITTED", "task TASK_STATE_COMPLETED artifact low"}; !slices.Equal(got, want) {
		t.Errorf("stream %q, want %q", got, want)
	}
	if got, want := streamOf(t, x, briefMessage(t, "tsk-2", `{"case_id":"c","amount_cents":25000,"manual_review_above_cents":10000}`)),
		[]string{"task TASK_STATE_SUBMITTED", "status TASK_STATE_WORKING", "status TASK_STATE_INPUT_REQUIRED"}; !slices.Equal(got, want) {
		t.Errorf("stream %q, want %q", got, want)
	}
}

// TestExecutorAnswerResumes: the answer to the question resumes the task
// on the same handler (a2asrv's task store): WORKING, the assessment the
// answer decides, COMPLETED; the hooks see the brief and the answer.
func TestExecutorAnswerResumes(t *testing.T) {
	var briefs, answers int
	x, err := newExecutor(nil, false, 0, nil, nil, executorHooks{
		brief:  func(a2adTask string, b []byte) { briefs++ },
		answer: func([]byte) { answers++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Stop()
	h := x.Handler()
	m := briefMessage(t, "tsk-1", `{"case_id":"c","amount_cents":25000,"manual_review_above_cents":10000}`)
	var taskID a2a.TaskID
	for ev, err := range h.SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: m}) {
		if err != nil {
			t.Fatal(err)
		}
		taskID = ev.TaskInfo().TaskID
	}
	ans := a2a.NewMessageForTask(a2a.MessageRoleUser, a2a.TaskInfo{TaskID: taskID, ContextID: m.ContextID}, a2a.NewTextPart("no"))
	ans.Metadata = map[string]any{MetaTaskID: "tsk-1"}
	var got []string
	for ev, err := range h.SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: ans}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, describe(t, ev))
	}
	want := []string{"status TASK_STATE_WORKING", "artifact append=false last=true medium", "status TASK_STATE_COMPLETED"}
	if len(got) > 0 && strings.HasPrefix(got[0], "task ") {
		got = got[1:] // a2asrv may first yield the stored task
	}
	if !slices.Equal(got, want) {
		t.Errorf("answer stream %q, want %q", got, want)
	}
	if briefs != 1 || answers != 1 {
		t.Errorf("hooks saw %d briefs, %d answers; want 1, 1", briefs, answers)
	}
}
