// Command fraud-review-agent runs the reference remote agent of a2ad's
// A2A-over-NATS binding (docs/nats-binding.md): a deterministic fraud-review
// agent that serves a2a.agent.<agentId>.rpc and publishes its events to
// a2a.events.<agentId>.<taskId>.
//
// Usage:
//
//	fraud-review-agent --credential-file fraud-review.jwt [--nats-url nats://127.0.0.1:4222]
//	    [--nats-ca ca.pem [--nats-client-cert cert.pem --nats-client-key key.pem]]
//	    [--agent-id fraud-review] [--card card.json] [--misbehave mode:caseId[,mode:caseId]]...
//	    [--slow-for 3s]
//
// The credential is the agent's identity: mint it with `a2ad agents
// credential fraud-review --out fraud-review.jwt`. It may also come from the
// environment, A2AD_AGENT_CREDENTIAL (the token) or
// A2AD_AGENT_CREDENTIAL_FILE. The agent id defaults to the credential's
// subject. On a2ad's embedded NATS server the credential is the connection's
// token and gives it the agent's own subjects only; on an external server,
// put the NATS user in the URL (nats://user:password@host:4222), best in
// the environment variable NATS_URL rather than --nats-url, which
// every user of the machine can read in the process list.
//
// Over TLS (a2ad's nats_tls, or a NATS server with tls), --nats-ca (env
// A2AD_NATS_CA) is the CA certificate that verifies the server; with it
// the agent connects over TLS only, whatever the URL's scheme (tls://
// says so too). --nats-client-cert and --nats-client-key present a client
// certificate to a server that verifies clients. The files are read again
// at each reconnection, so renewed ones are used without a restart.
//
// Misbehaviour modes (for testing a2ad): invalid-artifact, silent,
// illegal-transition, slow, auth-required, replace-after-last,
// endless-chunks; a slow case stays WORKING for --slow-for (default 3 s)
// before it completes, or until it is canceled. Logs go to stderr. It reconnects to NATS forever and
// stops on SIGINT or SIGTERM.
package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], log); err != nil {
		var ue *usageError
		switch {
		case errors.Is(err, flag.ErrHelp):
			os.Exit(0)
		case errors.As(err, &ue):
			fmt.Fprintf(os.Stderr, "fraud-review-agent: %v\nRun 'fraud-review-agent --help' for usage.\n", ue.err)
			os.Exit(2)
		}
		log.Error("fraud-review-agent", "err", err)
		os.Exit(1)
	}
}

// usageError is a wrong command line: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }

// printUsage writes --help: what the agent is, the usage line, then each
// flag as --name TYPE, its description and its default (a built-in one:
// defaults from the environment are never shown).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `fraud-review-agent: the reference A2A agent of a2ad (deterministic fraud review), over NATS or, with --http, A2A 1.0 HTTP.

