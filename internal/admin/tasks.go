package admin

import (
	"cmp"
	"container/heap"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
)

// Page sizes of GET /v1/tasks.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// heartbeatEvery is how often GET /v1/tasks/watch writes an SSE comment
// while no task changes, so proxies and clients see a live stream.
var heartbeatEvery = 15 * time.Second

// states are the task states a filter may name.
var states = []task.State{task.Submitted, task.Working, task.InputRequired, task.AuthRequired,
	task.Completed, task.Failed, task.Canceled, task.Rejected}

// TaskPage is the answer of GET /v1/tasks: records newest first (by
// creation time, then task id descending), redacted as
// [task.Record.Redacted]. NextPageToken is empty on the last page.
type TaskPage struct {
	Tasks         []*task.Record `json:"tasks"`
	NextPageToken string         `json:"next_page_token,omitempty"`
}

// TaskChange is one event of GET /v1/tasks/watch: a task as written by a
// transition, applied or refused (writes that record none, such as an
// outbox delivered, are not reported).
// Event and Reason are the last history entry's ("cancel",
// "canceled_by_host"; a refusal's reason starts with "refused"); Reason
// falls back to the record's.
type TaskChange struct {
	TaskID    string     `json:"task_id"`
	State     task.State `json:"state"`
	AgentID   string     `json:"agent_id"`
	Skill     string     `json:"skill"`
	Tenant    string     `json:"tenant"`
	UpdatedAt time.Time  `json:"updated_at"`
	Reason    string     `json:"reason,omitempty"`
	Event     string     `json:"event,omitempty"`
}

// paramError is a bad query parameter; the API answers it with 400
// invalid_argument and Error as the message.
type paramError struct {
	Param  string
	Reason string
}

func (e *paramError) Error() string { return e.Param + ": " + e.Reason }

// taskFilter selects tasks. Zero fields select everything.
type taskFilter struct {
	States []task.State // any of these
	Agent  string
	Tenant string
	// OlderThan and NewerThan bound a task's age (now minus its creation
	// time): at least OlderThan, at most NewerThan when not zero.
	OlderThan, NewerThan time.Duration
}

// match reports whether r passes the filter at time now.
func (f taskFilter) match(r *task.Record, now time.Time) bool {
	switch {
	case len(f.States) > 0 && !slices.Contains(f.States, r.State),
		f.Agent != "" && r.AgentID != f.Agent,
		f.Tenant != "" && r.Tenant != f.Tenant,
		f.OlderThan > 0 && now.Sub(r.CreatedAt) < f.OlderThan,
		f.NewerThan > 0 && now.Sub(r.CreatedAt) > f.NewerThan:
		return false
	}
	return true
}

// parseQuery reads the parameters named in allowed from q; any other
// parameter, a repeated one or a bad value is a *paramError.
func parseQuery(q url.Values, allowed ...string) (f taskFilter, limit int, cursor *pageCursor, err error) {
	limit = DefaultLimit
	for name, vs := range q {
		if !slices.Contains(allowed, name) {
			return f, 0, nil, &paramError{name, "unknown parameter (want " + strings.Join(allowed, ", ") + ")"}
		}
		if len(vs) > 1 {
			reason := "given more than once"
			if name == "state" {
				reason += " (list states as state=a,b)"
			}
			return f, 0, nil, &paramError{name, reason}
		}
		v := vs[0]
		switch name {
		case "state":
			for s := range strings.SplitSeq(v, ",") {
				st := task.State(strings.TrimSpace(s))
				if !slices.Contains(states, st) {
					return f, 0, nil, &paramError{name, fmt.Sprintf("unknown state %q (want %s)", st, joinStates())}
				}
				if !slices.Contains(f.States, st) {
					f.States = append(f.States, st)
				}
			}
		case "agent":
			if !natsbind.ValidToken(v) {
				return f, 0, nil, &paramError{name, "want an agent id: 1 to 128 of [A-Za-z0-9_-]"}
			}
			f.Agent = v
		case "tenant":
			if v == "" {
				return f, 0, nil, &paramError{name, "empty"}
			}
			f.Tenant = v
		case "older_than", "newer_than":
			d, perr := time.ParseDuration(v)
			if perr != nil || d <= 0 {
				return f, 0, nil, &paramError{name, fmt.Sprintf("%q: want a positive duration such as 90s, 10m or 24h", v)}
			}
			if name == "older_than" {
				f.OlderThan = d
			} else {
				f.NewerThan = d
			}
		case "limit":
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 || n > MaxLimit {
				return f, 0, nil, &paramError{name, fmt.Sprintf("%q: want 1 to %d (default %d)", v, MaxLimit, DefaultLimit)}
			}
			limit = n
		case "page_token":
			c, perr := decodeCursor(v)
			if perr != nil {
				return f, 0, nil, &paramError{name, "not a token this API issued (pass next_page_token unchanged)"}
			}
			cursor = c
		}
	}
	if f.OlderThan > 0 && f.NewerThan > 0 && f.OlderThan > f.NewerThan {
		return f, 0, nil, &paramError{"older_than", "longer than newer_than: no task can match"}
	}
	return f, limit, cursor, nil
}

