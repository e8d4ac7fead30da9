package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// The peer of `a2ad bench --processes` is this binary's hidden `bench-peer`
// command: the reference agent over NATS (its executor served by
// natsagent, as fraud-review-agent serves it) and over HTTP, and the
// trivial MCP call's server, in one process whose usage the bench reads
// apart from a2ad's. It talks to the bench in JSON lines: it writes a
// benchPeerHello on stdout once it serves, then answers each
// benchPeerRequest from stdin with a benchPeerReply. It stops when stdin
// closes, or on SIGINT or SIGTERM.

// benchPeerHello is where the peer serves.
type benchPeerHello struct {
	HTTPAgentURL  string `json:"http_agent_url"` // the reference agent over A2A's HTTP binding
	FloorURL      string `json:"floor_url"`      // the trivial MCP server
	FloorAudience string `json:"floor_audience"` // its tokens' audience (the development key of --dir)
	MetricsURL    string `json:"metrics_url"`    // the Go and process collectors
}

// benchPeerRequest is one request of the bench: with NATSURL and
// Credential, serve the reference agent fraud-review over a2ad's NATS
// server; with ReportAtOnce, make it answer in one event (true) or three
// (false) from its next task on.
type benchPeerRequest struct {
	NATSURL      string `json:"nats_url,omitempty"`
	Credential   string `json:"credential,omitempty"`
	ReportAtOnce *bool  `json:"report_at_once,omitempty"`
}

// benchPeerReply answers a request: Error is empty if it was done.
type benchPeerReply struct {
	Error string `json:"error,omitempty"`
}

func newBenchPeer() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "bench-peer",
		Short:  "Serve the agents and the trivial MCP server of `a2ad bench --processes` (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageError("bench-peer: --dir is required")
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			tuneGC(log) // as the bench and serve run
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchPeer(ctx, dir, os.Stdin, cmd.OutOrStdout(), log)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the trivial MCP server's development key")
	return cmd
}

func runBenchPeer(ctx context.Context, dir string, in io.Reader, out io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, httpAgentURL, stopHTTP, err := startHTTPAgent(nil, nil)
	if err != nil {
		return err
	}
	defer stopHTTP()
	floorURL, floorAud, stopFloor, err := startFloor(dir, log)
	if err != nil {
		return err
	}
	defer stopFloor()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	metrics := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = metrics.Serve(ln) }()
	defer metrics.Close()

	enc := json.NewEncoder(out)
	if err := enc.Encode(benchPeerHello{HTTPAgentURL: httpAgentURL, FloorURL: floorURL, FloorAudience: floorAud,
		MetricsURL: "http://" + ln.Addr().String() + "/metrics"}); err != nil {
		return err
	}
	requests := make(chan benchPeerRequest)
	readErr := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(bufio.NewReader(in))
		for {
			var r benchPeerRequest
			if err := dec.Decode(&r); err != nil {
				readErr <- err
				return
			}
			select {
			case requests <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	var agent *refagent.Agent
	var agentNC *nats.Conn
	defer func() {
		if agent != nil {
			agent.Stop()
			agentNC.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return nil // the bench is done
			}
			return fmt.Errorf("bench-peer: reading a request: %w", err)
		case r := <-requests:
			var err error
			switch {
			case r.NATSURL != "" && agent == nil:
				agentNC, agent, err = startAgentOn(ctx, r.NATSURL, r.Credential, nil, nil)
			case r.NATSURL != "":
				err = errors.New("the agent is already serving")
			case r.ReportAtOnce != nil && agent != nil:
				agent.SetReportAtOnce(*r.ReportAtOnce)
			default:
				err = errors.New("nothing to do (report_at_once before the agent serves?)")
			}
			reply := benchPeerReply{}
			if err != nil {
				reply.Error = err.Error()
			}
			if err := enc.Encode(reply); err != nil {
				return err
			}
		}
	}
}

// startBenchPeer starts `a2ad bench-peer --dir dir` and reads where it
// serves. The peer is returned, to be stopped, even with an error.
func startBenchPeer(ctx context.Context, exe, dir string) (*benchChild, benchPeerHello, error) {
	var hello benchPeerHello
	c := &benchChild{name: "bench-peer", done: make(chan struct{})}
	c.cmd = exec.Command(exe, "bench-peer", "--dir", dir)
	c.stderr = newBenchChildLog(c.name, nil, nil)
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = benchChildAttr()
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, hello, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, hello, err
	}
	c.out = bufio.NewReader(stdout)
	if err := c.start(); err != nil {
		return nil, hello, err
	}
	got := make(chan error, 1)
	go func() { got <- c.read(&hello) }()
	select {
	case err = <-got:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(benchChildStart):
		err = fmt.Errorf("no answer within %s", benchChildStart)
	}
	if err != nil {
		return c, hello, fmt.Errorf("bench: starting bench-peer: %w\n%s", err, c.stderr.tail())
	}
	c.metricsURL = hello.MetricsURL
	return c, hello, nil
}

// call sends r to the peer and waits for its reply.
func (c *benchChild) call(r benchPeerRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("bench: bench-peer: %w\n%s", err, c.stderr.tail())
	}
	var reply benchPeerReply
	if err := c.read(&reply); err != nil {
		return fmt.Errorf("bench: bench-peer: %w\n%s", err, c.stderr.tail())
	}
	if reply.Error != "" {
		return fmt.Errorf("bench: bench-peer: %s", reply.Error)
	}
	return nil
}

// read decodes the peer's next line into v.
func (c *benchChild) read(v any) error {
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}
