package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
)

// An operator lists the open tasks, cancels one, and sees the change in
// tasks watch, all with the real binary against a running daemon.
func TestTasksListCancelWatchCLI(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	agent := agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), map[string]string{"C-301": refagent.ModeSilent, "C-302": refagent.ModeSilent})
	d := startDaemon(t, nil, external(t, srv.ClientURL())...)
	h := connectHost(t, d)
	done, err := h.delegateWhenAgentKnown(delegateArgs("C-300", 1999, "", 10))
	if err != nil || done.State != "completed" {
		t.Fatalf("delegate C-300: %v %+v", err, done)
	}
	open := h.mustCall("delegate", delegateArgs("C-301", 1999, "", 0))
	if open.State != "submitted" {
		t.Fatalf("delegate C-301: %+v, want submitted", open)
	}
	open2 := h.mustCall("delegate", delegateArgs("C-302", 1999, "", 0))
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--server", d.HTTP, "--data-dir", d.DataDir)...).CombinedOutput()
		return string(out), err
	}

	list, err := cli("tasks", "list", "--state", "submitted,working", "--agent", "fraud-review")
	if err != nil {
		t.Fatalf("tasks list: %v\n%s", err, list)
	}
	for _, id := range []string{open.TaskID, open2.TaskID} {
		if !regexp.MustCompile(`(?m)^` + id + `\s+submitted\s+fraud-review\s+assess_refund_risk\s+default\s+\d+s\s*$`).MatchString(list) {
			t.Errorf("tasks list --state submitted,working lacks %s:\n%s", id, list)
		}
	}
	if strings.Contains(list, done.TaskID) {
		t.Errorf("tasks list --state submitted,working shows the completed %s:\n%s", done.TaskID, list)
	}
	out, err := cli("tasks", "list", "--all", "--limit", "1", "--json")
	var page struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
		NextPageToken string `json:"next_page_token"`
	}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Tasks) != 3 ||
		page.Tasks[0].TaskID != open2.TaskID || page.Tasks[1].TaskID != open.TaskID || page.Tasks[2].TaskID != done.TaskID || page.NextPageToken != "" {
		t.Errorf("tasks list --all --limit 1 --json: %v\n%s", err, out)
	}
	// One page at a time: the table names the next page's token, which
	// --page-token follows.
	first, err := cli("tasks", "list", "--limit", "2")
	m := regexp.MustCompile(`more tasks match: add --page-token (\S+) \(with the same filters and --limit\) for the next page, or --all for every page`).FindStringSubmatch(first)
	if err != nil || m == nil || !strings.Contains(first, open2.TaskID) || !strings.Contains(first, open.TaskID) || strings.Contains(first, done.TaskID) {
		t.Fatalf("tasks list --limit 2: %v\n%s", err, first)
	}
	second, err := cli("tasks", "list", "--limit", "2", "--page-token", m[1])
	if err != nil || !strings.Contains(second, done.TaskID) || strings.Contains(second, open.TaskID) || strings.Contains(second, "more tasks match") {
		t.Errorf("tasks list --limit 2 --page-token %s: %v\n%s", m[1], err, second)
	}
	if out, err := cli("tasks", "list", "--page-token", "garbage"); err == nil || !strings.Contains(out, "invalid_argument: page_token:") {
		t.Errorf("tasks list --page-token garbage: %v\n%s", err, out)
	}
	if out, err := cli("tasks", "list", "--state", "paused"); err == nil || !strings.Contains(out, "invalid_argument: state:") {
		t.Errorf("tasks list --state paused: %v\n%s", err, out)
	}

	watch := exec.Command(bin, "tasks", "watch", "--state", "canceled", "--server", d.HTTP, "--data-dir", d.DataDir)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := watch.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stderr).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if !strings.HasPrefix(line, "watching task changes") {
			t.Fatalf("tasks watch: %q", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tasks watch did not start")
	}
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	// An operator's cancel is recorded once, the same way in the task and
	// in the audit trail: source operator, by the --as name (the minted
	// token's subject), reason canceled_by_operator, their words as note.
	canceled, err := cli("tasks", "cancel", open.TaskID, "--as", "alice", "--reason", "duplicate case")
	if err != nil {
		t.Fatalf("tasks cancel: %v\n%s", err, canceled)
	}
	if !strings.Contains(canceled, "State:     canceled\nReason:    canceled_by_operator\n") ||
		!regexp.MustCompile(`(?m)^  \S+\s+cancel\s+submitted\s+canceled\s+operator\s+alice\s+canceled_by_operator "duplicate case"$`).MatchString(canceled) {
		t.Errorf("tasks cancel:\n%s", canceled)
	}
	getJSON, err := cli("tasks", "get", open.TaskID, "--json")
	var got struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		History []struct {
			Event, Source, By, Reason, Note string
		} `json:"history"`
	}
	if err != nil || json.Unmarshal([]byte(getJSON), &got) != nil || len(got.History) == 0 {
		t.Fatalf("tasks get --json: %v\n%s", err, getJSON)
	}
	if last := got.History[len(got.History)-1]; got.State != "canceled" || got.Reason != "canceled_by_operator" ||
		last.Event != "cancel" || last.Source != "operator" || last.By != "alice" || last.Reason != "canceled_by_operator" || last.Note != "duplicate case" {
		t.Errorf("tasks get --json: state %q reason %q, last transition %+v; want canceled, canceled_by_operator, cancel by operator alice with note \"duplicate case\"", got.State, got.Reason, last)
	}
	if log := d.log.String(); !strings.Contains(log, `msg="task canceled by operator" task=`+open.TaskID+` by=alice reason="duplicate case"`) {
		t.Errorf("the operator's reason is not in the log:\n%s", tail(log, 10))
	}
	cancelMove := regexp.MustCompile(`(?m)^\S+\s+task\.transition\s+operator:alice\s+default\s+` + open.TaskID + `\s+fraud-review\s+submitted→canceled \(cancel\) reason="canceled_by_operator" note="duplicate case" trace=[0-9a-f]{32}$`)
	var trail string
	waitUntil(t, "the cancel in the audit trail", func() bool {
		trail, err = cli("audit", "--task", open.TaskID)
		return err == nil && cancelMove.MatchString(trail)
	})
	if n := strings.Count(trail, "operator:"); n != 1 || strings.Contains(trail, "task.cancel_requested") {
		t.Errorf("a2ad audit --task: want the cancel recorded once (one operator record, no task.cancel_requested), got %d:\n%s", n, trail)
	}
	auditJSON, err := cli("audit", "--task", open.TaskID, "--kind", "task.transition", "--json")
	var trailPage struct {
		Records []struct {
			Kind                string `json:"kind"`
			Actor               struct{ Type, Subject string }
			Event, Reason, Note string
		} `json:"records"`
	}
	if err != nil || json.Unmarshal([]byte(auditJSON), &trailPage) != nil || len(trailPage.Records) == 0 {
		t.Fatalf("a2ad audit --json: %v\n%s", err, auditJSON)
	}
	if r := trailPage.Records[len(trailPage.Records)-1]; r.Actor.Type != "operator" || r.Actor.Subject != "alice" || r.Event != "cancel" || r.Reason != "canceled_by_operator" || r.Note != "duplicate case" {
		t.Errorf("a2ad audit --json, the cancel: %+v; want operator alice, cancel, canceled_by_operator, note \"duplicate case\"", r)
	}
	if !strings.HasPrefix(trail, "AT ") || !regexp.MustCompile(`(?m)^\S+\s+delegation\.accepted\s+host:\S+\s+default\s+`+open.TaskID+`\s+fraud-review\s+brief=sha256:[0-9a-f]{64} trace=[0-9a-f]{32}$`).MatchString(trail) {
		t.Errorf("a2ad audit --task:\n%s", trail)
	}
	if out, err := cli("audit", "--task", open.TaskID, "--limit", "1"); err != nil || !strings.Contains(out, "submitted→canceled (cancel)") ||
		!strings.Contains(out, "older records match too") {
		t.Errorf("a2ad audit --limit 1 (the newest record, and a note that there are more): %v\n%s", err, out)
	}
	if out, err := cli("audit", "--kind", "Task"); err == nil || !strings.Contains(out, "invalid_argument: kind:") {
		t.Errorf("a2ad audit --kind Task: %v\n%s", err, out)
	}
	if out, err := cli("tasks", "cancel", done.TaskID); err == nil || !strings.Contains(out, "task_terminal") {
		t.Errorf("cancel of a completed task: %v\n%s", err, out)
	}
	if out, err := cli("tasks", "cancel", "tsk-nope"); err == nil || !strings.Contains(out, "task_not_found") {
		t.Errorf("cancel of an unknown task: %v\n%s", err, out)
	}

	nextLine := func() string {
		t.Helper()
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("tasks watch ended")
			}
			return line
		case <-time.After(20 * time.Second):
			t.Fatal("tasks watch printed no change")
		}
		return ""
	}
	changed := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}  (tsk-\S+)  canceled\s+fraud-review  canceled_by_operator$`)
	if m := changed.FindStringSubmatch(nextLine()); m == nil || m[1] != open.TaskID {
		t.Errorf("tasks watch: want %s canceled, got %v", open.TaskID, m)
	}
	// Delivering CancelTask writes the task again, with no transition: the
	// next line is the next cancel.
	waitUntil(t, "the agent to receive CancelTask", func() bool { return agent.Stats().CancelsReceived == 1 })
	waitUntil(t, "the outbox to be empty", func() bool { return getRecord(t, d, open.TaskID).Outbox == nil })
	if out, err := cli("tasks", "cancel", open2.TaskID, "--json"); err != nil || !strings.Contains(out, `"state": "canceled"`) {
		t.Fatalf("tasks cancel --json: %v\n%s", err, out)
	}
	if m := changed.FindStringSubmatch(nextLine()); m == nil || m[1] != open2.TaskID {
		t.Errorf("tasks watch: want %s canceled, got %v", open2.TaskID, m)
	}
}
