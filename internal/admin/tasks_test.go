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
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go/jetstream"
)

// api is the admin API on a real task store (embedded NATS).
type api struct {
	t     *testing.T
	url   string
	store *task.Store
	js    jetstream.JetStream
}

func newAPI(t *testing.T) *api {
	t.Helper()
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := task.NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := &broker.Service{Tasks: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(Handler(svc, nil, Options{}))
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
	if rec.State != task.Canceled || rec.Reason != task.ReasonCanceledByHost || last.Event != task.EventCancel || last.By != "admin" {
		t.Errorf("answer: state %s reason %s, last transition %+v", rec.State, rec.Reason, last)
	}
	stored, _, err := a.store.Get(context.Background(), "tsk-open")
	if err != nil || stored.State != task.Canceled {
		t.Fatalf("stored: %v %v", stored, err)
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
}

// sse reads an event stream line by line.
type sse struct {
	lines chan string
	stop  context.CancelFunc
}

func (a *api) watch(query string) *sse {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/tasks/watch"+query, nil)
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

func consumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	st, err := js.Stream(context.Background(), "KV_"+task.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

func TestWatchTasks(t *testing.T) {
	a := newAPI(t)
	a.seed("tsk-acme", "acme", "fraud-review", task.Working, time.Minute)
	a.seed("tsk-globex", "globex", "fraud-review", task.Working, time.Minute)
	before := consumers(t, a.js)

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
		c.Reason != task.ReasonCanceledByHost || c.Event != task.EventCancel || c.UpdatedAt.IsZero() {
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
	if n := consumers(t, a.js); n != before+1 {
		t.Errorf("%d consumers while watching, want %d", n, before+1)
	}
	s.stop()
	deadline := time.Now().Add(10 * time.Second)
	for consumers(t, a.js) != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers after the client left, want %d", consumers(t, a.js), before)
		}
		time.Sleep(20 * time.Millisecond)
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
