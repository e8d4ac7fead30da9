package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/a2ad/a2ad/mcpedge"
	"github.com/spf13/cobra"
)

// consoleSubject is the sub of the token `a2ad console` mints with the
// development key: the operator the admin API and the audit name.
const consoleSubject = "a2ad-console"

func newConsole() *cobra.Command {
	var f adminFlags
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Print a one-time login link to the running daemon's web console",
		Long: "Asks the daemon (POST /console/api/code, with an admin token) for a one-time login code and prints the link\n" +
			"SERVER/console/login#code=CODE. The code works once, within 60 s, and is not the token; the session it opens\n" +
			"lasts as long as the token (at most 8 h). The code is in the fragment, which the browser never sends in a request\n" +
			"line (nor to a log); the login page posts it. Without --token, a token with scope a2a:admin and sub " + consoleSubject + "\n" +
			"(or --as NAME) is minted with --data-dir's development key for --ttl. With --json it prints {\"url\",\"expires_at\"}.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.token == "" {
				if ttl <= 0 || ttl > 720*time.Hour {
					return usageError("console: --ttl %s: want a duration above 0 and at most 720h", ttl)
				}
				if _, err := os.Stat(mcpedge.DevKeyPath(f.dataDir)); err != nil {
					return codedError("unauthorized", errors.New("console: the admin API needs a token with scope a2a:admin: pass --token (or A2AD_TOKEN), or --data-dir of a daemon that uses the development key"))
				}
				aud := devAudience(f.dataDir)
				if origin(aud) != origin(f.server) {
					return codedError("unauthorized", fmt.Errorf("console: the daemon of --data-dir %s serves %s, not %s: pass --server %s, or --token (or A2AD_TOKEN)",
						f.dataDir, origin(aud), origin(f.server), origin(aud)))
				}
				sub := consoleSubject
				if cmd.Flags().Changed("as") {
					sub = f.as // checked by bind's PersistentPreRunE
				}
				tok, err := mcpedge.MintDevToken(f.dataDir, aud, sub, "default", mcpedge.ScopeAdmin, ttl)
				if err != nil {
					return fmt.Errorf("console: %w", err)
				}
				f.token = tok
			}
			var out struct {
				Code      string    `json:"code"`
				ExpiresAt time.Time `json:"expires_at"`
			}
			if _, err := f.call("POST", "/console/api/code", nil, &out); err != nil {
				return fmt.Errorf("console: %w", err)
			}
			link := strings.TrimRight(f.server, "/") + "/console/login#code=" + out.Code
			if f.asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"url": link, "expires_at": out.ExpiresAt})
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), link)
			if err == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "open it within %s (it works once)\n", time.Until(out.ExpiresAt).Round(time.Second))
			}
			return err
		},
	}
	f.bind(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 8*time.Hour, "life of the token minted with the development key (the session's, at most 8h of it)")
	return cmd
}
