package natsagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/nats-io/nats.go"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/natsagent"
	"github.com/a2ad/a2ad/task"
)

// riskReview is a complete A2A agent written with a2a-go/v2: it reads the
// case from the brief a2ad sends (the message's data part) and completes
// with a risk_assessment artifact. Nothing in it knows about NATS.
type riskReview struct{}

func (riskReview) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		var b struct {
			Evidence struct {
				CaseID      string `json:"case_id"`
				AmountCents int    `json:"amount_cents"`
			} `json:"evidence"`
		}
		for _, p := range ec.Message.Parts {
			if d, ok := p.Content.(a2a.Data); ok {
				raw, _ := json.Marshal(d.Value)
				_ = json.Unmarshal(raw, &b)
			}
		}
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		level, score := "low", 0.1
		if b.Evidence.AmountCents > 50_000 {
			level, score = "medium", 0.5
		}
		if !yield(a2a.NewArtifactEvent(ec, a2a.NewDataPart(map[string]any{
			"case_id": b.Evidence.CaseID, "risk_level": level, "score": score,
			"reasons": []string{"amount checked against the review threshold"}, "policy_version": "example-1",
		})), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (riskReview) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// card is the agent's card: docs/nats-binding.md §14.1's minimal card.
const card = `{
  "name": "Risk Review",
  "description": "Assesses the refund risk of one case.",
  "version": "1.0.0",
  "supportedInterfaces": [{"url": "nats://127.0.0.1:4222/a2a.agent.risk-review",
    "protocolBinding": "urn:a2ad:binding:nats:v1", "protocolVersion": "1.0"}],
  "capabilities": {},
  "defaultInputModes": ["application/json"],
  "defaultOutputModes": ["application/json"],
  "skills": [{"id": "assess_refund_risk", "name": "Assess refund risk",
    "description": "Scores one refund case.", "tags": ["fraud"]}]
}`

// An agent built with a2a-go/v2 served to a2ad over NATS: connect with the
// credential `a2ad agents credential risk-review` minted, serve the
// a2a-go request handler, and wait for a2ad to take the card. a2ad (here
// started in the process, as `a2ad demo` starts it) then delegates to it.
func ExampleServer() {
	natsURL, credential, delegate, stopA2ad := startA2ad("risk-review")
	defer stopA2ad()

	nc, err := nats.Connect(natsURL, natsagent.ConnectOptions("risk-review", credential)...)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	srv, err := natsagent.NewServer(nc, a2asrv.NewHandler(riskReview{}), natsagent.Config{
		AgentID: "risk-review", Card: json.RawMessage(card), Credential: credential,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown(context.Background()) // drains: running tasks publish what they have
	reg, err := srv.WaitRegistered(ctx)
	if err != nil {
		log.Fatal(err) // e.g. a credential a2ad does not take
	}
	fmt.Println("card:", reg.Status)

	fmt.Println(delegate("C-7", 125_000))
	// Output:
	// card: approved
	// completed {"case_id":"C-7","policy_version":"example-1","reasons":["amount checked against the review threshold"],"risk_level":"medium","score":0.5}
}

// startA2ad runs a2ad on an embedded NATS server in a temporary data
// directory, with agentID configured (trusted on first use), and returns
// its NATS URL, a credential for agentID, a function that delegates one
// case as a host would and says how the task ended, and a stop function.
func startA2ad(agentID string) (natsURL, credential string, delegate func(caseID string, amountCents int) string, stop func()) {
	dir, err := os.MkdirTemp("", "natsagent-example")
	if err != nil {
		log.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{
		DataDir: dir, NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0",
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: agentID, Tenants: []string{"default"}, TrustOnFirstUse: true}}},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		log.Fatal(err)
	}
	credential, _, err = d.AgentKeys.Mint(agentID, time.Hour, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	host := broker.Principal{Tenant: "default", Subject: "example-host"}
	delegate = func(caseID string, amountCents int) string {
		ctx := context.Background()
		ev, _ := json.Marshal(map[string]any{"case_id": caseID, "amount_cents": amountCents, "currency": "EUR"})
		r, err := d.Service.Delegate(ctx, host, broker.DelegateRequest{Agent: agentID, Skill: "assess_refund_risk",
			Brief: brief.Request{Objective: "Assess this refund.", Evidence: ev, OutputSchema: "risk_assessment"}})
		if err != nil {
			return "delegate: " + err.Error()
		}
		r, err = d.Service.WaitUntil(ctx, host, r.ID, 10*time.Second, func(r *task.Record) bool { return r.State.Terminal() }, nil)
		if err != nil || len(r.Artifacts) == 0 || len(r.Artifacts[0].Parts) == 0 {
			return fmt.Sprintf("%s %s %v", r.State, r.Reason, err)
		}
		return fmt.Sprintf("%s %s", r.State, r.Artifacts[0].Parts[0].Data)
	}
	return d.NATSURL, credential, delegate, func() { d.Stop(); _ = os.RemoveAll(dir) }
}
