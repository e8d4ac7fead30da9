package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newDemo() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a self-contained delegation demo (embedded NATS, reference agent, MCP host) and check its outcome",
		Long: "demo starts a2ad with an embedded NATS server in a temporary directory, the reference fraud-review agent " +
			"over a2ad's NATS binding and, as fraud-review-http, over A2A's standard HTTP binding (JSON-RPC, the official Go SDK's server), " +
			"and an MCP host built with the go-sdk client over Streamable HTTP. It delegates five refund cases — over NATS C-41 " +
			"(above the manual review threshold: question, answer, completion), C-7 (immediate completion) and C-13 " +
			"(the agent returns a schema-violating artifact); over HTTP C-42 (question, answer, completion) and C-14 " +
			"(schema-violating artifact) — prints each task's transitions and verdict, and exits 0 only if all five ended as expected.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			tuneGC(log) // as serve runs
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			return runDemo(ctx, cmd.OutOrStdout(), log)
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log the daemon's and agent's info messages to stderr")
	return cmd
}

// inProcessConfig is the daemon of `a2ad demo` and `a2ad bench`: embedded
// NATS and HTTP on free loopback ports, state in dir, the reference agent
// trusted on first use with the evidence of deploy/a2ad.yaml; with
// httpAgentURL also the reference agent over A2A's HTTP bindings, as
// fraud-review-http, its card fetched from there.
func inProcessConfig(dir, httpAgentURL string) daemon.Config {
	cfg := daemon.Config{
		DataDir: dir, HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{{
			AgentConfig:     agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true},
			EvidenceSchemas: map[string]string{"assess_refund_risk": "refund_evidence"},
			EvidenceKeys:    map[string][]string{"assess_refund_risk": fraudReviewEvidence},
		}},
	}
	if httpAgentURL != "" {
		cfg.Agents = append(cfg.Agents, daemon.AgentConfig{
			AgentConfig:     agentcard.AgentConfig{ID: "fraud-review-http", Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: httpAgentURL},
			EvidenceSchemas: map[string]string{"assess_refund_risk": "refund_evidence"},
			EvidenceKeys:    map[string][]string{"assess_refund_risk": fraudReviewEvidence},
		})
	}
	return cfg
}

// startHTTPAgent serves the reference agent over A2A's HTTP bindings (the
// official Go SDK's a2asrv) on a free loopback port and returns its base
// URL and a stop function.
func startHTTPAgent(misbehave map[string]string, log *slog.Logger) (*refagent.HTTPAgent, string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	base := "http://" + ln.Addr().String()
	agent, err := refagent.NewHTTP(refagent.HTTPConfig{BaseURL: base, Streaming: true, Misbehave: misbehave, Logger: log})
	if err != nil {
		ln.Close()
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: agent.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return agent, base, func() { agent.Stop(); _ = srv.Close() }, nil
}

// startInProcessAgent runs the reference agent against d over loopback TCP,
// with the credential d mints for it, as an operator would with `a2ad
// agents credential fraud-review`. The caller closes nc after stopping the
// agent.
func startInProcessAgent(ctx context.Context, d *daemon.Daemon, misbehave map[string]string, log *slog.Logger) (*nats.Conn, *refagent.Agent, error) {
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		return nil, nil, err
	}
	return startAgentOn(ctx, d.NATSURL, cred, misbehave, log)
}

