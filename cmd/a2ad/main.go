// Command a2ad is the delegation broker daemon and its operator CLI.
//
//	a2ad serve [--stdio] [--config FILE] [--data-dir DIR] [--http-addr ADDR] [--nats-listen ADDR] [--nats-url URL]
//	           [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
//	           [--nats-tls-cert FILE --nats-tls-key FILE] [--nats-ca FILE] [--nats-client-cert FILE --nats-client-key FILE]
//	a2ad mcp [--url URL | --data-dir DIR] [--token-file F | --principal NAME --config F | --subject S [--tenant T] [--scope "…"]] [--ca F]
//	a2ad demo
//	a2ad tasks list [--state S --agent A --tenant T --older-than D --all]|get ID|cancel ID|watch [--server URL] [--json] [--token T | --data-dir D]
//	a2ad agents list|show ID|approve ID --fingerprint F|quarantine ID [--reason R]|credential ID --out FILE|- [--ttl D]|check-card FILE [--agent ID]
//	a2ad token mint --sub S [--tenant T] [--scope "…"] [--ttl D] [--data-dir D]
//	a2ad version [--json] | a2ad --version | a2ad completion bash|zsh|fish|powershell
//	a2ad bench [--duration 10s] [--concurrency 1,64] [--open-tasks 100000] [--json] [--cpuprofile F] [--processes]
//
// This file only parses flags and wires packages.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(newRoot(os.Stdout, os.Stderr), os.Args[1:], os.Stdout, os.Stderr))
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "a2ad",
		Short:         "a2ad delegates bounded work from AI hosts (MCP) to remote A2A agents over NATS",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServe(), newMCP(), newDemo(), newTasks(), newAgents(), newAudit(), newToken(), newBench())
	root.AddCommand(newConsole(), newBenchPeer(), newBenchHeap())
	configureRoot(root) // last: it wraps every command's argument check
	return root
}

