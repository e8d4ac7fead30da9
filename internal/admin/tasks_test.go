package admin

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go/jetstream"
)

// api is the admin API on a real task store (embedded NATS).
type api struct {
	t     testing.TB
	url   string
	store *task.Store
	js    jetstream.JetStream
}

func newAPI(t testing.TB) *api {
	t.Helper()
	_, _, js := natstest.Start(t)
	return newAPIOn(t, js)
}

// newAPIOn is newAPI on the embedded NATS of js.
func newAPIOn(t testing.TB, js jetstream.JetStream) *api {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := task.NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := &broker.Service{Tasks: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// As behind the daemon's token check: the operator is the token's subject.
	h := Handler(svc, nil, Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := mcpedge.ContextWithPrincipal(r.Context(), broker.Principal{Subject: "ops-bob", Tenant: "default"})
		// As RequireScope says when the request's token expires.
		if d, err := time.ParseDuration(r.Header.Get("Test-Token-Expires-In")); err == nil {
			ctx = mcpedge.ContextWithTokenExpiry(ctx, time.Now().Add(d))
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return &api{t: t, url: srv.URL, store: st, js: js}
}

// seed stores a record created age ago.
func (a *api) seed(id, tenant, agent string, state task.State, age time.Duration) *task.Record {
	a.t.Helper()
	created := time.Now().Add(-age).UTC()
	r := &task.Record{ID: id, Tenant: tenant, Subject: "host-1", AgentID: agent, Skill: "assess", State: state,
		Turns: 1, Deadline: created.Add(time.Hour), CreatedAt: created, UpdatedAt: created,
		History: []task.Transition{{At: created, To: task.Submitted, Event: "submit", Source: task.SourceHost}}}
	if err := a.store.Create(context.Background(), r); err != nil {
		a.t.Fatal(err)
	}
	return r
}

// do sends a request and decodes a JSON answer into v (nil: none).
func (a *api) do(method, path, body string, v any) int {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			a.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

type apiError struct {
	Error struct{ Code, Message string } `json:"error"`
}

func ids(p TaskPage) []string {
	out := []string{}
	for _, r := range p.Tasks {
		out = append(out, r.ID)
	}
	return out
}

func TestListTasksFilters(t *testing.T) {
	a := newAPI(t)
	a.seed("tsk-06", "acme", "fraud-review", task.Canceled, 3*time.Hour)
	a.seed("tsk-01", "acme", "fraud-review", task.Working, 2*time.Hour)
	a.seed("tsk-02", "acme", "fraud-review", task.InputRequired, 30*time.Minute)
	a.seed("tsk-04", "globex", "fraud-review", task.Completed, time.Minute)
	a.seed("tsk-05", "globex", "kyc", task.Submitted, 20*time.Second)
	// tsk-03 carries what operators must never see.
	r := &task.Record{ID: "tsk-03", Tenant: "acme", AgentID: "kyc", State: task.Working,
		CreatedAt: time.Now().Add(-5 * time.Minute), UpdatedAt: time.Now(),
		Pending: []a2a.Artifact{{ArtifactID: "unvalidated"}},
		Outbox:  &task.Outbound{Method: a2a.MethodSendMessage, Params: json.RawMessage(`{"brief":"secret evidence"}`), Attempts: 1}}
	if err := a.store.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		query string
		want  []string
	}{
		{"", []string{"tsk-05", "tsk-04", "tsk-03", "tsk-02", "tsk-01", "tsk-06"}},
		{"?state=working,input-required", []string{"tsk-03", "tsk-02", "tsk-01"}},
		{"?state=canceled", []string{"tsk-06"}},
		{"?agent=fraud-review", []string{"tsk-04", "tsk-02", "tsk-01", "tsk-06"}},
		{"?tenant=acme", []string{"tsk-03", "tsk-02", "tsk-01", "tsk-06"}},
		{"?older_than=10m", []string{"tsk-02", "tsk-01", "tsk-06"}},
		{"?newer_than=1h", []string{"tsk-05", "tsk-04", "tsk-03", "tsk-02"}},
		{"?older_than=10m&newer_than=150m", []string{"tsk-02", "tsk-01"}},
		{"?state=working&agent=fraud-review&tenant=acme", []string{"tsk-01"}},
		{"?state=completed&tenant=acme", []string{}},
		{"?limit=2", []string{"tsk-05", "tsk-04"}},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			var p TaskPage
			if code := a.do("GET", "/v1/tasks"+c.query, "", &p); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			if got := ids(p); !slices.Equal(got, c.want) {
				t.Errorf("ids %v, want %v", got, c.want)
			}
			if (p.NextPageToken != "") != (c.query == "?limit=2") {
				t.Errorf("next_page_token %q", p.NextPageToken)
			}
		})
	}

	var p TaskPage
	a.do("GET", "/v1/tasks?agent=kyc&tenant=acme", "", &p)
	if len(p.Tasks) != 1 || p.Tasks[0].Pending != nil || p.Tasks[0].Outbox == nil || p.Tasks[0].Outbox.Params != nil {
		t.Errorf("tsk-03 not redacted: %+v", p.Tasks)
	}
}

// Pages follow each other with no duplicate and no gap while tasks are
// created between them; tasks sharing a creation time are split across a
// page boundary by id.
func TestListTasksPagination(t *testing.T) {
	a := newAPI(t)
	base := time.Now().Add(-time.Hour)
	var want []string
	for i := range 23 {
		// Three tasks per creation time.
		created := base.Add(time.Duration(i/3) * time.Second).UTC()
		id := fmt.Sprintf("tsk-%02d", i)
		r := &task.Record{ID: id, Tenant: "acme", AgentID: "fraud-review", State: task.Working, CreatedAt: created, UpdatedAt: created}
		if err := a.store.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	slices.SortFunc(want, func(x, y string) int { // newest first: the highest index first
		return strings.Compare(y, x)
	})

	var got []string
	token := ""
	for n := 0; ; n++ {
		if n > 10 {
			t.Fatal("pagination does not end")
		}
		q := "/v1/tasks?limit=5"
		if token != "" {
			q += "&page_token=" + token
		}
		var p TaskPage
		if code := a.do("GET", q, "", &p); code != http.StatusOK {
			t.Fatalf("page %d: status %d", n, code)
		}
		if len(p.Tasks) > 5 {
			t.Fatalf("page %d has %d tasks", n, len(p.Tasks))
		}
		got = append(got, ids(p)...)
		token = p.NextPageToken
		if token == "" {
			break
		}
		for j := range 2 { // newer tasks arrive while the operator pages
			a.seed(fmt.Sprintf("tsk-new-%d-%d", n, j), "acme", "fraud-review", task.Submitted, 0)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged ids\n%v\nwant\n%v", got, want)
	}
}

func TestListTasksBadParameters(t *testing.T) {
	a := newAPI(t)
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"i":"tsk-1"}`))
	cases := []struct{ path, param string }{
		{"/v1/tasks?state=done", "state"},
		{"/v1/tasks?state=working,", "state"},
		{"/v1/tasks?state=working&state=failed", "state"},
		{"/v1/tasks?agent=a.b", "agent"},
		{"/v1/tasks?tenant=", "tenant"},
		{"/v1/tasks?older_than=ten", "older_than"},
		{"/v1/tasks?older_than=-5m", "older_than"},
		{"/v1/tasks?newer_than=0s", "newer_than"},
		{"/v1/tasks?older_than=2h&newer_than=1h", "older_than"},
		{"/v1/tasks?limit=0", "limit"},
		{"/v1/tasks?limit=1001", "limit"},
		{"/v1/tasks?limit=many", "limit"},
		{"/v1/tasks?page_token=%25%25", "page_token"},
		{"/v1/tasks?page_token=" + forged, "page_token"},
		{"/v1/tasks?sate=working", "sate"},
		{"/v1/tasks/watch?older_than=1m", "older_than"},
		{"/v1/tasks/watch?state=paused", "state"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			var e apiError
			if code := a.do("GET", c.path, "", &e); code != http.StatusBadRequest {
				t.Errorf("status %d, want 400", code)
			}
			if e.Error.Code != "invalid_argument" || !strings.HasPrefix(e.Error.Message, c.param+": ") {
				t.Errorf("error %+v, want invalid_argument naming %s", e.Error, c.param)
			}
		})
	}
	// A repeated parameter is named; only state gets the hint about lists.
	for path, want := range map[string]string{
		"/v1/tasks?state=working&state=failed": "state: given more than once (list states as state=a,b)",
		"/v1/tasks?limit=1&limit=2":            "limit: given more than once",
	} {
		var e apiError
		if a.do("GET", path, "", &e); e.Error.Message != want {
			t.Errorf("GET %s: error %q, want %q", path, e.Error.Message, want)
		}
	}
}

func TestCancelTask(t *testing.T) {
	a := newAPI(t)
	a.seed("tsk-open", "acme", "fraud-review", task.InputRequired, time.Minute)
	a.seed("tsk-nobody", "acme", "fraud-review", task.Working, time.Minute)
	a.seed("tsk-done", "acme", "fraud-review", task.Completed, time.Minute)

	var rec task.Record
	if code := a.do("POST", "/v1/tasks/tsk-open/cancel", `{"reason":"stuck since Monday"}`, &rec); code != http.StatusOK {
		t.Fatalf("cancel: status %d", code)
	}
	last := rec.History[len(rec.History)-1]
	if rec.State != task.Canceled || rec.Reason != "canceled_by_operator" || last.Event != task.EventCancel || last.Source != "operator" ||
		last.By != "ops-bob" || last.Reason != "canceled_by_operator" || last.Note != "stuck since Monday" {
		t.Errorf("answer: state %s reason %s, last transition %+v", rec.State, rec.Reason, last)
	}
	stored, _, err := a.store.Get(context.Background(), "tsk-open")
	if err != nil || stored.State != task.Canceled || stored.History[len(stored.History)-1] != last {
		t.Fatalf("stored: %v %v, want the answer's cancel %+v", stored, err, last)
	}

	// No body at all is no reason.
	if code := a.do("POST", "/v1/tasks/tsk-nobody/cancel", "", &rec); code != http.StatusOK || rec.State != task.Canceled {
		t.Errorf("cancel without a body: %d %s", code, rec.State)
	}

	for _, c := range []struct {
		id, body string
		status   int
		code     string
	}{
		{"tsk-unknown", `{}`, http.StatusNotFound, "task_not_found"},
		{"not.a.task", `{}`, http.StatusNotFound, "task_not_found"},
		{"tsk-done", `{}`, http.StatusConflict, "task_terminal"},
		{"tsk-open", `{}`, http.StatusConflict, "task_terminal"},
		{"tsk-done", `{"reson":"typo"}`, http.StatusBadRequest, "invalid_argument"},
	} {
		var e apiError
		if got := a.do("POST", "/v1/tasks/"+c.id+"/cancel", c.body, &e); got != c.status || e.Error.Code != c.code {
			t.Errorf("cancel %s %s: %d %+v, want %d %s", c.id, c.body, got, e.Error, c.status, c.code)
		}
	}
	if got, _, _ := a.store.Get(context.Background(), "tsk-done"); got.State != task.Completed {
		t.Errorf("terminal task changed to %s", got.State)
	}

	// Bodies that do not decode are answered in a2ad's words, never
	// encoding/json's or net/http's (measured before: "body: json:
	// cannot unmarshal number into Go struct field .reason of type
	// string", and 400 "http: request body too large").
	for body, want := range map[string]string{
		`{"reson":"typo"}`: `400 invalid_argument body: unknown field "reson"`,
		`{"reason":5}`:     `400 invalid_argument body: field reason wants a JSON string`,
		`{"reason":`:       `400 invalid_argument body: the JSON ends before it is complete`,
		`{"reason" "x"}`:   `400 invalid_argument body: not JSON (at byte 11)`,
		`{"reason":"` + strings.Repeat("x", 70<<10) + `"}`: `413 request_too_large the request body is larger than 65536 bytes`,
	} {
		var e apiError
		got := a.do("POST", "/v1/tasks/tsk-open/cancel", body, &e)
		if s := fmt.Sprintf("%d %s %s", got, e.Error.Code, e.Error.Message); s != want {
			t.Errorf("cancel with body %.30q: %s, want %s", body, s, want)
		}
	}
}

// sse reads an event stream line by line.
type sse struct {
	lines chan string
	stop  context.CancelFunc
}

func (a *api) watch(query string) *sse { return a.watchFor(query, 0) }

// watchFor is watch with a token that expires after expiresIn (0: never).
func (a *api) watchFor(query string, expiresIn time.Duration) *sse {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/tasks/watch"+query, nil)
	if expiresIn > 0 {
		req.Header.Set("Test-Token-Expires-In", expiresIn.String())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		a.t.Fatalf("watch: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &sse{lines: make(chan string, 64), stop: cancel}
	go func() {
		defer resp.Body.Close()
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	a.t.Cleanup(cancel)
	return s
}

// next returns the next line that has prefix, failing after 10 s.
func (s *sse) next(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("stream ended before a line %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line %q within 10 s", prefix)
		}
	}
}

func TestWatchTasks(t *testing.T) {
	a := newAPI(t)
	a.seed("tsk-acme", "acme", "fraud-review", task.Working, time.Minute)
	a.seed("tsk-globex", "globex", "fraud-review", task.Working, time.Minute)
	before := natstest.Consumers(t, a.js, "KV_"+task.Bucket)

	s := a.watch("?state=canceled&tenant=acme")
	s.next(t, ": watching")
	// Filtered out: another tenant's cancel, then a change to a state not
	// asked for; both are written before the one that matches.
	if code := a.do("POST", "/v1/tasks/tsk-globex/cancel", `{}`, nil); code != http.StatusOK {
		t.Fatalf("cancel globex: %d", code)
	}
	_, err := a.store.Update(context.Background(), "tsk-acme", func(r *task.Record) error {
		return r.Move(time.Now().UTC(), task.EventAsk, task.SourceAgent, "", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	if code := a.do("POST", "/v1/tasks/tsk-acme/cancel", `{"reason":"test"}`, nil); code != http.StatusOK {
		t.Fatalf("cancel acme: %d", code)
	}
	if l := s.next(t, "event: "); l != "event: task" {
		t.Errorf("event line %q", l)
	}
	var c TaskChange
	if err := json.Unmarshal([]byte(strings.TrimPrefix(s.next(t, "data: "), "data: ")), &c); err != nil {
		t.Fatal(err)
	}
	if c.TaskID != "tsk-acme" || c.State != task.Canceled || c.Tenant != "acme" || c.AgentID != "fraud-review" ||
		c.Reason != task.ReasonCanceledByOperator || c.Event != task.EventCancel || c.UpdatedAt.IsZero() {
		t.Errorf("change %+v", c)
	}

	// A write that records no transition is not reported: the next event
	// is the next cancel.
	a.seed("tsk-acme2", "acme", "kyc", task.Working, time.Minute)
	_, err = a.store.Update(context.Background(), "tsk-acme", func(r *task.Record) error {
		r.Outbox, r.UpdatedAt = nil, time.Now().UTC()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if code := a.do("POST", "/v1/tasks/tsk-acme2/cancel", `{}`, nil); code != http.StatusOK {
		t.Fatalf("cancel acme2: %d", code)
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(s.next(t, "data: "), "data: ")), &c); err != nil || c.TaskID != "tsk-acme2" {
		t.Errorf("next change %+v %v, want tsk-acme2's cancel", c, err)
	}

	// The request's KV watcher goes with the client.
	if n := natstest.Consumers(t, a.js, "KV_"+task.Bucket); n != before+1 {
		t.Errorf("%d consumers while watching, want %d", n, before+1)
	}
	s.stop()
	deadline := time.Now().Add(10 * time.Second)
	for natstest.Consumers(t, a.js, "KV_"+task.Bucket) != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers after the client left, want %d", natstest.Consumers(t, a.js, "KV_"+task.Bucket), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A watch ends when the token that opened it expires, and says so.
func TestWatchEndsWhenTheTokenExpires(t *testing.T) {
	a := newAPI(t)
	s := a.watchFor("", 300*time.Millisecond)
	s.next(t, ": watching")
	if l := s.next(t, "event: "); l != "event: token_expired" {
		t.Errorf("event line %q, want event: token_expired", l)
	}
	select {
	case _, ok := <-s.lines:
		for ok {
			_, ok = <-s.lines
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func TestWatchTasksHeartbeat(t *testing.T) {
	prev := heartbeatEvery
	heartbeatEvery = 20 * time.Millisecond
	t.Cleanup(func() { heartbeatEvery = prev })
	a := newAPI(t) // its server closes, with the handler, before the cleanup above
	s := a.watch("")
	s.next(t, ": watching")
	s.next(t, ": heartbeat")
}

// walk pages through GET /v1/tasks with query and limit, failing unless
// every page but the last is full and has a next page token; between pages
// it calls between (may be nil) with the page number.
func (a *api) walk(t *testing.T, query string, limit int, between func(n int)) []string {
	t.Helper()
	var got []string
	token := ""
	for n := 0; ; n++ {
		if n > 300 {
			t.Fatal("pagination does not end")
		}
		q := fmt.Sprintf("/v1/tasks?limit=%d", limit)
		if query != "" {
			q += "&" + query
		}
		if token != "" {
			q += "&page_token=" + token
		}
		var p TaskPage
		if code := a.do("GET", q, "", &p); code != http.StatusOK {
			t.Fatalf("page %d: status %d", n, code)
		}
		got = append(got, ids(p)...)
		token = p.NextPageToken
		if token == "" {
			return got
		}
		if len(p.Tasks) != limit {
			t.Fatalf("page %d has %d tasks and a next page, want %d", n, len(p.Tasks), limit)
		}
		if between != nil {
			between(n)
		}
	}
}

// A walk through 250 tasks, stored in another order than their creation
// and rewritten meanwhile, returns exactly the matching ids newest first,
// each once, whatever the filter and page size.
func TestListTasksPageWalkOver250(t *testing.T) {
	a := newAPI(t)
	ctx := context.Background()
	const n = 250
	base := time.Now().Add(-2 * time.Hour).UTC()
	states := []task.State{task.Working, task.Completed, task.InputRequired, task.Failed}
	tenantOf := func(i int) string { return map[bool]string{true: "globex", false: "acme"}[i%3 == 0] }
	agentOf := func(i int) string { return map[bool]string{true: "kyc", false: "fraud-review"}[i%5 == 0] }
	for k := range n {
		// Every index once, out of creation order; four tasks per
		// creation time.
		i := k * 97 % n
		created := base.Add(time.Duration(i/4) * time.Minute)
		r := &task.Record{ID: fmt.Sprintf("tsk-%03d", i), Tenant: tenantOf(i), AgentID: agentOf(i), State: states[i%4],
			CreatedAt: created, UpdatedAt: created}
		if err := a.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rewrite := func(id string) {
		t.Helper()
		if _, err := a.store.Update(ctx, id, func(r *task.Record) error { r.Question = "again"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 7 {
		rewrite(fmt.Sprintf("tsk-%03d", i))
	}
	// want lists the indexes that pass, newest first: ids grow with the
	// creation time and, within one, sort by id.
	want := func(pass func(i int) bool) []string {
		out := []string{}
		for i := n - 1; i >= 0; i-- {
			if pass(i) {
				out = append(out, fmt.Sprintf("tsk-%03d", i))
			}
		}
		return out
	}
	cases := []struct {
		query string
		limit int
		pass  func(i int) bool
	}{
		{"", 50, func(int) bool { return true }}, // the last page is exactly full
		{"", 1000, func(int) bool { return true }},
		{"", 1, func(int) bool { return true }},
		{"tenant=acme&state=working,input-required", 7, func(i int) bool {
			return tenantOf(i) == "acme" && (states[i%4] == task.Working || states[i%4] == task.InputRequired)
		}},
		{"agent=fraud-review&newer_than=95m30s", 9, func(i int) bool { return agentOf(i) == "fraud-review" && i/4 >= 25 }},
		{"agent=kyc&tenant=globex&state=completed", 2, func(i int) bool {
			return agentOf(i) == "kyc" && tenantOf(i) == "globex" && states[i%4] == task.Completed
		}},
		{"state=canceled", 10, func(int) bool { return false }},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s limit %d", c.query, c.limit), func(t *testing.T) {
			w := want(c.pass)
			// Between pages, newer tasks arrive and listed and unlisted
			// ones are rewritten: none of it shifts the walk.
			extra := 0
			got := a.walk(t, c.query, c.limit, func(p int) {
				if p%5 != 0 || len(w) == 0 {
					return
				}
				extra++
				a.seed(fmt.Sprintf("tsk-new-%d-%d", c.limit, extra), "acme", "fraud-review", task.Working, 0)
				rewrite(w[0])
				rewrite(w[len(w)-1])
			})
			if !slices.Equal(got, w) {
				t.Errorf("walked %d ids\n%v\nwant %d\n%v", len(got), got, len(w), w)
			}
			seen := map[string]bool{}
			for _, id := range got {
				if seen[id] {
					t.Errorf("%s listed twice", id)
				}
				seen[id] = true
			}
		})
		// The tasks added while walking are newer than any other: drop
		// them before the next case.
		for {
			var p TaskPage
			a.do("GET", "/v1/tasks?newer_than=10m", "", &p)
			if len(p.Tasks) == 0 {
				break
			}
			for _, r := range p.Tasks {
				if err := a.store.Delete(ctx, r.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// A record deleted from the bucket, by a purge (the store's Delete) or a
// delete marker, is not listed, also when it goes between two pages.
func TestListTasksSkipsDeletedRecords(t *testing.T) {
	a := newAPI(t)
	ctx := context.Background()
	for i := range 6 {
		a.seed(fmt.Sprintf("tsk-%d", i), "acme", "fraud-review", task.Working, time.Duration(6-i)*time.Minute)
	}
	kv, err := a.js.KeyValue(ctx, task.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.store.Delete(ctx, "tsk-5"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "tsk-3"); err != nil {
		t.Fatal(err)
	}
	var p TaskPage
	if code := a.do("GET", "/v1/tasks?tenant=acme", "", &p); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if got, want := ids(p), []string{"tsk-4", "tsk-2", "tsk-1", "tsk-0"}; !slices.Equal(got, want) || p.NextPageToken != "" {
		t.Errorf("listed %v (next %q), want %v", got, p.NextPageToken, want)
	}
	got := a.walk(t, "", 2, func(n int) {
		if n == 0 {
			if err := kv.Delete(ctx, "tsk-1"); err != nil { // on the next page
				t.Fatal(err)
			}
		}
	})
	if want := []string{"tsk-4", "tsk-2", "tsk-0"}; !slices.Equal(got, want) {
		t.Errorf("walked %v, want %v", got, want)
	}
}

// The pager keeps one record per id: given again (a scan may report a
// record written meanwhile twice), the later value replaces the one held
// if it still matches, and the page stays full either way.
func TestPagerKeepsOneRecordPerID(t *testing.T) {
	now := time.Now()
	rec := func(i int, state task.State) *task.Record {
		at := now.Add(-time.Duration(i) * time.Minute)
		return &task.Record{ID: fmt.Sprintf("tsk-%d", i), State: state, CreatedAt: at, UpdatedAt: at}
	}
	p := newPager(taskFilter{States: []task.State{task.Working}}, 3, nil, now)
	for _, i := range []int{5, 2, 7, 0, 4, 1, 6, 3} {
		_ = p.add(rec(i, task.Working))
	}
	changed := rec(1, task.Working)
	changed.Question = "later"
	for _, r := range []*task.Record{rec(0, task.Completed), changed, rec(6, task.Working), rec(2, task.Working)} {
		_ = p.add(r)
	}
	pg := p.page()
	if got, want := ids(pg), []string{"tsk-0", "tsk-1", "tsk-2"}; !slices.Equal(got, want) {
		t.Fatalf("page %v, want %v", got, want)
	}
	if pg.Tasks[0].State != task.Working || pg.Tasks[1].Question != "later" {
		t.Errorf("page holds %s %q, %s %q", pg.Tasks[0].ID, pg.Tasks[0].State, pg.Tasks[1].ID, pg.Tasks[1].Question)
	}
	c, err := decodeCursor(pg.NextPageToken)
	if err != nil || c.ID != "tsk-2" {
		t.Errorf("next page token %q (%v), want one after tsk-2", pg.NextPageToken, err)
	}
}