func joinStates() string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// pageCursor is the last task of a page: the next page starts after it in
// the newest-first order. Tasks created later sort before it, so inserts
// between pages shift nothing.
type pageCursor struct {
	CreatedAt time.Time `json:"c"`
	ID        string    `json:"i"`
}

func (c pageCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*pageCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	var c pageCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if c.ID == "" || c.CreatedAt.IsZero() {
		return nil, errors.New("incomplete")
	}
	return &c, nil
}

// after reports whether r comes after the cursor in newest-first order.
func (c *pageCursor) after(r *task.Record) bool {
	if c == nil {
		return true
	}
	if !r.CreatedAt.Equal(c.CreatedAt) {
		return r.CreatedAt.Before(c.CreatedAt)
	}
	return r.ID < c.ID
}

// before reports whether a comes before b in newest-first order: created
// later, or at the same time with a greater id.
func before(a, b *task.Record) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.ID > b.ID
}

// pager cuts one page out of records given in any order: it keeps the
// matching records after the cursor that can still be on the page, at
// most limit+1 (the extra one says that a next page exists).
type pager struct {
	f      taskFilter
	limit  int
	cursor *pageCursor
	now    time.Time
	held   heldRecords
	byID   map[string]*heldRecord
}

func newPager(f taskFilter, limit int, cursor *pageCursor, now time.Time) *pager {
	return &pager{f: f, limit: limit, cursor: cursor, now: now, byID: map[string]*heldRecord{}}
}

// wants reports whether add would keep r (or a newer value of a record it
// holds): r needs only its id, tenant, agent, state and creation time.
func (p *pager) wants(r *task.Record) bool {
	if !p.cursor.after(r) || !p.f.match(r, p.now) {
		return false
	}
	_, held := p.byID[r.ID]
	return held || len(p.held) < p.limit+1 || before(r, p.held[0].r)
}

// add considers r (as a [task.Store.Scan] callback: it never fails). A
// record given again with the same id replaces the one held if it still
// matches; if it no longer does, the one held stays (dropping it could
// leave the page one short when a record was let go for it).
func (p *pager) add(r *task.Record) error {
	if !p.cursor.after(r) || !p.f.match(r, p.now) {
		return nil
	}
	if h, ok := p.byID[r.ID]; ok {
		h.r = r
		heap.Fix(&p.held, h.i)
		return nil
	}
	if len(p.held) == p.limit+1 {
		last := p.held[0]
		if !before(r, last.r) {
			return nil
		}
		delete(p.byID, last.r.ID)
		last.r = r
		p.byID[r.ID] = last
		heap.Fix(&p.held, 0)
		return nil
	}
	h := &heldRecord{r: r}
	p.byID[r.ID] = h
	heap.Push(&p.held, h)
	return nil
}

// page returns the records held, newest first and redacted, limit at
// most, with a next page token if one more was held.
func (p *pager) page() TaskPage {
	recs := make([]*task.Record, len(p.held))
	for i, h := range p.held {
		recs[i] = h.r
	}
	slices.SortFunc(recs, func(a, b *task.Record) int {
		switch {
		case before(a, b):
			return -1
		case before(b, a):
			return 1
		}
		return 0
	})
	pg := TaskPage{Tasks: []*task.Record{}}
	if len(recs) > p.limit {
		recs = recs[:p.limit]
		last := recs[p.limit-1]
		pg.NextPageToken = pageCursor{CreatedAt: last.CreatedAt, ID: last.ID}.encode()
	}
	for _, r := range recs {
		pg.Tasks = append(pg.Tasks, r.Redacted())
	}
	return pg
}

// heldRecord is a record a pager holds and its index in the heap.
type heldRecord struct {
	r *task.Record
	i int
}

// heldRecords is a heap (container/heap) whose root is the record that
// comes last in newest-first order: the first to let go.
type heldRecords []*heldRecord

func (h heldRecords) Len() int           { return len(h) }
func (h heldRecords) Less(i, j int) bool { return before(h[j].r, h[i].r) }
func (h heldRecords) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *heldRecords) Push(x any) {
	r := x.(*heldRecord)
	r.i = len(*h)
	*h = append(*h, r)
}
func (h *heldRecords) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

func listTasks(svc *broker.Service) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, limit, cursor, err := parseQuery(r.URL.Query(), "state", "agent", "tenant", "older_than", "newer_than", "limit", "page_token")
		if err != nil {
			writeErr(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
		pg, err := listPage(r.Context(), svc.Tasks, f, limit, cursor, time.Now())
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, pg)
	}
}

