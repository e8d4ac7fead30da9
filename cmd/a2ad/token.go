package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/a2ad/a2ad/mcpedge"
	"github.com/spf13/cobra"
)

// defaultAudience is the audience a development token names when the data
// directory does not say which one its daemon verifies.
const defaultAudience = "http://127.0.0.1:8080/mcp"

// devAudience is the audience the daemon on dataDir verifies (written there
// at start when it uses the development key), else defaultAudience.
func devAudience(dataDir string) string {
	if b, err := os.ReadFile(filepath.Join(dataDir, "auth", "audience")); err == nil {
		if a := string(bytes.TrimSpace(b)); a != "" {
			return a
		}
	}
	return defaultAudience
}

func newToken() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Development tokens for hosts and operators"}
	var dataDir, sub, tenant, audience, keyFile, issuer string
	var scopes []string
	var ttl time.Duration
	mint := &cobra.Command{
		Use:   "mint",
		Short: "Print a development JWT signed with the data directory's key",
		Long: "Prints a JWT (EdDSA) signed with the development key in the data directory (which `a2ad serve` makes at its first start),\n" +
			"for a daemon that has no other key source configured. Send it as `Authorization: Bearer <token>`.\n" +
			"Scopes: a2a:read (agents_list, task_get), a2a:delegate (delegate, task_respond, task_cancel), a2a:admin (/v1/).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scope, err := mintScope(scopes)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("audience") && strings.TrimSpace(audience) == "" {
				return errors.New("token mint: --audience is blank: give the resource identifier the daemon verifies in aud (RFC 8707), e.g. https://a2ad.example.com/mcp, or leave the flag out for the daemon on --data-dir")
			}
			audience = strings.TrimSpace(audience)
			if audience == "" {
				audience = devAudience(dataDir)
			}
			var tok string
			if keyFile != "" {
				if issuer == "" {
					return errors.New("token mint: --key needs --issuer (the iss the daemon's auth config expects)")
				}
				key, kerr := mcpedge.ReadPrivateKey(keyFile)
				if kerr != nil {
					return fmt.Errorf("token mint: --key: %w", kerr)
				}
				tok, err = mcpedge.MintToken(key, issuer, audience, sub, tenant, scope, ttl)
			} else {
				if _, serr := os.Stat(mcpedge.DevKeyPath(dataDir)); serr != nil {
					return fmt.Errorf("token mint: no development key in %s: start `a2ad serve --data-dir %s` first (it makes one), or pass the --data-dir of the daemon the token is for", dataDir, dataDir)
				}
				tok, err = mcpedge.MintDevToken(dataDir, audience, sub, tenant, scope, ttl)
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	f := mint.Flags()
	f.StringVar(&dataDir, "data-dir", "./a2ad-data", "data directory holding the development key")
	f.StringVar(&sub, "sub", "", "subject (sub claim): who the host is (required)")
	f.StringVar(&tenant, "tenant", "default", "tenant claim")
	f.StringArrayVar(&scopes, "scope", []string{"a2a:read a2a:delegate"}, "scopes, space-separated; repeat the flag for more (all given are minted)")
	f.StringVar(&audience, "audience", "", "aud claim (default: what the daemon on --data-dir verifies, else "+defaultAudience+")")
	f.DurationVar(&ttl, "ttl", time.Hour, "lifetime (exp = now + ttl), at most 720h")
	f.StringVar(&keyFile, "key", "", "sign with this PEM private key (Ed25519, ECDSA P-256 or RSA) instead of the development key; for a daemon whose auth config names its public half")
	f.StringVar(&issuer, "issuer", "", "iss claim with --key (the development key always signs as "+mcpedge.DevIssuer+")")
	cmd.AddCommand(mint)
	return cmd
}

// mintScope is the scope claim of the --scope values: every scope of every
// value, in order, each once, separated by single spaces (RFC 6749 §3.3:
// scope-token *( SP scope-token ); a tab or newline would be another
// separator to some verifiers and part of the name to others). Values
// separated by commas, an unknown scope and no scope at all are refused.
func mintScope(values []string) (string, error) {
	var out []string
	for _, v := range values {
		if strings.Contains(v, ",") {
			return "", fmt.Errorf("token mint: --scope %q: scopes are separated by spaces, not commas: --scope %q, or repeat --scope for each",
				v, strings.Join(strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }), " "))
		}
		for _, s := range strings.Fields(v) {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return "", errors.New("token mint: --scope is empty: name one or more of " + strings.Join(mcpedge.KnownScopes, ", "))
	}
	if err := mcpedge.CheckScopes(out); err != nil {
		return "", fmt.Errorf("token mint: --scope: %w", err)
	}
	return strings.Join(out, " "), nil
}

// serverOf is the base URL of the daemon on dataDir, from the audience it
// recorded at start ("" if none).
func serverOf(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, "auth", "audience"))
	if err != nil {
		return ""
	}
	return origin(string(bytes.TrimSpace(b)))
}

// defaultOperator is the subject of the admin token the CLI mints when
// --as does not name the operator.
const defaultOperator = "a2ad-cli"

// operatorName is what --as takes: 1 to 64 of letters, digits and
// . _ @ -, starting with a letter or digit (an e-mail address or a login
// fits; it lands in task histories, audit records and log lines).
var operatorName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// checkOperatorName refuses an --as that operatorName does not match, as
// a usage error.
func checkOperatorName(name string) error {
	if !operatorName.MatchString(name) {
		return usageError("--as %q: want an operator name of 1 to 64 letters, digits and . _ @ -, starting with a letter or digit (e.g. alice, alice@example.com)", name)
	}
	return nil
}

// adminToken is the bearer token `a2ad tasks` sends: --token or A2AD_TOKEN,
// else a 5-minute a2a:admin token with subject operator minted with the
// development key of dataDir when it has one (an operator on the daemon's
// host).
//
// The minted token goes only to the daemon it is for: server must be the
// origin of the audience that daemon verifies.
func adminToken(server, token, dataDir, operator string) (string, error) {
	if token != "" {
		return token, nil
	}
	if _, err := os.Stat(mcpedge.DevKeyPath(dataDir)); err != nil {
		return "", codedError("unauthorized", errors.New("the admin API needs a token with scope a2a:admin: pass --token (or A2AD_TOKEN), or --data-dir of a daemon that uses the development key"))
	}
	aud := devAudience(dataDir)
	if origin(aud) != origin(server) {
		return "", codedError("unauthorized", fmt.Errorf("the daemon of --data-dir %s serves %s, not %s: pass --server %s, or --token (or A2AD_TOKEN) for %s",
			dataDir, origin(aud), origin(server), origin(aud), origin(server)))
	}
	return mcpedge.MintDevToken(dataDir, aud, operator, "default", mcpedge.ScopeAdmin, adminTokenTTL)
}

// adminTokenTTL is the life of the admin tokens the CLI mints (a test
// shortens it).
var adminTokenTTL = 5 * time.Minute

// origin is scheme://host:port of a URL ("" if it is not one).
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
