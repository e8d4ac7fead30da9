package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/internal/console"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
)

// browser starts headless Chromium (Debian's chromium, or $A2AD_CHROMIUM)
// for one test. It skips the test when there is none, unless
// A2AD_REQUIRE_BROWSER is set (CI sets it: .ci/run installs chromium).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("A2AD_CHROMIUM")
	if path == "" {
		path, _ = exec.LookPath("chromium")
	}
	if path == "" {
		if os.Getenv("A2AD_REQUIRE_BROWSER") != "" {
			t.Fatal("A2AD_REQUIRE_BROWSER is set and there is no chromium (apt-get install chromium, or set A2AD_CHROMIUM)")
		}
		t.Skip("no chromium: apt-get install chromium (CI requires it with A2AD_REQUIRE_BROWSER=1)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return ctx
}

// screenshots saves PNGs of the page under t.ArtifactDir() (go test
// -artifacts keeps them) and, with A2AD_UPDATE_SCREENSHOTS=1, as
// docs/console/NAME.png, the README's.
type screenshots struct {
	t   *testing.T
	dir string
}

func (s screenshots) take(ctx context.Context, name string) {
	s.t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{s.dir}
	if os.Getenv("A2AD_UPDATE_SCREENSHOTS") == "1" {
		dirs = append(dirs, filepath.Join("..", "..", "docs", "console"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
}

// adminGet reads the admin API with token.
func adminGet(t *testing.T, base, token, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestConsoleInBrowser drives the web console in headless Chromium
// against a live `a2ad serve` with the reference agent, as an operator
// would: log in with a pasted token, watch a delegation appear in the task
// list and change state without a reload, open its timeline, approve the
// agent a changed card quarantined (confirming the dialog; the card's HTML
// shown as text), search the audit by task and kind, read the dashboard.
// Screenshots of each page go to the test's artifact directory.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser(t)
	shots := screenshots{t: t, dir: t.ArtifactDir()}
	t.Logf("screenshots in %s", shots.dir)
	d := startDaemon(t, nil, "--config", configFile(t, ""), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	cred := credentialFor(t, d.NATS, d.DataDir)
	agent := agentOn(t, d.NATS, cred, map[string]string{"C-4711": refagent.ModeSlow})
	aud, err := os.ReadFile(filepath.Join(d.DataDir, "auth", "audience"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := mcpedge.MintDevToken(d.DataDir, strings.TrimSpace(string(aud)), "console-operator", "default", mcpedge.ScopeAdmin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var dialogs []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			dialogs = append(dialogs, string(e.Type)+": "+e.Message)
			mu.Unlock()
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	}); err != nil {
		t.Fatal(err)
	}
	fail := func(what string, err error) {
		t.Helper()
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage: %s", what, err, html)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(tctx, actions...); err != nil {
			fail(what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(tctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			fail("read "+sel, err)
		}
		return s
	}
	poll := func(what, expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))(ctx, tg)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	hash := func(h string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.hash = %q", h))
	}
	eval := func(what, expr string, v any) {
		t.Helper()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
		if err != nil {
			fail(what, err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			fail(what, err)
		}
	}

	// Log in: /console/ sends a browser without a session to the form.
	run("open the console", chromedp.Navigate(d.HTTP+"/console/"), visible("#token"))
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || loc != d.HTTP+"/console/login" {
		t.Errorf("without a session the console is at %s (%v), want the login form", loc, err)
	}
	shots.take(ctx, "login")
	run("log in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#login")), visible("#delegations"))
	if got := text("#who"); !strings.HasPrefix(got, "console-operator (default), until ") {
		t.Errorf("logged in as %q", got)
	}
	var seen string
	eval("storage", `document.cookie + "|" + JSON.stringify(localStorage) + "|" + JSON.stringify(sessionStorage) + "|" + location.href`, &seen)
	if strings.Contains(seen, token) || strings.Contains(seen, console.CookieName) || strings.Contains(seen, "#key=") {
		t.Errorf("the token or the session cookie is readable by the page, or the page key left in the address: %q", seen)
	}
	var key string
	eval("the page key", `localStorage.getItem("a2ad_console_key")`, &key)
	if len(key) != 43 {
		t.Errorf("the page key in localStorage: %q, want 43 characters", key)
	}

	// The task list follows the watch stream: a delegation appears, then
	// completes, without a reload (a mark set on the page survives).
	run("tasks", hash("#/tasks"), visible("#tasks"),
		poll("live", `document.getElementById("live").textContent === "live: following task changes"`),
		chromedp.Evaluate[chromedp.Void](`window.consoleTestMark = 4711`),
		// Every state each row shows, in order, as the page changes it.
		chromedp.Evaluate[chromedp.Void](`window.seen = {}; new MutationObserver(function () {
			document.querySelectorAll("#tasks tr[id]").forEach(function (r) {
				var s = r.querySelector("[data-state]").textContent, l = window.seen[r.id] || (window.seen[r.id] = []);
				if (l[l.length - 1] !== s) { l.push(s); }
			});
		}).observe(document.getElementById("view"), {subtree: true, childList: true, characterData: true, attributes: true})`))
	h := connectHost(t, d)
	got, err := h.delegateWhenAgentKnown(delegateArgs("C-4711", 1999, "", 0))
	if err != nil || got.TaskID == "" {
		t.Fatalf("delegate: %v %+v", err, got)
	}
	row := fmt.Sprintf(`tr[id="task-%s"]`, got.TaskID)
	stateOf := fmt.Sprintf(`(document.querySelector('%s [data-state]') || {}).textContent`, row)
	run("the delegation appears and completes", poll("completed", stateOf+` === "completed"`))
	shots.take(ctx, "tasks")
	var states []string
	eval("states shown", `window.seen["task-`+got.TaskID+`"]`, &states)
	if len(states) < 2 || states[len(states)-2] != "working" || states[len(states)-1] != "completed" {
		t.Errorf("the task's row showed %q, want it working then completed", states)
	}
	var mark int
	eval("no reload", `window.consoleTestMark`, &mark)
	if mark != 4711 {
		t.Errorf("the page was reloaded (mark %d)", mark)
	}

	// Its page: the timeline, the trace id.
	run("open the task", chromedp.Click(chromedp.CSS(row+" a")), visible("#timeline"))
	var rec adminRecordWithTrace
	adminGet(t, d.HTTP, token, "/v1/tasks/"+got.TaskID, &rec)
	var timeline []string
	eval("timeline", `Array.from(document.querySelectorAll("#timeline tbody tr")).map(r => r.children[1].textContent + ">" + r.children[2].textContent + " " + r.children[3].textContent)`, &timeline)
	var want []string
	for _, tr := range rec.History {
		want = append(want, tr.From+">"+tr.To+" "+tr.Event)
	}
	if strings.Join(timeline, "|") != strings.Join(want, "|") || !strings.Contains(strings.Join(timeline, "|"), ">completed ") {
		t.Errorf("timeline %q, the record's history %q", timeline, want)
	}
	if m := regexp.MustCompile(`^00-([0-9a-f]{32})-`).FindStringSubmatch(rec.TraceParent); m == nil || text("#trace-id") != m[1] {
		t.Errorf("trace id %q, traceparent %q", text("#trace-id"), rec.TraceParent)
	}
	if got := text("#task-state"); got != "completed" {
		t.Errorf("task state %q", got)
	}
	shots.take(ctx, "task")

	// A question answered: the task page shows it and the answer.
	asked, err := h.delegateWhenAgentKnown(delegateArgs("C-4712", 125000, "", 5))
	if err != nil || asked.State != "input-required" || asked.Question == "" {
		t.Fatalf("delegate above the review threshold: %v %+v", err, asked)
	}
	const answer = "Yes: <i>verified</i> by phone."
	if done := h.mustCall("task_respond", map[string]any{"task_id": asked.TaskID, "answer": answer, "wait_seconds": 10}); done.State != "completed" {
		t.Fatalf("task_respond: %+v", done)
	}
	run("the answered task", hash("#/tasks/"+asked.TaskID), visible("#exchanges"))
	var exchange []string
	eval("exchange", `Array.from(document.querySelectorAll("#exchanges tbody td")).slice(1).map(e => e.textContent)`, &exchange)
	if len(exchange) != 3 || exchange[0] != asked.Question || exchange[1] != answer || exchange[2] != "test-host" {
		t.Errorf("question and answer shown: %q, want %q %q test-host", exchange, asked.Question, answer)
	}
	shots.take(ctx, "task-answered")

	// Cancel from the console: a task waiting for its answer, canceled
	// through the confirmation, is recorded as the operator's cancel.
	open, err := h.delegateWhenAgentKnown(delegateArgs("C-4713", 125000, "", 5))
	if err != nil || open.State != "input-required" {
		t.Fatalf("delegate a task to cancel: %v %+v", err, open)
	}
	run("cancel", hash("#/tasks/"+open.TaskID), visible("#cancel"), chromedp.Click(chromedp.CSS("#cancel")),
		poll("canceled", `(document.getElementById("task-state") || {}).textContent === "canceled"`))
	mu.Lock()
	if n := len(dialogs); n != 1 || dialogs[0] != "confirm: Cancel task "+open.TaskID+"?" {
		t.Errorf("dialogs: %q", dialogs)
	}
	dialogs = nil
	mu.Unlock()
	var canceled struct {
		State, Reason string
		History       []struct{ Event, Source, By string }
	}
	adminGet(t, d.HTTP, token, "/v1/tasks/"+open.TaskID, &canceled)
	if last := canceled.History[len(canceled.History)-1]; canceled.State != "canceled" || canceled.Reason != "canceled_by_operator" ||
		last.Event != "cancel" || last.Source != "operator" || last.By != "console-operator" {
		t.Errorf("canceled in the console: %s %s, last transition %+v; want canceled_by_operator by operator console-operator", canceled.State, canceled.Reason, last)
	}

	// A changed card quarantines the agent; the operator reviews the diff
	// and approves it.
	agent.Stop()
	var card map[string]any
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &card); err != nil {
		t.Fatal(err)
	}
	card["description"] = `Reviews refunds. <img src=x id=injected> <b>now faster</b>`
	changed, _ := json.Marshal(card)
	nc, err := nats.Connect(d.NATS, refagent.ConnectOptions("fraud-review", cred)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a2, err := refagent.New(nc, refagent.Config{AgentID: "fraud-review", Card: changed, Credential: cred, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a2.Stop)
	var ag struct {
		Status, Fingerprint string
		Approved            string `json:"approved_fingerprint"`
	}
	waitUntil(t, "the changed card quarantines the agent", func() bool {
		adminGet(t, d.HTTP, token, "/v1/agents/fraud-review", &ag)
		return ag.Status == "quarantined"
	})
	run("agents", hash("#/agents"), visible(`tr[id="agent-fraud-review"]`))
	if got := text(`tr[id="agent-fraud-review"] td:nth-child(2)`); got != "quarantined" {
		t.Errorf("agents list status %q", got)
	}
	shots.take(ctx, "agents")
	run("the agent", chromedp.Click(chromedp.CSS(`tr[id="agent-fraud-review"] a`)), visible("#card-diff"))
	var added []string
	eval("diff", `Array.from(document.querySelectorAll("#card-diff .diff-add")).map(e => e.textContent)`, &added)
	if len(added) != 1 || !strings.Contains(added[0], `"description": "Reviews refunds. <img src=x id=injected> <b>now faster</b>"`) {
		t.Errorf("the diff's added lines: %q", added)
	}
	var injected int
	eval("injected", `document.querySelectorAll("#injected, #view img, #view b").length`, &injected)
	if injected != 0 {
		t.Errorf("the agent's card text became %d HTML elements", injected)
	}
	// The page's diff of two small cards, exactly; and of two hostile
	// 30,000-line ones (a full alignment table took the page 28 s and
	// 4 GB: red team), the changed block unaligned.
	var small string
	eval("small diff", `JSON.stringify(lineDiff(["{", "a", "b", "c", "}"], ["{", "a", "x", "c", "d", "}"]))`, &small)
	if want := `{"lines":[[" ","{"],[" ","a"],["-","b"],["+","x"],[" ","c"],["+","d"],[" ","}"]],"aligned":true}`; small != want {
		t.Errorf("lineDiff of two small cards: %s, want %s", small, want)
	}
	var large struct {
		Lines, Removed, Added int
		Aligned               bool
	}
	eval("large diff", `(function () {
		var a = ["{"], b = ["{"];
		for (var i = 0; i < 30000; i++) { a.push("0,"); b.push("1,"); }
		a.push("}"); b.push("}");
		var d = lineDiff(a, b);
		return {lines: d.lines.length, removed: d.lines.filter(l => l[0] === "-").length, added: d.lines.filter(l => l[0] === "+").length, aligned: d.aligned};
	})()`, &large)
	if large.Lines != 60002 || large.Removed != 30000 || large.Added != 30000 || large.Aligned {
		t.Errorf("lineDiff of two 30,000-line cards: %+v, want 60002 lines, 30000 removed, 30000 added, not aligned", large)
	}
	if fp, st := text("#fingerprint"), text("#agent-status"); fp != ag.Fingerprint || st != "quarantined" {
		t.Errorf("agent page: %q %q, want %s quarantined", fp, st, ag.Fingerprint)
	}
	shots.take(ctx, "agent")
	run("approve", chromedp.Click(chromedp.CSS("#approve")),
		poll("approved", `(document.getElementById("agent-status") || {}).textContent === "approved"`))
	mu.Lock()
	if len(dialogs) != 1 || dialogs[0] != "confirm: Approve agent fraud-review with card "+ag.Fingerprint+"?" {
		t.Errorf("dialogs: %q", dialogs)
	}
	mu.Unlock()
	adminGet(t, d.HTTP, token, "/v1/agents/fraud-review", &ag)
	if ag.Status != "approved" || ag.Approved != ag.Fingerprint {
		t.Errorf("after approval in the console: %+v", ag)
	}
	var approvals struct {
		Records []struct {
			Actor struct{ Subject string }
		}
	}
	adminGet(t, d.HTTP, token, "/v1/audit?kind=agent.approved", &approvals)
	if len(approvals.Records) != 1 || approvals.Records[0].Actor.Subject != "console-operator" {
		t.Errorf("approval audit records: %+v", approvals.Records)
	}
	// Quarantine, with a reason, after its confirmation.
	run("quarantine", chromedp.SendKeys(chromedp.CSS("#quarantine-reason"), "console review"), chromedp.Click(chromedp.CSS("#quarantine")),
		poll("quarantined", `(document.getElementById("agent-status") || {}).textContent === "quarantined"`))
	mu.Lock()
	if len(dialogs) != 2 || dialogs[1] != "confirm: Quarantine agent fraud-review? No new delegation will go to it." {
		t.Errorf("dialogs: %q", dialogs)
	}
	mu.Unlock()
	var q struct {
		Status string `json:"status"`
		Reason string `json:"status_reason"`
	}
	adminGet(t, d.HTTP, token, "/v1/agents/fraud-review", &q)
	if q.Status != "quarantined" || q.Reason != "console review" {
		t.Errorf("after quarantine in the console: %+v", q)
	}

	// The task list's filters are the admin API's: state=input-required
	// lists none of the two (both completed), state=completed both.
	run("filter", hash("#/tasks?state=input-required"), poll("empty list", `!!document.getElementById("tasks") && document.querySelectorAll("#tasks tbody tr").length === 0 && document.getElementById("f-state").value === "input-required"`),
		hash("#/tasks?state=completed"), poll("completed list", `document.querySelectorAll("#tasks tbody tr [data-state]").length === 2 && Array.from(document.querySelectorAll("#tasks tbody tr [data-state]")).every(e => e.textContent === "completed")`))
	// Paging: one task a page, newest first, the next page by its link.
	var both []string
	eval("both", `Array.from(document.querySelectorAll("#tasks tbody tr")).map(r => r.id)`, &both)
	run("first page", hash("#/tasks?state=completed&limit=1"), poll("one row", `document.querySelectorAll("#tasks tbody tr").length === 1 && !!document.getElementById("next-page")`))
	var first, second []string
	eval("first page", `Array.from(document.querySelectorAll("#tasks tbody tr")).map(r => r.id)`, &first)
	run("next page", chromedp.Click(chromedp.CSS("#next-page")),
		poll("the other row", `document.querySelectorAll("#tasks tbody tr").length === 1 && document.querySelector("#tasks tbody tr").id !== `+fmt.Sprintf("%q", strings.Join(first, ""))+``))
	eval("second page", `Array.from(document.querySelectorAll("#tasks tbody tr")).map(r => r.id)`, &second)
	if len(both) != 2 || len(first) != 1 || len(second) != 1 || first[0] != both[0] || second[0] != both[1] {
		t.Errorf("pages of one: %q then %q, want %q in order", first, second, both)
	}

	// The audit, searched by task and kind.
	run("audit", hash("#/audit"), visible("#audit-filters"),
		chromedp.SendKeys(chromedp.CSS("#f-task"), got.TaskID), chromedp.SendKeys(chromedp.CSS("#f-kind"), "task.transition"),
		chromedp.Click(chromedp.CSS("#audit-search")),
		poll("search", `(function () { var r = Array.from(document.querySelectorAll("#audit tbody tr")); return r.length > 0 && r.every(x => x.children[4].textContent === "`+got.TaskID+`"); })()`))
	var transitions struct {
		Records []struct{ To string }
	}
	adminGet(t, d.HTTP, token, "/v1/audit?kind=task.transition&task="+got.TaskID, &transitions)
	var rows []string
	eval("audit rows", `Array.from(document.querySelectorAll("#audit tbody tr")).map(r => r.children[1].textContent + " " + r.children[4].textContent)`, &rows)
	if count := text("#audit-count"); len(transitions.Records) < 2 || len(rows) != len(transitions.Records) || count != fmt.Sprintf("%d records", len(rows)) {
		t.Errorf("audit rows %q, the API's %d records, count %q", rows, len(transitions.Records), count)
	}
	for _, r := range rows {
		if r != "task.transition "+got.TaskID {
			t.Errorf("audit row %q", r)
		}
	}
	shots.take(ctx, "audit")

	// The dashboard: three delegations this hour, none failed (a cancel is no failure).
	run("dashboard", hash("#/dashboard"), visible("#delegations"))
	if n, f := text("#delegations .big"), text("#failures .big"); n != "3" || f != "0" {
		t.Errorf("dashboard: %s delegations, %s failures; want 3, 0", n, f)
	}
	shots.take(ctx, "dashboard")

	// Log out, then in again with the one-time link `a2ad console` prints;
	// the link works once.
	run("log out", chromedp.Click(chromedp.CSS("#logout")), visible("#token"))
	out, err := exec.Command(bin, "console", "--data-dir", d.DataDir).Output()
	link := strings.TrimSpace(string(out))
	if err != nil || !regexp.MustCompile(`^`+regexp.QuoteMeta(d.HTTP)+`/console/login#code=[A-Za-z0-9_-]{43}$`).MatchString(link) {
		t.Fatalf("a2ad console: %v %q", err, link)
	}
	run("the link", chromedp.Navigate(link), visible("#delegations"))
	if got := text("#who"); !strings.HasPrefix(got, "a2ad-console (default), until ") {
		t.Errorf("logged in by the link as %q", got)
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || strings.Contains(loc, "code=") {
		t.Errorf("the code stays in the address bar: %s %v", loc, err)
	}
	run("log out again", chromedp.Click(chromedp.CSS("#logout")), visible("#token"))
	run("the link again", chromedp.Navigate(link), visible("#login-error"))
	if got := text("#login-error"); !strings.Contains(got, "unknown, already used or expired") {
		t.Errorf("the link used twice: %q", got)
	}

	// A page of another origin (another port of this host) that sends the
	// browser to a link does not log it in by itself (login CSRF): the
	// login page asks for a click.
	out, err = exec.Command(bin, "console", "--data-dir", d.DataDir, "--as", "mallory").Output()
	if err != nil {
		t.Fatalf("a2ad console --as mallory: %v", err)
	}
	lure := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><script>location.href = %q;</script>", strings.TrimSpace(string(out)))
	}))
	t.Cleanup(lure.Close)
	run("a page sends the browser to a link", chromedp.Navigate(lure.URL), visible("#code-login"))
	time.Sleep(300 * time.Millisecond) // an auto-post would have left the page by now
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || loc != d.HTTP+"/console/login" {
		t.Errorf("after a page sent the browser to a link it is at %s (%v), want the login page (no login without a click)", loc, err)
	}
	run("the operator clicks", chromedp.Click(chromedp.CSS("#code-login")), visible("#delegations"))
	if got := text("#who"); !strings.HasPrefix(got, "mallory (default), until ") {
		t.Errorf("logged in by the clicked link as %q", got)
	}
}

// adminRecordWithTrace is what the browser test reads of a task record.
type adminRecordWithTrace struct {
	TraceParent string `json:"traceparent"`
	History     []struct {
		From, To, Event string
	} `json:"history"`
}