// cancelTask cancels for the operator whose verified token made the
// request (broker.Service.CancelByOperator): the agent gets CancelTask as
// from a host, and the task's history records the cancel once — source
// operator, by the token's subject, reason canceled_by_operator, note the
// operator's reason — which is also its audit record (task.transition).
func cancelTask(svc *broker.Service) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
		}
		if !decodeBodyOptional(w, r, &body) {
			return
		}
		if len(body.Reason) > 1024 {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "reason: longer than 1024 bytes")
			return
		}
		// Whoever the caller (the CLI, a console), the operator is the
		// verified token's subject, never a name in the request.
		p, ok := mcpedge.PrincipalFromContext(r.Context())
		if !ok || p.Subject == "" {
			writeErr(w, http.StatusUnauthorized, "unauthorized", "no verified operator identity: the admin API needs a token whose sub names the operator")
			return
		}
		id := r.PathValue("id")
		rec, err := svc.CancelByOperator(r.Context(), p.Subject, id, body.Reason)
		switch {
		case errors.Is(err, task.ErrNotFound):
			writeErr(w, http.StatusNotFound, "task_not_found", "no task "+id)
			return
		case errors.Is(err, broker.ErrTerminal):
			writeErr(w, http.StatusConflict, "task_terminal", err.Error())
			return
		case err != nil:
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		if svc.Log != nil {
			svc.Log.Info("task canceled by operator", "task", id, "by", p.Subject, "reason", body.Reason, "state", rec.State)
		}
		writeJSON(w, http.StatusOK, rec.Redacted())
	}
}

// decodeBodyOptional is decodeBody that takes an empty body (a POST sent
// with no JSON) as the zero value.
func decodeBodyOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		bodyErr(w, err)
		return false
	}
	return true
}

// watchTasks streams task changes as Server-Sent Events ("event: task",
// data a TaskChange): a task's write is reported when it records a
// transition or changes the state or reason. An SSE comment goes every
// heartbeatEvery. Its KV watcher ends with the request; the stream ends
// with "event: shutdown" when a2ad stops and with "event: token_expired"
// when the token that opened it expires.
func watchTasks(svc *broker.Service, stopping <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, _, _, err := parseQuery(r.URL.Query(), "state", "agent", "tenant")
		if err != nil {
			writeErr(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
		ctx := r.Context()
		changes, err := svc.Tasks.Watch(ctx)
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{})
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		// The first comment tells the client the watcher runs: changes
		// from then on are reported.
		if _, err := io.WriteString(w, ": watching\n\n"); err != nil || rc.Flush() != nil {
			return
		}
		seen := map[string]mark{} // task id → as last reported
		beat := time.NewTicker(heartbeatEvery)
		defer beat.Stop()
		// The stream ends when the token that opened it does.
		var expired <-chan time.Time
		if at, ok := mcpedge.TokenExpiryFromContext(ctx); ok {
			t := time.NewTimer(time.Until(at))
			defer t.Stop()
			expired = t.C
		}
		for {
			var msg []byte
			select {
			case <-ctx.Done():
				return
			case <-expired:
				// Said, so that a client gets a fresh token rather than
				// reconnect with this one.
				_, _ = io.WriteString(w, "event: token_expired\ndata: {}\n\n")
				_ = rc.Flush()
				return
			case <-stopping:
				// a2ad is shutting down: say so, so that a client
				// reconnects (to another instance) rather than guess.
				_, _ = io.WriteString(w, "event: shutdown\ndata: {}\n\n")
				_ = rc.Flush()
				return
			case <-beat.C:
				msg = []byte(": heartbeat\n\n")
			case rec, ok := <-changes:
				if !ok {
					return // the store's connection closed
				}
				// Writes that record no transition (an outbox delivered,
				// an artifact chunk) are not changes an operator follows.
				m := markOf(rec)
				if last, ok := seen[rec.ID]; ok && last == m {
					continue
				}
				if len(seen) >= 100_000 {
					clear(seen) // bounded: at worst a task is reported twice
				}
				seen[rec.ID] = m
				if !f.match(rec, time.Now()) {
					continue
				}
				b, _ := json.Marshal(changeOf(rec))
				msg = fmt.Appendf(nil, "event: task\ndata: %s\n\n", b)
			}
			if _, err := w.Write(msg); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// mark is what tells one reported change of a task from the next.
type mark struct {
	state       task.State
	reason      string
	transitions int // recorded and uncounted, applied and refused
}

func markOf(r *task.Record) mark {
	return mark{r.State, r.Reason, len(r.History) + r.RefusedUnrecorded}
}

func changeOf(r *task.Record) TaskChange {
	c := TaskChange{TaskID: r.ID, State: r.State, AgentID: r.AgentID, Skill: r.Skill, Tenant: r.Tenant,
		UpdatedAt: r.UpdatedAt, Reason: r.Reason}
	if n := len(r.History); n > 0 {
		c.Event = r.History[n-1].Event
		c.Reason = cmp.Or(r.History[n-1].Reason, r.Reason)
	}
	return c
}