func newServe() *cobra.Command {
	var configPath, pprofAddr string
	var stdio bool
	var o daemon.Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: embedded NATS with JetStream, MCP over Streamable HTTP at /mcp (or stdio)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := daemon.Config{}
			var fileFaults *daemon.FileError
			if configPath != "" {
				var err error
				if cfg, err = daemon.LoadConfig(configPath); err != nil && !errors.As(err, &fileFaults) {
					return err
				}
			}
			f := cmd.Flags()
			override := func(name string, dst *string, v string) {
				if f.Changed(name) {
					*dst = v
				}
			}
			override("data-dir", &cfg.DataDir, o.DataDir)
			override("http-addr", &cfg.HTTPAddr, o.HTTPAddr)
			override("nats-listen", &cfg.NATSListen, o.NATSListen)
			override("nats-url", &cfg.NATSURL, o.NATSURL)
			override("schemas-dir", &cfg.SchemasDir, o.SchemasDir)
			override("tls-cert", &cfg.TLS.CertFile, o.TLS.CertFile)
			override("tls-key", &cfg.TLS.KeyFile, o.TLS.KeyFile)
			override("tls-client-ca", &cfg.TLS.ClientCAFile, o.TLS.ClientCAFile)
			override("nats-tls-cert", &cfg.NATSTLS.CertFile, o.NATSTLS.CertFile)
			override("nats-tls-key", &cfg.NATSTLS.KeyFile, o.NATSTLS.KeyFile)
			override("nats-ca", &cfg.NATSTLS.CAFile, o.NATSTLS.CAFile)
			override("nats-client-cert", &cfg.NATSTLS.ClientCertFile, o.NATSTLS.ClientCertFile)
			override("nats-client-key", &cfg.NATSTLS.ClientKeyFile, o.NATSTLS.ClientKeyFile)
			cfg.ConformanceTools = o.ConformanceTools
			if fileFaults != nil {
				// Every fault at once: the evidence schema names too,
				// against the schema directory the flags give.
				fileFaults.Add(daemon.EvidenceSchemaFaults(cfg)...)
				return fileFaults
			}
			// Logs go to stderr only: in stdio mode stdout carries nothing but MCP messages.
			if v := os.Getenv("A2AD_NATS_URL"); v != "" && !f.Changed("nats-url") {
				cfg.NATSURL = v // an environment variable keeps a password off the command line
			}
			if v := os.Getenv("A2AD_NATS_SYSTEM_URL"); v != "" {
				cfg.NATSAuthCallout.SystemURL = v
			}
			log, err := cfg.Log.NewLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			// Libraries that log through the standard loggers (the JWKS
			// refresher) write in the same format.
			slog.SetDefault(log)
			log.Info("Go runtime", tuneGC(log).logAttrs()...)
			if pprofAddr != "" {
				addr, stop, err := servePprof(pprofAddr)
				if err != nil {
					return err
				}
				defer stop()
				log.Warn("profiling listener (net/http/pprof, --pprof-addr): for a2ad bench, never in production", "addr", addr)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// SIGHUP is caught from now on: a reload (systemctl reload)
			// while a2ad starts is applied once it runs, never fatal.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			d, err := daemon.Start(ctx, cfg, log, !stdio)
			if err != nil && ctx.Err() != nil {
				// SIGTERM or SIGINT while starting (a NATS cluster not up
				// yet, say): a requested stop, not a failed start.
				log.Info("a2ad stopped while starting", "err", err)
				return nil
			}
			if err != nil {
				// In the log's own format (a JSON log stays JSON), not
				// cobra's "Error:" line; the exit status is still 1.
				log.Error("a2ad did not start", "err", err)
				cmd.SilenceErrors = true
				return err
			}
			defer d.Stop()
			log.Info("a2ad serving", "nats", daemon.RedactURLs(d.NATSURL), "mcp", mcpURL(d), "data_dir", d.Config.DataDir)
			go reloadOnHUP(ctx, d, log, hup)
			if stdio {
				err := d.MCP.Run(ctx, &mcpedge.StdioTransport{})
				if ctx.Err() == nil && err != nil {
					return err
				}
				return nil
			}
			<-ctx.Done()
			log.Info("a2ad stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML configuration file (agents, schemas, limits); flags override it")
	f.BoolVar(&stdio, "stdio", false, "serve MCP on stdin/stdout instead of HTTP (logs go to stderr)")
	f.StringVar(&o.DataDir, "data-dir", "./a2ad-data", "directory for the embedded NATS JetStream state")
	f.StringVar(&o.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address (MCP at /mcp, admin API at /v1/)")
	f.StringVar(&o.NATSListen, "nats-listen", "127.0.0.1:4222", "embedded NATS client listen address (port 0 or -1: a free one)")
	f.StringVar(&o.NATSURL, "nats-url", "", "connect to this NATS server instead of embedding one (env A2AD_NATS_URL, which keeps a password out of the process list)")
	f.StringVar(&o.SchemasDir, "schemas-dir", "", "directory of host JSON Schemas (draft-07); default: the built-in ones")
	f.StringVar(&o.TLS.CertFile, "tls-cert", "", "serve HTTP over TLS with this PEM certificate (chain); reloaded on SIGHUP (config tls.cert_file)")
	f.StringVar(&o.TLS.KeyFile, "tls-key", "", "the PEM private key of --tls-cert (config tls.key_file)")
	f.StringVar(&o.TLS.ClientCAFile, "tls-client-ca", "", "require, on the admin API, client certificates of these PEM CAs besides the token (config tls.client_ca_file)")
	f.StringVar(&o.NATSTLS.CertFile, "nats-tls-cert", "", "embedded NATS server's TLS certificate (PEM): agents must then connect over TLS (nats_tls.cert_file)")
	f.StringVar(&o.NATSTLS.KeyFile, "nats-tls-key", "", "embedded NATS server's TLS private key (PEM) (nats_tls.key_file)")
	f.StringVar(&o.NATSTLS.CAFile, "nats-ca", "", "CA certificate (PEM) that verifies the --nats-url server; TLS only (nats_tls.ca_file)")
	f.StringVar(&o.NATSTLS.ClientCertFile, "nats-client-cert", "", "client certificate (PEM) a2ad presents to the --nats-url server (nats_tls.client_cert_file)")
	f.StringVar(&o.NATSTLS.ClientKeyFile, "nats-client-key", "", "private key (PEM) of --nats-client-cert (nats_tls.client_key_file)")
	f.StringVar(&pprofAddr, "pprof-addr", "", "serve net/http/pprof on this loopback address (for a2ad bench --processes; never in production)")
	_ = f.MarkHidden("pprof-addr")
	f.BoolVar(&o.ConformanceTools, "conformance-tools", false, "add the MCP conformance suite's input-request test tools and prompt (test_input_required_result_*) for .ci/conformance; never in production")
	return cmd
}

func mcpURL(d *daemon.Daemon) string {
	if d.HTTPURL == "" {
		return "stdio"
	}
	return d.HTTPURL + "/mcp"
}

// reloadOnHUP reloads the host schemas and the HTTP listener's TLS
// certificate on each SIGHUP until ctx ends. A refused reload changes
// nothing and is logged with its reason.
func reloadOnHUP(ctx context.Context, d *daemon.Daemon, log *slog.Logger, hup <-chan os.Signal) {
	var check <-chan time.Time
	files := d.Config.CertificateFiles()
	seen := fingerprintFiles(files)
	if every := d.Config.CertificateCheckSeconds; every > 0 && len(files) > 0 {
		t := time.NewTicker(time.Duration(every) * time.Second)
		defer t.Stop()
		check = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-check:
			// Renewed in place (cert-manager, an ACME client): reloaded
			// as on SIGHUP, once the files changed.
			if now := fingerprintFiles(files); now != seen {
				seen = now
				log.Info("certificate files changed; reloading them", "files", files)
				reloadCertificates(d, log)
			}
		case <-hup:
			seen = fingerprintFiles(files)
			reloadCertificates(d, log)
			ch, err := d.ReloadSchemas()
			if err != nil {
				log.Error("host schemas not reloaded; the previous ones stay in force", "err", err)
				continue
			}
			log.Info("host schemas reloaded", "added", ch.Added, "changed", ch.Changed, "removed", ch.Removed, "unchanged", len(ch.Unchanged))
		}
	}
}

// reloadCertificates reloads the HTTP listener's and the embedded NATS
// server's certificates; a refused reload keeps the one in force and says
// why.
func reloadCertificates(d *daemon.Daemon, log *slog.Logger) {
	if cert, err := d.ReloadTLS(); err == nil {
		log.Info("TLS certificate reloaded; new connections use it", daemon.CertificateLogAttrs(cert)...)
	} else if !errors.Is(err, daemon.ErrNoTLS) {
		log.Error("TLS certificate not reloaded; the previous one stays in force", "err", err)
	}
	reloadNATSCertificate(d, log)
}

// fingerprintFiles is a SHA-256 of the files' contents (an unreadable
// file counts as its error), to see that a renewal rewrote them.
func fingerprintFiles(files []string) string {
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			b = []byte("unreadable: " + err.Error())
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