Usage:
  fraud-review-agent --credential-file FILE [--nats-url URL] [flags]
  fraud-review-agent --http ADDR [flags]

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + strings.ToUpper(name)
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func run(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("fraud-review-agent", flag.ContinueOnError)
	// Flags that the environment may set default to "" here and are
	// resolved after parsing: --help must never print an environment
	// value (NATS_URL holds a password).
	natsURL := fs.String("nats-url", "", "NATS server URL(s), comma-separated (default: env NATS_URL, as the nats CLI reads it, which keeps a password in the URL out of the process list; else nats://127.0.0.1:4222)")
	agentID := fs.String("agent-id", "", "agent id on the binding (default: the sub of its credential, else fraud-review)")
	credFile := fs.String("credential-file", "", "file holding the agent credential, as written by 'a2ad agents credential ID --out FILE' (default: env A2AD_AGENT_CREDENTIAL_FILE; or the token itself in env A2AD_AGENT_CREDENTIAL)")
	caFile := fs.String("nats-ca", "", "CA certificate (PEM) that verifies the NATS server: TLS only (default: env A2AD_NATS_CA)")
	clientCert := fs.String("nats-client-cert", "", "client certificate (PEM) for a NATS server that verifies clients")
	clientKey := fs.String("nats-client-key", "", "private key (PEM) of --nats-client-cert")
	cardPath := fs.String("card", "", "path of the agent card JSON (default: the built-in fraud-review card)")
	var misbehave []string
	fs.Func("misbehave", "misbehave for a case: `mode:caseId`[,mode:caseId] (modes: invalid-artifact, silent, illegal-transition, slow, auth-required, replace-after-last, endless-chunks, structured-question, unformable-question; with --http also unresponsive, cancel-hangs); repeatable", func(s string) error {
		misbehave = append(misbehave, s)
		return nil
	})
	slowFor := fs.Duration("slow-for", 3*time.Second, "how long a slow:<caseId> case stays TASK_STATE_WORKING before it completes (unless canceled first)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long running tasks may go on before they are failed (NATS only)")
	httpAddr := fs.String("http", "", "serve as a standard A2A 1.0 agent over HTTP (JSON-RPC and HTTP+JSON, no NATS) on this address, e.g. 127.0.0.1:9000; its card is at /.well-known/agent-card.json")
	publicURL := fs.String("public-url", "", "with --http: the base URL the card advertises (default http://<the address it listens on>)")
	streaming := fs.Bool("streaming", true, "with --http: the card's capabilities.streaming")
	fs.SetOutput(io.Discard) // usage and faults are printed below, once
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(os.Stdout, fs)
			return err
		}
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected arguments: %q (every option is a --flag)", fs.Args())}
	}
	*natsURL = cmp.Or(*natsURL, os.Getenv("NATS_URL"), "nats://127.0.0.1:4222")
	*credFile = cmp.Or(*credFile, os.Getenv("A2AD_AGENT_CREDENTIAL_FILE"))
	*caFile = cmp.Or(*caFile, os.Getenv("A2AD_NATS_CA"))
	if *slowFor <= 0 {
		return fmt.Errorf("--slow-for %s: want a positive duration", *slowFor)
	}
	if *httpAddr != "" {
		mis, err := refagent.ParseMisbehave(misbehave)
		if err != nil {
			return err
		}
		return serveHTTP(*httpAddr, *publicURL, *streaming, mis, *slowFor, log)
	}
	cred := strings.TrimSpace(os.Getenv("A2AD_AGENT_CREDENTIAL"))
	if *credFile != "" {
		b, err := os.ReadFile(*credFile)
		if err != nil {
			return fmt.Errorf("--credential-file: %w", err)
		}
		cred = strings.TrimSpace(string(b))
	}
	if *agentID == "" {
		*agentID = "fraud-review"
		if sub := credentialSubject(cred); sub != "" {
			*agentID = sub
		}
	}
	if cred == "" {
		log.Warn("no agent credential: a2ad's embedded NATS server and its registry refuse this agent (mint one with `a2ad agents credential ID --out FILE`)")
	} else if sub := credentialSubject(cred); sub != *agentID {
		return fmt.Errorf("the credential is for agent %q, not --agent-id %q", sub, *agentID)
	}
	if !natsbind.ValidToken(*agentID) {
		return fmt.Errorf("--agent-id %q: want 1 to 128 of [A-Za-z0-9_-]", *agentID)
	}
	if (*clientCert == "") != (*clientKey == "") {
		return errors.New("--nats-client-cert and --nats-client-key go together")
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

	lastConnectErr := ""
	// nats.go gives up reconnecting when the server refuses the
	// credential twice in a row (revoked, expired): the agent then ends
	// with an error, so that its supervisor (systemd, Kubernetes) sees it,
	// rather than run on without a connection.
	closed := make(chan error, 1)
	opts := append(refagent.ConnectOptions(*agentID, cred), // the per-agent permissions of docs/nats-binding.md §10
		nats.ClosedHandler(func(c *nats.Conn) {
			err := c.LastError()
			if err == nil {
				err = errors.New("connection closed")
			}
			select {
			case closed <- err:
			default:
			}
		}),
		nats.Name("fraud-review-agent/"+*agentID),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		nats.ConnectHandler(func(c *nats.Conn) { log.Info("connected", "url", c.ConnectedUrlRedacted()) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if msg := err.Error(); msg != lastConnectErr { // once per distinct error, not every second
				lastConnectErr = msg
				log.Warn("cannot connect to NATS; retrying every second", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected", "err", err)
			}
		}),
	)
	if *caFile != "" {
		b, err := os.ReadFile(*caFile)
		if err != nil {
			return fmt.Errorf("--nats-ca: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return fmt.Errorf("--nats-ca %s: no PEM certificate in it", *caFile)
		}
		opts = append(opts, nats.RootCAs(*caFile))
	}
	if *clientCert != "" {
		opts = append(opts, nats.ClientCert(*clientCert, *clientKey))
	}
	nc, err := nats.Connect(*natsURL, opts...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", *natsURL, err)
	}
	defer nc.Close()

	agent, err := refagent.New(nc, refagent.Config{AgentID: *agentID, Card: card, Misbehave: mis, SlowFor: *slowFor, Logger: log, Credential: cred})
	if err != nil {
		return err
	}
	if err := agent.Start(context.WithoutCancel(ctx)); err != nil { // stopped below, draining
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-closed:
		agent.Stop()
		return fmt.Errorf("NATS connection closed for good (a revoked or expired credential is refused at every reconnect: mint a new one with `a2ad agents credential %s --out FILE` and the --ca or --nats-ca this a2ad needs): %w", *agentID, err)
	}
	// SIGTERM drains: running tasks may finish for --shutdown-timeout;
	// those still running then are published TASK_STATE_FAILED.
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := agent.Shutdown(sctx); err != nil {
		log.Warn("shut down before every running task finished; those were failed", "timeout", *shutdownTimeout)
	}
	return nil
}

// serveHTTP runs the agent over A2A's HTTP bindings until SIGINT/SIGTERM.
func serveHTTP(addr, publicURL string, streaming bool, mis map[string]string, slowFor time.Duration, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	if publicURL == "" {
		publicURL = "http://" + ln.Addr().String()
	}
	agent, err := refagent.NewHTTP(refagent.HTTPConfig{BaseURL: publicURL, Streaming: streaming, Misbehave: mis, SlowFor: slowFor, Logger: log})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: agent.Handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		agent.Stop()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving A2A 1.0 over HTTP", "card", publicURL+"/.well-known/agent-card.json", "addr", ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// credentialSubject returns the sub of a credential without verifying it
// (a2ad verifies it): only to default --agent-id. "" if it has none.
func credentialSubject(cred string) string {
	if cred == "" {
		return ""
	}
	var c jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(cred, &c); err != nil {
		return ""
	}
	return c.Subject
}
