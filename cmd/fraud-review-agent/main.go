// Command fraud-review-agent runs the reference remote agent of a2ad's
// A2A-over-NATS binding (docs/nats-binding.md): a deterministic fraud-review
// agent that serves a2a.agent.<agentId>.rpc and publishes its events to
// a2a.events.<agentId>.<taskId>.
//
// Usage:
//
//	fraud-review-agent [--nats-url nats://127.0.0.1:4222] [--agent-id fraud-review]
//	    [--card card.json] [--misbehave mode:caseId[,mode:caseId]]...
//
// Misbehaviour modes (for testing a2ad): invalid-artifact, silent,
// illegal-transition. Logs go to stderr. It reconnects to NATS forever and
// stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/nats-io/nats.go"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		log.Error("fraud-review-agent", "err", err)
		os.Exit(1)
	}
}

func run(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("fraud-review-agent", flag.ContinueOnError)
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	agentID := fs.String("agent-id", "fraud-review", "agent id on the binding (the sub of its credential)")
	cardPath := fs.String("card", "", "path of the agent card JSON (default: the built-in fraud-review card)")
	var misbehave []string
	fs.Func("misbehave", "misbehave for a case: mode:caseId[,mode:caseId] (modes: invalid-artifact, silent, illegal-transition, slow, auth-required); repeatable", func(s string) error {
		misbehave = append(misbehave, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if !natsbind.ValidToken(*agentID) {
		return fmt.Errorf("--agent-id %q: want 1 to 128 of [A-Za-z0-9_-]", *agentID)
	}
	mis, err := refagent.ParseMisbehave(misbehave)
	if err != nil {
		return err
	}
	card := a2ad.FraudReviewCard()
	if *cardPath != "" {
		if card, err = os.ReadFile(*cardPath); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := nats.Connect(*natsURL,
		nats.Name("fraud-review-agent/"+*agentID),
		nats.CustomInboxPrefix("_INBOX_"+*agentID), // matches the per-agent subscribe permission (docs/nats-binding.md §10)
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		nats.ConnectHandler(func(c *nats.Conn) { log.Info("connected", "url", c.ConnectedUrlRedacted()) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected", "err", err)
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("connect %s: %w", *natsURL, err)
	}
	defer nc.Close()

	agent, err := refagent.New(nc, refagent.Config{AgentID: *agentID, Card: card, Misbehave: mis, Logger: log})
	if err != nil {
		return err
	}
	if err := agent.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	agent.Stop()
	return nil
}
