package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/tracing"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// adminGet GETs path with an a2a:admin token; it returns status and body.
func (s *stack) adminGet(t *testing.T, path string) (int, []byte) {
	t.Helper()
	tok, err := mcpedge.MintDevToken(s.dataDir, s.d.Auth.Audience(), "ops-alice", "default", mcpedge.ScopeAdmin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := mcpedge.BearerClient(tok).Get(s.d.HTTPURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// auditOf reads the audit records of the query q through GET /v1/audit
// until there are at least n of them.
func (s *stack) auditOf(t *testing.T, q url.Values, n int) []audit.Record {
	t.Helper()
	var out struct {
		Records []audit.Record `json:"records"`
	}
	waitFor(t, "audit records", func() bool {
		code, b := s.adminGet(t, "/v1/audit?"+q.Encode())
		if code != http.StatusOK {
			t.Fatalf("GET /v1/audit?%s: %d %s", q.Encode(), code, b)
		}
		out.Records = nil
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return len(out.Records) >= n
	})
	return out.Records
}

// line is a record in a compact form a test can compare exactly.
func line(r audit.Record) string {
	s := r.Kind + " " + r.Actor.Type + ":" + r.Actor.Subject
	if r.From != "" || r.To != "" {
		s += " " + r.From + "->" + r.To + " " + r.Event
	}
	if r.Reason != "" {
		s += " reason=" + r.Reason
	}
	if r.Note != "" {
		s += " note=" + r.Note
	}
	if r.Code != "" {
		s += " code=" + r.Code
	}
	if r.Verdict != nil {
		s += " valid=" + map[bool]string{true: "true", false: "false"}[r.Verdict.Valid]
	}
	return s
}

func TestAuditTrailRecordsADelegationWhoWhatWhen(t *testing.T) {
	s := start(t, nil)
	before := time.Now().UTC()
	got, errText := s.call(t, "delegate", delegateArgs(evidence("C-21", 4500)), nil)
	if errText != "" || got.State != "completed" {
		t.Fatalf("delegate: %+v %s", got, errText)
	}
	rec, _, err := s.d.Service.Tasks.Get(context.Background(), got.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	recs := s.auditOf(t, url.Values{"task": {got.TaskID}}, 5)
	var lines []string
	for _, r := range recs {
		lines = append(lines, line(r))
		if r.Tenant != "default" || r.TaskID != got.TaskID || r.AgentID != "fraud-review" {
			t.Errorf("%s: tenant %q task %q agent %q", r.Kind, r.Tenant, r.TaskID, r.AgentID)
		}
		if r.At.Before(before.Add(-time.Second)) || r.ID == "" || r.Instance == "" {
			t.Errorf("%s: at %s id %q instance %q", r.Kind, r.At, r.ID, r.Instance)
		}
	}
	want := []string{
		"task.transition host:test-host ->submitted submit",
		"delegation.accepted host:test-host",
		"task.transition agent:fraud-review submitted->working start",
		"artifact.verdict daemon: valid=true",
		"task.transition agent:fraud-review working->completed complete",
	}
	// The transition to working may come from the SendMessage reply or
	// from the agent's first event; the order of the submit and the
	// accepted record is the order of their writes. Compare as sets of
	// lines, and the count exactly.
	if strings.Join(sorted(lines), "\n") != strings.Join(sorted(want), "\n") {
		t.Errorf("audit trail of %s:\n%s\nwant:\n%s", got.TaskID, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range recs {
		if r.Kind == audit.KindDelegationAccepted || (r.Kind == audit.KindTransition && r.Event == "submit") {
			if r.BriefDigest != rec.BriefDigest || r.OutputSchema != "risk_assessment" || r.SchemaDigest != rec.SchemaDigest {
				t.Errorf("%s: brief %q schema %q %q; want %q risk_assessment %q", r.Kind, r.BriefDigest, r.OutputSchema, r.SchemaDigest, rec.BriefDigest, rec.SchemaDigest)
			}
		}
	}
	// Never the brief, the evidence or the artifact's content.
	_, raw := s.adminGet(t, "/v1/audit?task="+got.TaskID)
	for _, leak := range []string{"Assess the fraud risk", "Do not contact", "4500", "risk_level", "no risk signals"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the audit trail holds %q: %s", leak, raw)
		}
	}
}

func sorted(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestAuditTrailRecordsRefusalsAndVerdicts(t *testing.T) {
	s := start(t, map[string]string{"C-13": "invalid-artifact", "C-66": "illegal-transition"})
	// A brief carrying a credential: refused, recorded with the pointer
	// and the detector, never the value.
	ev := evidence("C-77", 100)
	ev["order_id"] = "token " + testJWT
	if _, errText := s.call(t, "delegate", delegateArgs(ev), nil); !strings.HasPrefix(errText, "invalid_argument") {
		t.Fatalf("delegate with a JWT: %q", errText)
	}
	refused := s.auditOf(t, url.Values{"kind": {"delegation.refused"}}, 1)
	if len(refused) != 1 || refused[0].Code != "invalid_argument" || refused[0].Field != "/evidence/order_id" || refused[0].SecretKind != "jwt" ||
		refused[0].Actor != (audit.Actor{Type: "host", Subject: "test-host"}) || refused[0].Tenant != "default" || refused[0].TaskID != "" {
		t.Errorf("refused delegation: %+v", refused)
	}
	// What a host names is recorded only once a2ad found it: not an
	// unknown agent, not an unknown skill (either may be anything,
	// a credential or a megabyte), not evidence member names.
	args := delegateArgs(evidence("C-78", 100))
	args["agent"], args["skill"] = "no-such-agent", "AKIAIOSFODNN7EXAMPLE"
	if _, errText := s.call(t, "delegate", args, nil); !strings.HasPrefix(errText, "agent_not_found") {
		t.Fatalf("unknown agent: %q", errText)
	}
	args = delegateArgs(evidence("C-79", 100))
	args["skill"] = strings.Repeat("x", 200<<10)
	if _, errText := s.call(t, "delegate", args, nil); !strings.HasPrefix(errText, "skill_not_found") {
		t.Fatalf("unknown skill: %.80q", errText)
	}
	ev = evidence("C-80", 100)
	ev["order_id"] = map[string]any{"customer jane.doe@example.com password=hunter2": testJWT}
	if _, errText := s.call(t, "delegate", delegateArgs(ev), nil); !strings.HasPrefix(errText, "invalid_argument") {
		t.Fatalf("a JWT under a named member: %q", errText)
	}
	refused = s.auditOf(t, url.Values{"kind": {"delegation.refused"}}, 4)
	var got []string
	for _, r := range refused {
		got = append(got, fmt.Sprintf("%s agent=%s skill=%s field=%s", r.Code, r.AgentID, r.Skill, r.Field))
	}
	want := []string{
		"invalid_argument agent=fraud-review skill=assess_refund_risk field=/evidence/order_id",
		"agent_not_found agent= skill= field=",
		"skill_not_found agent=fraud-review skill= field=",
		"invalid_argument agent=fraud-review skill=assess_refund_risk field=/evidence/order_id/…",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("refused delegations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// An artifact that violates the schema: a verdict with pointers only.
	bad, _ := s.call(t, "delegate", delegateArgs(evidence("C-13", 4500)), nil)
	if bad == nil || bad.State != "failed" {
		t.Fatalf("invalid artifact: %+v", bad)
	}
	v := s.auditOf(t, url.Values{"task": {bad.TaskID}, "kind": {"artifact.verdict"}}, 1)
	if len(v) != 1 || v[0].Verdict == nil || v[0].Verdict.Valid || len(v[0].Verdict.Violations) == 0 {
		t.Fatalf("verdict: %+v", v)
	}
	for _, x := range v[0].Verdict.Violations {
		if !strings.HasPrefix(x, "/parts/0/data") {
			t.Errorf("violation %q: want a pointer under /parts/0/data", x)
		}
	}
	_, raw := s.adminGet(t, "/v1/audit?limit=1000")
	for _, leak := range []string{testJWT, "extreme", "misbehaviour", "AKIA", "xxxxxxxx", "jane.doe", "hunter2"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the audit trail holds %q", leak)
		}
	}
	ended := s.auditOf(t, url.Values{"task": {bad.TaskID}, "kind": {"task.transition"}}, 3)
	if last := ended[len(ended)-1]; line(last) != "task.transition daemon: working->failed fail reason=artifact_rejected" {
		t.Errorf("last transition: %s", line(last))
	}
	// An event the lifecycle refuses: recorded as the agent's.
	ill, _ := s.call(t, "delegate", delegateArgs(evidence("C-66", 100)), nil)
	if ill == nil || ill.State != "completed" {
		t.Fatalf("illegal transition case: %+v", ill)
	}
	r := s.auditOf(t, url.Values{"task": {ill.TaskID}, "kind": {"task.transition_refused"}}, 1)
	if len(r) != 1 || line(r[0]) != "task.transition_refused agent:fraud-review completed->completed start reason=illegal_transition" {
		t.Errorf("refused transition: %+v", r)
	}
	// The agent goes away: the task created for the delegation is
	// withdrawn, and the refusal names it, so that its submit is explained.
	s.agent.Stop()
	if _, errText := s.call(t, "delegate", delegateArgs(evidence("C-81", 100)), nil); !strings.HasPrefix(errText, "agent_offline") {
		t.Fatalf("agent gone: %q", errText)
	}
	off := s.auditOf(t, url.Values{"kind": {"delegation.refused"}}, 5)
	last := off[len(off)-1]
	if last.Code != "agent_offline" || last.TaskID == "" {
		t.Fatalf("offline refusal: %+v", last)
	}
	trail := s.auditOf(t, url.Values{"task": {last.TaskID}}, 2)
	if len(trail) != 2 || line(trail[0]) != "task.transition host:test-host ->submitted submit" || trail[1].Kind != audit.KindDelegationRefused {
		t.Errorf("withdrawn task's trail: %+v", trail)
	}
	if code, _ := s.adminGet(t, "/v1/tasks/"+last.TaskID); code != http.StatusNotFound {
		t.Errorf("withdrawn task: GET %d, want 404", code)
	}
}

func TestAuditTrailRecordsOperatorsAndIsAppendOnly(t *testing.T) {
	s := start(t, map[string]string{"C-91": "silent"})
	tok, err := mcpedge.MintDevToken(s.dataDir, s.d.Auth.Audience(), "ops-alice", "default", mcpedge.ScopeAdmin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) int {
		resp, err := mcpedge.BearerClient(tok).Post(s.d.HTTPURL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/agents/fraud-review/quarantine", `{"reason":"card review INC-42"}`); code != 200 {
		t.Fatalf("quarantine: %d", code)
	}
	agent, _ := s.d.Service.Agents.Get(context.Background(), "fraud-review")
	if code := post("/v1/agents/fraud-review/approve", `{"fingerprint":"`+agent.Fingerprint+`"}`); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	if code := post("/v1/agents/new-agent/credential", `{"ttl_seconds":3600}`); code != 200 {
		t.Fatalf("credential: %d", code)
	}
	// An operator cancels a host's task: the operator's words and the
	// transition are theirs, in the trail and in the metrics.
	args := delegateArgs(evidence("C-91", 100))
	args["wait_seconds"] = 0
	open, errText := s.call(t, "delegate", args, nil)
	if errText != "" {
		t.Fatal(errText)
	}
	if code := post("/v1/tasks/"+open.TaskID+"/cancel", `{"reason":"customer withdrew the claim"}`); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	// Recorded once, as the task's history has it: no separate record of
	// the request.
	cancel := s.auditOf(t, url.Values{"task": {open.TaskID}, "kind": {"task.>"}}, 2)
	var lines []string
	for _, r := range cancel[1:] {
		lines = append(lines, line(r))
	}
	if strings.Join(lines, "\n") != "task.transition operator:ops-alice "+cancel[1].From+"->canceled cancel reason=canceled_by_operator note=customer withdrew the claim" {
		t.Errorf("operator cancel:\n%s", strings.Join(lines, "\n"))
	}
	if got := value(scrape(t, s.d.HTTPURL), "a2ad_task_transitions_total", map[string]string{"to": "canceled", "source": "operator"}); got != 1 {
		t.Errorf("a2ad_task_transitions_total{to=canceled,source=operator} = %v, want 1", got)
	}
	recs := s.auditOf(t, url.Values{"kind": {"agent.>"}, "since": {"1m"}}, 4)
	var ops []string
	for _, r := range recs {
		if r.Actor.Type == audit.ActorOperator {
			ops = append(ops, line(r)+" agent="+r.AgentID+" status="+r.Status)
		}
	}
	want := []string{
		"agent.quarantined operator:ops-alice reason=card review INC-42 agent=fraud-review status=quarantined",
		"agent.approved operator:ops-alice agent=fraud-review status=approved",
		"agent.credential_issued operator:ops-alice agent=new-agent status=",
	}
	if strings.Join(ops, "\n") != strings.Join(want, "\n") {
		t.Errorf("operator records:\n%s\nwant:\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	if recs[0].Kind != audit.KindAgentRegistered || recs[0].Actor != (audit.Actor{Type: "agent", Subject: "fraud-review"}) || recs[0].Status != "approved" {
		t.Errorf("first agent record: %+v, want the agent's registration", recs[0])
	}
	// The credential itself is never recorded.
	_, raw := s.adminGet(t, "/v1/audit?kind=agent.credential_issued")
	if strings.Contains(string(raw), "eyJ") {
		t.Errorf("a credential in the audit trail: %s", raw)
	}
	// Append-only: JetStream refuses deletes and purges of the stream.
	nc, err := nats.Connect(s.d.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(context.Background(), 1); err == nil {
		t.Error("deleting an audit record succeeded")
	}
	if err := st.Purge(context.Background()); err == nil {
		t.Error("purging the audit stream succeeded")
	}
	// Bad queries are refused by name.
	for q, want := range map[string]string{"kind=Task": "kind:", "since=yesterday": "since:", "limit=0": "limit:", "foo=1": `unknown parameter`} {
		code, b := s.adminGet(t, "/v1/audit?"+q)
		if code != 400 || !strings.Contains(string(b), want) {
			t.Errorf("?%s: %d %s", q, code, b)
		}
	}
}

// scrape reads /metrics into metric families.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of the series of name whose labels include want
// (a counter, gauge, or a histogram's sample count); -1 if absent.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetricsCountWhatOperatorsWatch(t *testing.T) {
	s := start(t, map[string]string{"C-13": "invalid-artifact"})
	first := delegateArgs(evidence("C-21", 4500))
	first["idempotency_key"] = "k-21"
	got, errText := s.call(t, "delegate", first, nil)
	if errText != "" || got.State != "completed" {
		t.Fatalf("delegate: %+v %s", got, errText)
	}
	if again, _ := s.call(t, "delegate", first, nil); again == nil || again.TaskID != got.TaskID {
		t.Fatalf("idempotent retry: %+v", again)
	}
	if bad, _ := s.call(t, "delegate", delegateArgs(evidence("C-13", 4500)), nil); bad == nil || bad.State != "failed" {
		t.Fatalf("invalid artifact: %+v", bad)
	}
	args := delegateArgs(evidence("C-78", 100))
	args["agent"] = "no-such-agent"
	if _, errText := s.call(t, "delegate", args, nil); !strings.HasPrefix(errText, "agent_not_found") {
		t.Fatalf("unknown agent: %q", errText)
	}
	// Refused host tokens: none, and a malformed one.
	for _, h := range []string{"", "Bearer not-a-jwt"} {
		req, _ := http.NewRequest("POST", s.d.HTTPURL+"/mcp", strings.NewReader(`{}`))
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	agent := map[string]string{"agent": "fraud-review"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"a2ad_delegations_total", with("agent", "fraud-review", "outcome", "accepted"), 2},
		{"a2ad_delegations_total", with("agent", "", "outcome", "agent_not_found"), 1},
		{"a2ad_delegations_total", with("agent", "fraud-review", "outcome", "replayed"), 1},
		{"a2ad_delegate_duration_seconds", with("outcome", "accepted"), 2},
		{"a2ad_task_transitions_total", with("agent", "fraud-review", "to", "completed", "source", "agent"), 1},
		{"a2ad_task_transitions_total", with("agent", "fraud-review", "to", "failed", "source", "daemon"), 1},
		{"a2ad_tasks_ended_total", with("agent", "fraud-review", "state", "completed", "reason", ""), 1},
		{"a2ad_tasks_ended_total", with("agent", "fraud-review", "state", "failed", "reason", "artifact_rejected"), 1},
		{"a2ad_artifact_verdicts_total", with("agent", "fraud-review", "verdict", "valid"), 1},
		{"a2ad_artifact_verdicts_total", with("agent", "fraud-review", "verdict", "invalid"), 1},
		{"a2ad_task_first_response_seconds", agent, 2},
		{"a2ad_task_duration_seconds", with("agent", "fraud-review", "state", "completed"), 1},
		{"a2ad_auth_failures_total", with("edge", "http", "reason", "missing_token"), 1},
		{"a2ad_auth_failures_total", with("edge", "http", "reason", "malformed"), 1},
		{"a2ad_tasks", with("state", "working"), 0},
		{"a2ad_tasks", with("state", "submitted"), 0},
		{"a2ad_nats_connection_state", with("state", "connected"), 1},
		{"a2ad_nats_connection_state", with("state", "reconnecting"), 0},
	}
	// A host may have its result a moment before the writer that made it
	// has counted it (the waiter wakes on the store's watcher): poll until
	// every figure is in, then compare.
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(10 * time.Second); ; {
		fams = scrape(t, s.d.HTTPURL)
		all := true
		for _, c := range checks {
			all = all && value(fams, c.name, c.labels) == c.want
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range checks {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if f := fams["a2ad_delegations_total"]; f == nil || f.GetType() != dto.MetricType_COUNTER {
		t.Errorf("a2ad_delegations_total is not a counter: %v", f)
	}
	if f := fams["go_goroutines"]; f == nil {
		t.Error("no Go runtime metrics")
	}
	waitFor(t, "audit records written", func() bool {
		return value(scrape(t, s.d.HTTPURL), "a2ad_audit_records_total", with("outcome", "written")) >= 10
	})
	if got := value(fams, "a2ad_audit_records_total", with("outcome", "dropped")); got != 0 {
		t.Errorf("audit records dropped: %v", got)
	}
}

func TestNATSRefusalsAreCounted(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dir, NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0"}, log, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	expired, _, err := d.AgentKeys.Mint("agent-x", time.Second, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "forged", expired} {
		opts := []nats.Option{nats.MaxReconnects(0)}
		if tok != "" {
			opts = append(opts, nats.Token(tok))
		}
		if nc, err := nats.Connect(d.NATSURL, opts...); err == nil {
			nc.Close()
			t.Errorf("connection with %q accepted", tok)
		}
	}
	fams := scrape(t, d.HTTPURL)
	for reason, want := range map[string]float64{"missing_credential": 1, "invalid_credential": 1, "expired": 1} {
		if got := value(fams, "a2ad_auth_failures_total", map[string]string{"edge": "nats", "reason": reason}); got != want {
			t.Errorf("a2ad_auth_failures_total{edge=nats,reason=%s} = %v, want %v", reason, got, want)
		}
	}
}

func TestTraceContextFlowsFromHostToAgent(t *testing.T) {
	s := start(t, nil)
	// What the agent receives: a second subscriber on its RPC subject
	// sees the same requests.
	seen := make(chan nats.Header, 8)
	sub, err := s.nc.Subscribe(natsbind.RPCSubject("fraud-review"), func(m *nats.Msg) { seen <- m.Header })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = s.nc.Flush()
	const traceID, hostSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	got, errText := s.call(t, "delegate", delegateArgs(evidence("C-31", 100)), mcp.Meta{"traceparent": "00-" + traceID + "-" + hostSpan + "-01"})
	if errText != "" {
		t.Fatal(errText)
	}
	h := <-seen
	tp := strings.Split(h.Get(natsbind.HeaderTraceparent), "-")
	if len(tp) != 4 || tp[0] != "00" || tp[1] != traceID || tp[2] == hostSpan || len(tp[2]) != 16 || tp[3] != "01" {
		t.Fatalf("agent got traceparent %q; want 00-%s-<a2ad's span>-01", h.Get(natsbind.HeaderTraceparent), traceID)
	}
	rec, _, _ := s.d.Service.Tasks.Get(context.Background(), got.TaskID)
	if rec.TraceParent != strings.Join(tp, "-") {
		t.Errorf("record traceparent %q, sent %q", rec.TraceParent, strings.Join(tp, "-"))
	}
	acc := s.auditOf(t, url.Values{"task": {got.TaskID}, "kind": {"delegation.accepted"}}, 1)
	if acc[0].TraceID != traceID {
		t.Errorf("audit trace_id %q, want %q", acc[0].TraceID, traceID)
	}
	// Without a host trace, a2ad starts one of its own.
	if _, errText := s.call(t, "delegate", delegateArgs(evidence("C-32", 100)), nil); errText != "" {
		t.Fatal(errText)
	}
	h = <-seen
	own := strings.Split(h.Get(natsbind.HeaderTraceparent), "-")
	if len(own) != 4 || len(own[1]) != 32 || own[1] == traceID || own[1] == strings.Repeat("0", 32) {
		t.Errorf("agent got traceparent %q without a host trace; want a new trace", h.Get(natsbind.HeaderTraceparent))
	}
}

func TestReadinessNeedsNATSAndKV(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: ns.ClientURL(), DataDir: dir, HTTPAddr: "127.0.0.1:0"}, log, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	get := func() (int, daemon.Readiness) {
		resp, err := http.Get(d.HTTPURL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rd daemon.Readiness
		_ = json.NewDecoder(resp.Body).Decode(&rd)
		return resp.StatusCode, rd
	}
	waitFor(t, "ready", func() bool { code, _ := get(); return code == 200 })
	if code, rd := get(); code != 200 || !rd.Ready || rd.KV != "ok" || rd.NATS != "CONNECTED" || !rd.Loaded {
		t.Fatalf("/readyz = %d %+v", code, rd)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	code, rd := get()
	if code != http.StatusServiceUnavailable || rd.Ready || rd.KV == "ok" || rd.NATS == "CONNECTED" {
		t.Errorf("/readyz with NATS gone = %d %+v, want 503 not ready", code, rd)
	}
	resp, err := http.Get(d.HTTPURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz with NATS gone = %d, want 200 (the process is alive)", resp.StatusCode)
	}
}

func TestLogAuditAndTracingConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a2ad.yaml")
	if err := os.WriteFile(p, []byte("log:\n  level: debug\n  format: json\naudit:\n  max_age: 720h\n  max_bytes: 1048576\ntracing:\n  sample_ratio: 0.25\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := daemon.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(cfg.Audit.MaxAge) != 720*time.Hour || cfg.Audit.MaxBytes != 1<<20 || *cfg.Tracing.SampleRatio != 0.25 {
		t.Errorf("config: %+v %+v", cfg.Audit, cfg.Tracing)
	}
	var b strings.Builder
	log, err := cfg.Log.NewLogger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "task", "tsk-1")
	var line map[string]any
	if err := json.Unmarshal([]byte(b.String()), &line); err != nil || line["msg"] != "hello" || line["task"] != "tsk-1" || line["level"] != "DEBUG" {
		t.Errorf("json log line %q: %v", b.String(), err)
	}
	for _, c := range []struct {
		lc   daemon.LogConfig
		want string
	}{
		{daemon.LogConfig{Level: "loud"}, `log.level "loud": want debug, info, warn or error`},
		{daemon.LogConfig{Format: "xml"}, `log.format "xml": want text or json`},
	} {
		if _, err := c.lc.NewLogger(io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.lc, err, c.want)
		}
	}
	bad := 1.5
	_, err = daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", Tracing: tracing.Config{SampleRatio: &bad}}, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err == nil || !strings.Contains(err.Error(), "sample_ratio 1.5 is not between 0 and 1") {
		t.Errorf("sample_ratio 1.5: %v", err)
	}
}

func TestShutdownEndsWatchesAndWaits(t *testing.T) {
	s := start(t, map[string]string{"C-41": "slow"})
	tok, err := mcpedge.MintDevToken(s.dataDir, s.d.Auth.Audience(), "ops-alice", "default", mcpedge.ScopeAdmin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := mcpedge.BearerClient(tok).Get(s.d.HTTPURL + "/v1/tasks/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len(": watching\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != ": watching\n\n" {
		t.Fatalf("watch opened with %q, %v", first, err)
	}
	// A host waiting on a delegation when a2ad stops gets the task as it
	// is, not an error: the task goes on without this instance.
	type result struct {
		out     *mcpedge.TaskOutput
		errText string
	}
	waiting := make(chan result, 1)
	go func() {
		args := delegateArgs(evidence("C-41", 100))
		args["wait_seconds"] = 50
		res, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate", Arguments: args})
		switch {
		case err != nil:
			waiting <- result{errText: err.Error()}
		case res.IsError:
			waiting <- result{errText: res.Content[0].(*mcp.TextContent).Text}
		default:
			b, _ := json.Marshal(res.StructuredContent)
			var o mcpedge.TaskOutput
			_ = json.Unmarshal(b, &o)
			waiting <- result{out: &o}
		}
	}()
	waitFor(t, "the delegation to be working", func() bool {
		recs, _ := s.d.Service.Tasks.List(context.Background())
		return len(recs) == 1 && recs[0].State == task.Working
	})
	s.d.Stop()
	rest, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(rest), "event: shutdown\ndata: {}\n\n") {
		t.Errorf("watch ended with %q, want an event: shutdown", rest)
	}
	r := <-waiting
	if r.errText != "" || r.out == nil || r.out.State != "working" {
		t.Errorf("waiting delegate at shutdown: %+v %q, want the working task", r.out, r.errText)
	}
}

// A wait whose context has already ended (the edge closes it when a2ad
// stops, possibly before the wait's first read) returns the task as it
// is, not a cancellation: TestShutdownEndsWatchesAndWaits failed in CI
// with "canceled" when the stop came between delegate's create and its
// wait.
func TestWaitWithAnEndedContextReturnsTheTask(t *testing.T) {
	s := start(t, map[string]string{"C-42": "slow"})
	ev, _ := json.Marshal(evidence("C-42", 100))
	p := broker.Principal{Tenant: "default", Subject: "host-1"}
	r, err := s.d.Service.Delegate(context.Background(), p, broker.DelegateRequest{Agent: "fraud-review", Skill: "assess_refund_risk",
		Brief: brief.Request{Objective: "Assess this refund.", Evidence: ev, OutputSchema: "risk_assessment"}})
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := s.d.Service.WaitUntil(ended, p, r.ID, 10*time.Second, func(r *task.Record) bool { return r.State.Terminal() }, nil)
	if err != nil || got == nil || got.ID != r.ID || got.State.Terminal() {
		t.Fatalf("wait with an ended context: %+v, %v; want task %s as it is, no error", got, err, r.ID)
	}
}

func TestPublicURLNamesTheAudienceAndMetadata(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0",
		PublicURL: "https://a2ad.example.com/"}, log, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if got := d.Auth.Audience(); got != "https://a2ad.example.com/mcp" {
		t.Errorf("audience %q, want https://a2ad.example.com/mcp", got)
	}
	resp, err := http.Post(d.HTTPURL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := `Bearer resource_metadata="https://a2ad.example.com` + mcpedge.MetadataPath + `"`
	if got := resp.Header.Get("WWW-Authenticate"); got != want {
		t.Errorf("WWW-Authenticate %q, want %q", got, want)
	}
	_, err = daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0",
		PublicURL: "a2ad.example.com"}, log, true)
	if err == nil || !strings.Contains(err.Error(), `public_url "a2ad.example.com": want an http(s) base URL`) {
		t.Errorf("public_url without a scheme: %v", err)
	}
}

// NATS that comes up after a2ad (systemd and Kubernetes start them in any
// order) is waited for, not a reason to exit.
func TestStartWaitsForNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	started := make(chan error, 1)
	var d *daemon.Daemon
	go func() {
		var err error
		d, err = daemon.Start(context.Background(), daemon.Config{NATSURL: "nats://" + addr, DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0"},
			slog.New(slog.NewTextHandler(io.Discard, nil)), true)
		started <- err
	}()
	time.Sleep(500 * time.Millisecond) // a2ad is trying by now; not an assertion on time
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	if err := <-started; err != nil {
		t.Fatalf("start with NATS coming up later: %v", err)
	}
	defer d.Stop()
	if rd := d.Ready(context.Background()); rd.NATS != "CONNECTED" || rd.KV != "ok" || rd.Audit != "ok" {
		t.Errorf("readiness %+v", rd)
	}
}
