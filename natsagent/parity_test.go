package natsagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	a2ad "github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/natsagent"
	"github.com/a2ad/a2ad/task"
)

// reviewExecutor is one fraud-review executor, served over both bindings:
// a case above manual_review_above_cents asks whether the customer's
// identity was verified and completes with the answer in its reasons;
// case "C-999" works until canceled; any other completes at once.
type reviewExecutor struct{}

func evidenceOf(m *a2a.Message) (caseID string, amount, threshold float64) {
	for _, p := range m.Parts {
		b, ok := p.Data().(map[string]any)
		if !ok {
			continue
		}
		ev, _ := b["evidence"].(map[string]any)
		caseID, _ = ev["case_id"].(string)
		amount, _ = ev["amount_cents"].(float64)
		threshold, _ = ev["manual_review_above_cents"].(float64)
	}
	return caseID, amount, threshold
}

func (reviewExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		reason := "no risk signals in the evidence"
		if ec.StoredTask == nil {
			if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
				return
			}
			caseID, amount, threshold := evidenceOf(ec.Message)
			if caseID == "C-999" {
				<-ctx.Done()
				return
			}
			if threshold > 0 && amount > threshold {
				q := a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("Case "+caseID+": has a human reviewer verified the customer's identity? Answer yes or no."))
				yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, q), nil)
				return
			}
		} else {
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
				return
			}
			answer := ""
			for _, p := range ec.Message.Parts {
				answer += p.Text()
			}
			reason = "identity verified: " + answer
		}
		caseID, _, _ := evidenceOf(ec.Message)
		if caseID == "" && ec.StoredTask != nil {
			caseID, _, _ = evidenceOf(ec.StoredTask.History[0])
		}
		data := map[string]any{"case_id": caseID, "policy_version": "fraud-policy-2026.11", "reasons": []string{reason}, "risk_level": "low", "score": 0.1}
		art := a2a.NewArtifactEvent(ec, a2a.NewDataPart(data))
		art.Artifact.Name = "risk_assessment"
		art.LastChunk = true
		if !yield(art, nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (reviewExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// parity is a real a2ad (embedded daemon, NATS with JetStream, MCP over
// HTTP) with the same executor as two agents: "fraud-http" served by
// a2asrv.NewJSONRPCHandler on a loopback port, "fraud-review" served by
// natsagent, registering with its credential.
type parity struct {
	d       *daemon.Daemon
	session *mcp.ClientSession
	srv     *natsagent.Server
}

func startParity(t *testing.T) *parity {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	var logTo io.Writer = io.Discard
	if os.Getenv("A2AD_TEST_LOG") != "" {
		logTo = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))

	web := httptest.NewUnstartedServer(nil)
	base := "http://" + web.Listener.Addr().String()
	card := &a2a.AgentCard{
		Name:                "Fraud Review Agent (HTTP)",
		Description:         "Assesses the fraud risk of a customer refund request from the evidence in a2ad's brief.",
		Version:             "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(base+"/a2a/jsonrpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:   []string{"application/json", "text/plain"},
		DefaultOutputModes:  []string{"application/json"},
		Skills: []a2a.AgentSkill{{ID: "assess_refund_risk", Name: "Assess refund risk",
			Description: "Scores the fraud risk of one refund request.", Tags: []string{"fraud"}, OutputModes: []string{"application/json"}}},
	}
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/a2a/jsonrpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(reviewExecutor{})))
	web.Config.Handler = mux
	web.Start()
	t.Cleanup(web.Close)

	dataDir := t.TempDir()
	schemas := map[string]string{"assess_refund_risk": "refund_evidence"}
	d, err := daemon.Start(context.Background(), daemon.Config{
		NATSURL: ns.ClientURL(), HTTPAddr: "127.0.0.1:0", DataDir: dataDir,
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}, EvidenceSchemas: schemas},
			{AgentConfig: agentcard.AgentConfig{ID: "fraud-http", Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: web.URL}, EvidenceSchemas: schemas},
		},
	}, log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), natsagent.ConnectOptions("fraud-review", cred)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	srv, err := natsagent.NewServer(nc, a2asrv.NewHandler(reviewExecutor{}), natsagent.Config{
		AgentID: "fraud-review", Card: a2ad.FraudReviewCard(), Credential: cred, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	for _, id := range []string{"fraud-review", "fraud-http"} {
		waitUntil(t, id+" delegable", func() bool {
			r, err := d.Service.Agents.Get(context.Background(), id)
			return err == nil && r.Delegable
		})
	}
	token, err := mcpedge.MintDevToken(dataDir, d.Auth.Audience(), "test-host", "default", "a2a:read a2a:delegate", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Close() })
	return &parity{d: d, session: session, srv: srv}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *parity) call(t *testing.T, tool string, args map[string]any) *mcpedge.TaskOutput {
	t.Helper()
	res, err := p.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: %s", tool, res.Content[0].(*mcp.TextContent).Text)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var o mcpedge.TaskOutput
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

// until polls task_get until the task is in state (or terminal).
func (p *parity) until(t *testing.T, id string, state string) *mcpedge.TaskOutput {
	t.Helper()
	var got *mcpedge.TaskOutput
	waitUntil(t, "task "+id+" "+state, func() bool {
		got = p.call(t, "task_get", map[string]any{"task_id": id})
		return got.State == state || task.State(got.State).Terminal()
	})
	return got
}

// outcome is what a2ad shows of a delegation: the states it went
// through (its record's history), the question, the artifact.
func (p *parity) outcome(t *testing.T, got *mcpedge.TaskOutput) (string, string) {
	t.Helper()
	r, _, err := p.d.Service.Tasks.Get(context.Background(), got.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, h := range r.History {
		if !h.Refused && h.To != "" {
			states = append(states, string(h.To))
		}
	}
	arts := ""
	for _, a := range got.Artifacts {
		b, _ := json.Marshal(a.Parts)
		arts += string(b)
	}
	return fmt.Sprintf("state %s (%s); artifacts %s", got.State, got.Reason, arts), strings.Join(states, ",")
}

func args(agent, caseID string, amount int) map[string]any {
	return map[string]any{
		"agent": agent, "skill": "assess_refund_risk",
		"objective":     "Assess the fraud risk of this refund.",
		"evidence":      map[string]any{"case_id": caseID, "amount_cents": amount, "currency": "EUR", "manual_review_above_cents": 50000, "customer_tenure_days": 400},
		"output_schema": "risk_assessment",
		"budget":        map[string]any{"deadline_seconds": 60},
		"wait_seconds":  0,
	}
}

// The same executor served over HTTP by a2asrv and over NATS by natsagent
// behaves the same for a2ad: a completion, a question and its answer, a
// cancel give the same end states, questions and artifacts. The states
// a2ad records on the way differ by transport only where a2ad's HTTP
// follower sees a snapshot instead of each event; over NATS every event
// is applied, in the order the binding documents (§6.5).
func TestParityHTTPAndNATS(t *testing.T) {
	p := startParity(t)
	var paths []string
	run := func(agent string) []string {
		var out []string
		outcome := func(got *mcpedge.TaskOutput) string {
			o, path := p.outcome(t, got)
			paths = append(paths, path)
			return o
		}
		// 1. Completes at once.
		got := p.call(t, "delegate", args(agent, "C-7", 1999))
		out = append(out, outcome(p.until(t, got.TaskID, "completed")))
		// 2. Asks, is answered, completes.
		got = p.call(t, "delegate", args(agent, "C-41", 125000))
		asked := p.until(t, got.TaskID, "input-required")
		out = append(out, "question: "+asked.Question)
		p.call(t, "task_respond", map[string]any{"task_id": got.TaskID, "answer": "yes", "wait_seconds": 0})
		out = append(out, outcome(p.until(t, got.TaskID, "completed")))
		// 3. Works until canceled.
		got = p.call(t, "delegate", args(agent, "C-999", 100))
		p.until(t, got.TaskID, "working")
		p.call(t, "task_cancel", map[string]any{"task_id": got.TaskID})
		out = append(out, outcome(p.until(t, got.TaskID, "canceled")))
		return out
	}
	overHTTP := run("fraud-http")
	overNATS := run("fraud-review")
	for i := range overHTTP {
		t.Logf("HTTP: %s", overHTTP[i])
		if overHTTP[i] != overNATS[i] {
			t.Errorf("step %d:\nHTTP: %s\nNATS: %s", i+1, overHTTP[i], overNATS[i])
		}
	}
	if want := `state completed (); artifacts [{"kind":"data","data":{"case_id":"C-7","policy_version":"fraud-policy-2026.11","reasons":["no risk signals in the evidence"],"risk_level":"low","score":0.1}}]`; overNATS[0] != want {
		t.Errorf("NATS completion:\n%s\nwant\n%s", overNATS[0], want)
	}
	if got, want := strings.Join(paths[3:], " | "), "submitted,working,completed | submitted,working,input-required,working,completed | submitted,working,canceled"; got != want {
		t.Errorf("NATS paths %s, want %s", got, want)
	}
	t.Logf("HTTP paths: %s", strings.Join(paths[:3], " | "))
	if st := p.srv.Stats(); st.Tasks != 3 || st.Cancels != 1 || st.Registrations != 1 {
		t.Errorf("natsagent stats %+v", st)
	}
}