// startAgentOn runs the reference agent fraud-review with credential cred
// against the NATS server at natsURL (a2ad's embedded one). The caller
// closes nc after stopping the agent; after an error, nothing is left to
// close.
func startAgentOn(ctx context.Context, natsURL, cred string, misbehave map[string]string, log *slog.Logger) (*nats.Conn, *refagent.Agent, error) {
	nc, err := nats.Connect(natsURL, append(refagent.ConnectOptions("fraud-review", cred), nats.Name("fraud-review-agent"))...)
	if err != nil {
		return nil, nil, fmt.Errorf("agent connection: %w", err)
	}
	agent, err := refagent.New(nc, refagent.Config{AgentID: "fraud-review", Card: a2ad.FraudReviewCard(),
		Misbehave: misbehave, Logger: log, Credential: cred})
	if err == nil {
		err = agent.Start(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, agent, nil
}

// fraudReviewEvidence is the evidence the fraud-review agent may receive, as
// in deploy/a2ad.yaml: free-text notes and anything else stay with the host.
var fraudReviewEvidence = []string{"case_id", "amount_cents", "currency", "manual_review_above_cents",
	"customer_tenure_days", "prior_refunds_90d", "order_id"}

// demoCase is one delegation of the demo and the outcome it must reach.
type demoCase struct {
	agent     string // "" is fraud-review, over NATS
	title     string
	evidence  map[string]any
	answer    string // answer to the agent's question, if one is expected
	wantState task.State
	wantWhy   string
}

var demoCases = []demoCase{
	{
		title: "C-41: refund above the manual review threshold (question, answer, completion)",
		evidence: map[string]any{"case_id": "C-41", "amount_cents": 125000, "currency": "EUR", "manual_review_above_cents": 50000,
			"customer_tenure_days": 400, "prior_refunds_90d": 1},
		answer:    "yes",
		wantState: task.Completed,
	},
	{
		title: "C-7: small refund (immediate completion; the customer's e-mail stays with the host)",
		evidence: map[string]any{"case_id": "C-7", "amount_cents": 1999, "currency": "EUR", "manual_review_above_cents": 50000, "customer_tenure_days": 900,
			"customer_email": "jane.doe@example.com"},
		wantState: task.Completed,
	},
	{
		title:     "C-13: the agent misbehaves and returns a schema-violating artifact",
		evidence:  map[string]any{"case_id": "C-13", "amount_cents": 4500, "currency": "EUR"},
		wantState: task.Failed,
		wantWhy:   task.ReasonArtifactRejected,
	},
	{
		agent: "fraud-review-http",
		title: "C-42 over HTTP: a standard A2A agent (the official Go SDK, JSON-RPC) asks, is answered, completes",
		evidence: map[string]any{"case_id": "C-42", "amount_cents": 90000, "currency": "EUR", "manual_review_above_cents": 50000,
			"customer_tenure_days": 30, "prior_refunds_90d": 3},
		answer:    "no",
		wantState: task.Completed,
	},
	{
		agent:     "fraud-review-http",
		title:     "C-14 over HTTP: the standard agent returns a schema-violating artifact",
		evidence:  map[string]any{"case_id": "C-14", "amount_cents": 4500, "currency": "EUR"},
		wantState: task.Failed,
		wantWhy:   task.ReasonArtifactRejected,
	},
}

func runDemo(ctx context.Context, out io.Writer, log *slog.Logger) error {
	dir, err := os.MkdirTemp("", "a2ad-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, httpAgentURL, stopHTTPAgent, err := startHTTPAgent(map[string]string{"C-14": refagent.ModeInvalidArtifact}, log)
	if err != nil {
		return err
	}
	defer stopHTTPAgent()
	d, err := daemon.Start(ctx, inProcessConfig(dir, httpAgentURL), log, true)
	if err != nil {
		return err
	}
	defer d.Stop()
	fmt.Fprintf(out, "a2ad demo: daemon up (NATS %s, MCP %s/mcp, data in %s)\n", d.NATSURL, d.HTTPURL, dir)

	nc, agent, err := startInProcessAgent(ctx, d, map[string]string{"C-13": "invalid-artifact"}, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	defer agent.Stop()
	if err := waitDelegable(ctx, d, "fraud-review"); err != nil {
		return err
	}
	fmt.Fprintln(out, "reference agent fraud-review connected with its credential, registered its card and is approved (trust on first use)")
	if err := waitDelegable(ctx, d, "fraud-review-http"); err != nil {
		return err
	}
	if r, err := d.Service.Agents.Get(ctx, "fraud-review-http"); err == nil && r.Interface != nil {
		fmt.Fprintf(out, "reference agent fraud-review-http serves A2A 1.0 over HTTP; its card, fetched from %s, is approved (trust on first use): binding %s %s\n",
			httpAgentURL, r.Binding, r.Interface.URL)
	}

	// The host's token, as an identity provider would issue it; here minted
	// with the demo data directory's development key.
	token, err := mcpedge.MintDevToken(dir, d.Auth.Audience(), "demo-host", "default", mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate, 10*time.Minute)
	if err != nil {
		return err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "a2ad-demo-host", Version: "1.0"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		return fmt.Errorf("MCP connect: %w", err)
	}
	defer session.Close()

	failures := 0
	last := ""
	for _, c := range demoCases {
		fmt.Fprintf(out, "\n== %s\n", c.title)
		got, err := runCase(ctx, out, session, c)
		if err == nil && c.agent == "" {
			// The trail shown is of the last NATS case: its agent reports
			// every state. a2ad observes an HTTP agent's task, and one
			// that finishes before it looks shows no working state.
			last = got.TaskID
		}
		if err == nil {
			var rec *task.Record
			if rec, _, err = d.Service.Tasks.Get(ctx, got.TaskID); err == nil {
				rec.Pending = nil
				_ = printTask(out, rec, time.Now())
			}
		}
		switch {
		case err != nil:
			fmt.Fprintf(out, "FAIL: %v\n", err)
			failures++
		case got.State != string(c.wantState) || got.Reason != c.wantWhy:
			fmt.Fprintf(out, "FAIL: ended %s (%s), want %s (%s)\n", got.State, got.Reason, c.wantState, c.wantWhy)
			failures++
		default:
			fmt.Fprintf(out, "verdict: %s", got.State)
			if got.Reason != "" {
				fmt.Fprintf(out, " (%s)", got.Reason)
			}
			fmt.Fprintln(out, " — as expected")
		}
	}
	if last != "" {
		if err := showAudit(out, d, dir, last); err != nil {
			fmt.Fprintf(out, "FAIL: audit trail: %v\n", err)
			failures++
		}
	}
	if failures > 0 {
		return fmt.Errorf("demo: %d of %d cases did not end as expected", failures, len(demoCases))
	}
	fmt.Fprintf(out, "\ndemo: all %d cases ended as expected\n", len(demoCases))
	return nil
}

// showAudit prints the audit trail of task id as an operator sees it
// (`a2ad audit --task`): five records for a delegation whose artifact was
// rejected. Records reach the stream off the host's path, so it waits for
// them (at most 10 s).
func showAudit(out io.Writer, d *daemon.Daemon, dir, id string) error {
	fmt.Fprintf(out, "\n== what an operator sees: the audit trail of %s (a2ad audit --task %s)\n", id, id)
	var page audit.Page
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := callJSON("GET", d.HTTPURL, "", dir, "/v1/audit?task="+id, nil, &page); err != nil {
			return err
		}
		if len(page.Records) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(page.Records) < 5 {
		return fmt.Errorf("%d records of task %s, want 5", len(page.Records), id)
	}
	return printAudit(out, page.Records)
}

func waitDelegable(ctx context.Context, d *daemon.Daemon, id string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := d.Service.Agents.Get(ctx, id); err == nil && r.Delegable {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("demo: the reference agent did not register within 15s")
}

func runCase(ctx context.Context, out io.Writer, s *mcp.ClientSession, c demoCase) (*mcpedge.TaskOutput, error) {
	agent := cmp.Or(c.agent, "fraud-review")
	got, err := callTask(ctx, s, "delegate", map[string]any{
		"agent": agent, "skill": "assess_refund_risk",
		"objective":     "Assess the fraud risk of this refund request and recommend a risk level.",
		"evidence":      c.evidence,
		"constraints":   []string{"Do not contact the customer.", "Use only the evidence given."},
		"output_schema": "risk_assessment",
		"budget":        map[string]any{"deadline_seconds": 120},
		"wait_seconds":  20,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "delegate -> task %s: %s\n", got.TaskID, got.State)
	if len(got.DroppedEvidence) > 0 {
		fmt.Fprintf(out, "left out of the brief (not allowed for %s): %s\n", agent, strings.Join(got.DroppedEvidence, ", "))
	}
	if got.State == string(task.InputRequired) {
		fmt.Fprintf(out, "agent asks: %s\n", got.Question)
		if c.answer == "" {
			return got, nil
		}
		fmt.Fprintf(out, "host answers: %s\n", c.answer)
		if got, err = callTask(ctx, s, "task_respond", map[string]any{"task_id": got.TaskID, "answer": c.answer, "wait_seconds": 20}); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "task_respond -> %s\n", got.State)
	}
	for _, a := range got.Artifacts {
		for _, p := range a.Parts {
			b, _ := json.Marshal(p.Data)
			fmt.Fprintf(out, "validated artifact %s: %s\n", a.ArtifactID, b)
		}
	}
	for _, v := range got.Verdicts {
		if !v.Valid {
			var parts []string
			for _, x := range v.Violations {
				parts = append(parts, x.Pointer+" ("+x.Keyword+")")
			}
			fmt.Fprintf(out, "artifact %s rejected at: %s\n", v.ArtifactID, strings.Join(parts, ", "))
		}
	}
	return got, nil
}

// callTask calls a task tool and decodes its structured result.
func callTask(ctx context.Context, s *mcp.ClientSession, tool string, args map[string]any) (*mcpedge.TaskOutput, error) {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, t.Text)
			}
		}
		return nil, fmt.Errorf("%s: %s", tool, strings.Join(msg, "; "))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, err
	}
	var o mcpedge.TaskOutput
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("%s: structured result: %w", tool, err)
	}
	return &o, nil
}
