package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/spf13/cobra"
)

// mcpFlags are the flags of `a2ad mcp`.
type mcpFlags struct {
	url, dataDir, caFile  string
	tokenFile             string
	configPath, principal string
	subject, tenant       string
	scopes                []string
	ttl                   time.Duration
	logLevel              string
}

func newMCP() *cobra.Command {
	var f mcpFlags
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve MCP on stdio for an IDE host, forwarding to the running daemon's /mcp (no NATS, no password)",
		Long: `a2ad mcp is the stdio MCP server an IDE host starts (one per window): it forwards
every message to a running a2ad's Streamable HTTP endpoint (/mcp) with a host token,
so any number of windows share one daemon, its agents, its tasks and its admin API.
It holds no NATS connection and no password; the daemon authorizes every call by the token.

Where the daemon is: --url, else the MCP URL the daemon on --data-dir recorded at
start (DATA_DIR/auth/audience), looked up again at each new connection.

The host token, one of:
  --token-file FILE           read at each request (a rotated token is used at once)
  --principal NAME --config F a principal of the daemon's config (principals: NAME: …)
  --subject S [--tenant T] [--scope "…"]
  (none)                      the stdio principal of --config (principal:), else
                              subject local, tenant default, scopes a2a:read a2a:delegate
Minted tokens are signed with --data-dir's development key for the daemon's
audience, live --ttl and are minted again before they expire.

Logs go to stderr; stdout carries only MCP messages. If the daemon is down or refuses
the token, the host gets a JSON-RPC error naming the fix and a2ad mcp keeps running:
the next request connects again.

Host configuration (VS Code, Claude Desktop, Cursor):
  {"mcpServers":{"a2ad":{"command":"a2ad","args":["mcp","--data-dir","/path/to/a2ad-data"]}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := f.bridge(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return b.Run(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", os.Getenv("A2AD_MCP_URL"), "the daemon's MCP URL, e.g. https://a2ad.example.com/mcp (env A2AD_MCP_URL; default: the one the daemon on --data-dir serves)")
	fl.StringVar(&f.dataDir, "data-dir", "./a2ad-data", "data directory of the daemon: where it is (auth/audience) and its development key")
	fl.StringVar(&f.caFile, "ca", os.Getenv("A2AD_CA_FILE"), "PEM CA certificates to verify an https daemon with, besides the system's (env A2AD_CA_FILE)")
	fl.StringVar(&f.tokenFile, "token-file", os.Getenv("A2AD_TOKEN_FILE"), "file holding the host's bearer token, read at each request (env A2AD_TOKEN_FILE)")
	fl.StringVar(&f.configPath, "config", "", "the daemon's YAML configuration, for --principal (and the default principal:)")
	fl.StringVar(&f.principal, "principal", "", "mint tokens for this principal of --config's principals:")
	fl.StringVar(&f.subject, "subject", "", "mint tokens for this subject (sub claim)")
	fl.StringVar(&f.tenant, "tenant", "default", "tenant of --subject's tokens")
	fl.StringArrayVar(&f.scopes, "scope", []string{"a2a:read a2a:delegate"}, "scopes of --subject's tokens, space-separated; repeat for more")
	fl.DurationVar(&f.ttl, "ttl", 10*time.Minute, "lifetime of each minted token (1m to 24h); minted again before it ends")
	fl.StringVar(&f.logLevel, "log-level", "info", "stderr log level: debug, info, warn, error")
	return cmd
}

// bridge checks the flags and builds the bridge; every fault names its
// flag.
func (f *mcpFlags) bridge(cmd *cobra.Command) (*mcpedge.Bridge, error) {
	fl := cmd.Flags()
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("mcp: --log-level %q: want debug, info, warn or error", f.logLevel)
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	minting := f.principal != "" || fl.Changed("subject") || fl.Changed("tenant") || fl.Changed("scope")
	switch {
	case f.tokenFile != "" && minting:
		return nil, errors.New("mcp: --token-file and --principal/--subject/--tenant/--scope are two sources of the host token: give one")
	case f.principal != "" && fl.Changed("subject"):
		return nil, errors.New("mcp: --principal and --subject both name the principal: give one")
	case f.principal != "" && f.configPath == "":
		return nil, fmt.Errorf("mcp: --principal %s needs --config FILE, the daemon's configuration whose principals: names it", f.principal)
	case fl.Changed("subject") && strings.TrimSpace(f.subject) == "":
		return nil, errors.New("mcp: --subject is blank: name who the host is (the sub claim)")
	case f.ttl < time.Minute || f.ttl > 24*time.Hour:
		return nil, fmt.Errorf("mcp: --ttl %s: want 1m to 24h", f.ttl)
	}
	tlsCfg, err := adminTLS(f.caFile, "", "")
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	b := &mcpedge.Bridge{
		Client:    &http.Client{Transport: tr},
		Log:       log,
		StartHint: fmt.Sprintf("start the daemon (a2ad serve --data-dir %s)", f.dataDir),
	}
	if f.url != "" {
		if err := checkMCPURL(f.url); err != nil {
			return nil, fmt.Errorf("mcp: --url %q: %w", f.url, err)
		}
		b.Endpoint = f.url
		b.StartHint = "start the daemon that serves " + f.url
	} else {
		dir := f.dataDir
		b.Locate = func() (string, error) { return locateDaemon(dir) }
	}
	if f.tokenFile != "" {
		b.Token = tokenFromFile(f.tokenFile)
		b.TokenHint = fmt.Sprintf("write a token the daemon accepts to %s (a2ad token mint --sub NAME > %s); it is read again at the next request", f.tokenFile, f.tokenFile)
		return b, nil
	}
	p, err := f.mintedPrincipal()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(mcpedge.DevKeyPath(f.dataDir)); err != nil {
		return nil, fmt.Errorf("mcp: no development key in %s to mint host tokens with: give the --data-dir of the daemon (a2ad serve makes the key at its first start), or --token-file with a token its auth accepts", f.dataDir)
	}
	if f.url != "" {
		// A token minted here goes only to the daemon it is for.
		if aud := devAudience(f.dataDir); origin(aud) != origin(f.url) {
			return nil, fmt.Errorf("mcp: the daemon of --data-dir %s serves %s, not --url %s: leave --url out, give the --data-dir of that daemon, or --token-file", f.dataDir, origin(aud), f.url)
		}
	}
	b.Token = mintingSource(f.dataDir, p, f.ttl)
	b.TokenHint = fmt.Sprintf("check that the daemon of --data-dir %s verifies tokens with its development key (no auth: configured) and that principal %q has the scopes the call needs, or use --token-file", f.dataDir, p.Subject)
	return b, nil
}

// mintedPrincipal is the principal minted tokens name: --principal from
// --config's principals, --subject, or the config's stdio principal.
func (f *mcpFlags) mintedPrincipal() (daemon.PrincipalConfig, error) {
	var cfg daemon.Config
	if f.configPath != "" {
		var err error
		if cfg, err = daemon.LoadConfig(f.configPath); err != nil {
			return daemon.PrincipalConfig{}, fmt.Errorf("mcp: --config: %w", err)
		}
	}
	var p daemon.PrincipalConfig
	switch {
	case f.principal != "":
		var ok bool
		if p, ok = cfg.Principals[f.principal]; !ok {
			names := make([]string, 0, len(cfg.Principals))
			for n := range cfg.Principals {
				names = append(names, n)
			}
			slices.Sort(names)
			if len(names) == 0 {
				return p, fmt.Errorf("mcp: --principal %s: %s has no principals: section; add one (principals: {%s: {tenant: default, scopes: [a2a:read, a2a:delegate]}})", f.principal, f.configPath, f.principal)
			}
			return p, fmt.Errorf("mcp: --principal %s: not in %s's principals: (it names %s)", f.principal, f.configPath, strings.Join(names, ", "))
		}
		if p.Subject == "" {
			p.Subject = f.principal
		}
	case f.subject != "":
		scope, err := mintScope(f.scopes)
		if err != nil {
			return p, fmt.Errorf("mcp: %s", strings.TrimPrefix(err.Error(), "token mint: "))
		}
		p = daemon.PrincipalConfig{Subject: strings.TrimSpace(f.subject), Tenant: f.tenant, Scopes: strings.Fields(scope)}
	default:
		p = cfg.Principal
		if p.Subject == "" {
			p.Subject = "local"
		}
	}
	if p.Tenant == "" {
		p.Tenant = "default"
	}
	if len(p.Scopes) == 0 {
		p.Scopes = []string{mcpedge.ScopeRead, mcpedge.ScopeDelegate}
	}
	if err := mcpedge.CheckScopes(p.Scopes); err != nil {
		return p, fmt.Errorf("mcp: scopes of principal %s: %w", p.Subject, err)
	}
	return p, nil
}

// checkMCPURL refuses what cannot be a daemon's MCP URL.
func checkMCPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL of the daemon's /mcp, e.g. http://127.0.0.1:8080/mcp")
	case u.Host == "":
		return errors.New("no host: want e.g. http://127.0.0.1:8080/mcp")
	case u.User != nil:
		return errors.New("credentials in the URL are not sent: give the token with --token-file")
	case u.Scheme == "http" && !mcpedge.LoopbackHost(u.Hostname()):
		// The bridge sends a bearer token with every request.
		return errors.New("http:// is plain text and the host token would cross the network readable: use the daemon's https:// URL (with --ca for a private CA), or http:// on loopback only")
	}
	return nil
}

// locateDaemon is the MCP URL the daemon on dataDir recorded at start.
func locateDaemon(dataDir string) (string, error) {
	p := filepath.Join(dataDir, "auth", "audience")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("no a2ad daemon has served from --data-dir %s (%s is missing; the daemon writes it at start when it verifies tokens with its development key); pass --url with the daemon's MCP URL otherwise", dataDir, p)
	}
	u := string(bytes.TrimSpace(b))
	if checkMCPURL(u) != nil {
		return "", fmt.Errorf("the daemon of --data-dir %s verifies the audience %q, which is not its URL: pass --url with the daemon's MCP URL", dataDir, u)
	}
	return u, nil
}

// maxTokenFile bounds what is read of a token file.
const maxTokenFile = 64 << 10

// tokenFromFile reads the token in path at each request; a file that is
// missing, empty or not one line of token characters is an error naming
// it.
func tokenFromFile(path string) mcpedge.TokenSource {
	return func() (string, error) {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		defer f.Close()
		// A pipe or a device (a symlink to /dev/zero) has no size to
		// check: only a regular file is read, and never past the bound.
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("--token-file %s is not a regular file: write the token to a file", path)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		if len(b) > maxTokenFile {
			return "", fmt.Errorf("--token-file %s holds more than %d bytes; a token is at most that", path, maxTokenFile)
		}
		tok := strings.TrimSpace(string(b))
		switch {
		case tok == "":
			return "", fmt.Errorf("--token-file %s is empty", path)
		case strings.ContainsAny(tok, " \t\r\n"):
			return "", fmt.Errorf("--token-file %s holds more than one token: want the token alone", path)
		case strings.HasPrefix(strings.ToLower(tok), "bearer"):
			return "", fmt.Errorf("--token-file %s starts with Bearer: want the token alone", path)
		}
		return tok, nil
	}
}

// mintingSource mints tokens for p with dataDir's development key, for
// the audience the daemon there verifies (read again at each mint, so a
// daemon restarted on another port gets tokens for it), again once a
// token has less than a fifth of ttl left.
func mintingSource(dataDir string, p daemon.PrincipalConfig, ttl time.Duration) mcpedge.TokenSource {
	var mu sync.Mutex
	var tok, aud string
	var renew time.Time
	scope := strings.Join(p.Scopes, " ")
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := devAudience(dataDir)
		if tok != "" && now == aud && time.Now().Before(renew) {
			return tok, nil
		}
		t, err := mcpedge.MintDevToken(dataDir, now, p.Subject, p.Tenant, scope, ttl)
		if err != nil {
			return "", fmt.Errorf("minting with the development key of %s: %w", dataDir, err)
		}
		tok, aud, renew = t, now, time.Now().Add(ttl*4/5)
		return tok, nil
	}
}
