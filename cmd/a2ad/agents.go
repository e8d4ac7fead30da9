package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func newAgents() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Show, approve and quarantine agents of the running daemon, and mint and revoke their credentials (admin API)",
	}
	f.bind(cmd)
	out := func(c *cobra.Command, raw []byte, rec *agentcard.Record) error {
		if f.asJSON {
			_, err := c.OutOrStdout().Write(raw)
			return err
		}
		return printAgent(c.OutOrStdout(), rec)
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List every registered agent: status, delegable, fingerprint, flagged card fields",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var res struct {
				Agents []agentcard.Record `json:"agents"`
			}
			raw, err := f.get("/v1/agents", &res)
			if err != nil {
				return err
			}
			if f.asJSON {
				_, err := c.OutOrStdout().Write(raw)
				return err
			}
			return printAgents(c.OutOrStdout(), res.Agents)
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one agent: status, current and approved fingerprints, its card",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var rec agentcard.Record
			raw, err := f.get("/v1/agents/"+url.PathEscape(args[0]), &rec)
			if err != nil {
				return err
			}
			return out(c, raw, &rec)
		},
	}
	var fingerprint string
	approve := &cobra.Command{
		Use:   "approve ID --fingerprint sha256:…",
		Short: "Approve the agent's current card; the fingerprint must be the one you reviewed (from show)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var rec agentcard.Record
			raw, err := f.call("POST", "/v1/agents/"+url.PathEscape(args[0])+"/approve",
				map[string]string{"fingerprint": fingerprint}, &rec)
			if err != nil {
				return err
			}
			return out(c, raw, &rec)
		},
	}
	approve.Flags().StringVar(&fingerprint, "fingerprint", "", "the card fingerprint to approve (required)")
	_ = approve.MarkFlagRequired("fingerprint")
	var reason string
	quarantine := &cobra.Command{
		Use:   "quarantine ID [--reason R]",
		Short: "Stop delegations to the agent until its card is approved again (open tasks go on)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var rec agentcard.Record
			raw, err := f.call("POST", "/v1/agents/"+url.PathEscape(args[0])+"/quarantine",
				map[string]string{"reason": reason}, &rec)
			if err != nil {
				return err
			}
			return out(c, raw, &rec)
		},
	}
	quarantine.Flags().StringVar(&reason, "reason", "", "why (default: quarantined by operator)")
	var ttl time.Duration
	var natsURL, natsCA, outPath string
	var replicas int
	var force bool
	credential := &cobra.Command{
		Use:   "credential ID --out FILE|- [--force] [--ttl 2160h]",
		Short: "Mint the agent's NATS identity: a credential for agent id ID, written to --out FILE (mode 0600) or, with --out -, stdout",
		Long: `Mint an agent credential: a JWT signed by a2ad whose subject is the agent id.
The agent presents it as its NATS connection token (on the embedded server it
then gets its own subjects only: docs/nats-binding.md §10) and with its
registration (Authorization: Bearer). Anyone holding it can act as the agent:
store it like a password. It expires after --ttl (default 90 days, at most 400).

--out FILE writes it to a new file readable by its owner only (mode 0600); an
existing file is refused unless --force, which replaces it (written aside and
renamed: never half-written). --out - writes it to stdout, for a pipe or a
secret store; a plain redirect would leave it in a file of mode 0644. Its jti
is printed on stderr (with --json, the answer without the credential when it
went to a file) and recorded in the audit trail:
` + "`a2ad agents revoke ID --credential JTI`" + ` revokes that one credential before it expires.

  a2ad agents credential fraud-review --out fraud-review.jwt
  fraud-review-agent --credential-file fraud-review.jwt`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if ttl < 0 || ttl > agentcred.MaxTTL {
				return usageError("--ttl %s: want 0 (default 2160h) up to %s", ttl, agentcred.MaxTTL)
			}
			if outPath == "" {
				return usageError("agents credential: pass --out FILE (written with mode 0600) or --out - (stdout): a credential is a secret, and a redirect of stdout leaves it in a file others may read")
			}
			// The file is claimed before anything is minted: a refusal
			// mints nothing and records nothing.
			out, err := openSecretFile(outPath, force)
			if err != nil {
				return err
			}
			defer out.abort()
			var res admin.Credential
			var raw []byte
			if natsURL != "" {
				res, err = mintDirect(c.Context(), c.ErrOrStderr(), natsURL, natsCA, f.dataDir, replicas, args[0], ttl)
				if err == nil {
					raw, err = json.MarshalIndent(res, "", "  ")
					raw = append(raw, '\n')
				}
			} else {
				raw, err = f.call("POST", "/v1/agents/"+url.PathEscape(args[0])+"/credential",
					map[string]int64{"ttl_seconds": int64(ttl / time.Second)}, &res)
			}
			if err != nil {
				return err
			}
			if outPath == "-" {
				if f.asJSON {
					_, err := c.OutOrStdout().Write(raw)
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "credential for agent %s, jti %s, expires %s\n", res.AgentID, res.JTI, res.ExpiresAt.Format(time.RFC3339))
				_, err = fmt.Fprintln(c.OutOrStdout(), res.Credential)
				return err
			}
			if err := out.commit(res.Credential+"\n", res.JTI); err != nil {
				return err
			}
			if f.asJSON {
				return writeIndented(c.OutOrStdout(), credentialFile{AgentID: res.AgentID, JTI: res.JTI, ExpiresAt: res.ExpiresAt, File: outPath})
			}
			fmt.Fprintf(c.ErrOrStderr(), "credential for agent %s, jti %s, expires %s, written to %s (mode 0600)\n", res.AgentID, res.JTI, res.ExpiresAt.Format(time.RFC3339), outPath)
			return nil
		},
	}
	credential.Flags().StringVarP(&outPath, "out", "o", "", "write the credential to this new file, mode 0600 (required; - for stdout)")
	credential.Flags().BoolVar(&force, "force", false, "with --out FILE: replace the file if it exists")
	credential.Flags().DurationVar(&ttl, "ttl", 0, "lifetime (default 2160h = 90 days; at most 9600h = 400 days)")
	credential.Flags().StringVar(&natsURL, "nats-url", "", "mint without the admin API, with the key a2ad keeps in NATS (for stdio-only set-ups); needs a2ad's NATS user: in the URL, or the embedded server's from --data-dir")
	credential.Flags().StringVar(&natsCA, "nats-ca", "", "with --nats-url: the CA certificate (PEM) that verifies the NATS server over TLS (the issuer of nats_tls.cert_file)")
	credential.Flags().IntVar(&replicas, "replicas", 1, "with --nats-url: replicas of the a2ad_secrets bucket if this creates it (as a2ad's replicas)")
	var jti string
	var quarantineToo bool
	revoke := &cobra.Command{
		Use:   "revoke ID [--credential JTI] [--quarantine]",
		Short: "Revoke the agent's credentials before they expire, on every instance: all issued so far, or one (--credential)",
		Long: `Revoke agent credentials before their expiry. Without --credential, every
credential of agent ID issued until now is revoked; one minted afterwards works.
With --credential JTI, only the credential with that jti (printed by
` + "`a2ad agents credential`" + `, and in its agent.credential_issued audit record).

Every a2ad instance on the NATS account applies it within a moment: the
credential is refused at registration, and at connect to the embedded NATS
server or to an external one whose auth callout a2ad serves
(nats_auth_callout), where its live connections are closed too (on an
external server, through nats_auth_callout.system_url). Where agents connect
to an external server with NATS users of their own, a2ad cannot close their
connections: revoking all of an agent's credentials there quarantines it;
remove or rotate its NATS user too (docs/operations.md). --quarantine also
quarantines the agent: no new delegation goes to it until its card is
approved again.

  a2ad agents revoke fraud-review
  a2ad agents revoke fraud-review --credential 3f1c…`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var res admin.Revocation
			raw, err := f.call("POST", "/v1/agents/"+url.PathEscape(args[0])+"/revoke",
				map[string]any{"jti": jti, "quarantine": quarantineToo}, &res)
			if err != nil {
				return err
			}
			if f.asJSON {
				_, err := c.OutOrStdout().Write(raw)
				return err
			}
			if res.JTI != "" {
				fmt.Fprintf(c.OutOrStdout(), "revoked credential %s of agent %s\n", res.JTI, res.AgentID)
			} else if res.RevokedBefore != nil {
				fmt.Fprintf(c.OutOrStdout(), "revoked every credential of agent %s issued before %s\n", res.AgentID, res.RevokedBefore.UTC().Format(time.RFC3339))
			}
			if res.Quarantined {
				fmt.Fprintf(c.OutOrStdout(), "agent %s quarantined\n", res.AgentID)
			}
			return nil
		},
	}
	revoke.Flags().StringVar(&jti, "credential", "", "the jti of the one credential to revoke (default: every credential issued so far)")
	revoke.Flags().BoolVar(&quarantineToo, "quarantine", false, "quarantine the agent too: no new delegation goes to it until its card is approved again")
	cmd.AddCommand(list, show, approve, quarantine, credential, revoke, newCheckCard(&f))
	return cmd
}

// credentialFile is `agents credential --out FILE --json`: the answer of
// the admin API without the credential, and the file that holds it.
type credentialFile struct {
	AgentID   string    `json:"agent_id"`
	JTI       string    `json:"jti"`
	ExpiresAt time.Time `json:"expires_at"`
	File      string    `json:"file"`
}

// secretFile is a file claimed for a secret before it is known: commit
// writes it (mode 0600), abort removes what commit did not finish. For
// "-" (stdout) both do nothing.
type secretFile struct {
	path, tmp string
	f         *os.File
	done      bool
}

// openSecretFile claims path: a new file (O_EXCL, mode 0600), or with
// force a temporary file beside it that commit renames over it. An
// existing file without force is refused with code file_exists.
func openSecretFile(path string, force bool) (*secretFile, error) {
	if path == "-" {
		return &secretFile{done: true}, nil
	}
	s := &secretFile{path: path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, codedError("file_not_written", fmt.Errorf("--out %s: a directory; the credential was not minted (name a file)", path))
	}
	var err error
	if force {
		s.f, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
		if err == nil {
			s.tmp = s.f.Name()
			err = s.f.Chmod(0o600)
		}
	} else {
		s.f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil, codedError("file_exists", fmt.Errorf("--out %s: the file exists; the credential was not minted (pass --force to replace it, or another file)", path))
	case err != nil:
		s.abort()
		return nil, codedError("file_not_written", fmt.Errorf("--out %s: cannot create the file: %w", path, unwrapPath(err)))
	}
	return s, nil
}

// commit writes content; jti names, in the error, the credential lost
// when it cannot be written (for `a2ad agents revoke`).
func (s *secretFile) commit(content, jti string) error {
	if s.done {
		return nil
	}
	_, err := s.f.WriteString(content)
	if err == nil {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && s.tmp != "" {
		err = os.Rename(s.tmp, s.path)
	}
	if err != nil {
		return codedError("file_not_written", fmt.Errorf("--out %s: not written, the credential is lost (revoke its jti %s): %w", s.path, jti, unwrapPath(err)))
	}
	s.done = true
	return nil
}

func (s *secretFile) abort() {
	if s.done {
		return
	}
	s.done = true
	if s.f != nil {
		_ = s.f.Close()
		_ = os.Remove(cmp.Or(s.tmp, s.path))
	}
}

// unwrapPath is the reason of an *fs.PathError without the path (the
// message names it already).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// printAgents is `agents list`: one agent a line; REACHABLE is whether
// the daemon answering reaches the agent over its binding now (reachable,
// offline, or unknown: not probed yet); BINDING is how a2ad reaches an
// approved agent (nats, JSONRPC, HTTP+JSON; empty when it has no usable
// interface or is not approved); WARNINGS is the number of card fields
// phrased as instructions to a model (`agents show` says which).
func printAgents(w io.Writer, agents []agentcard.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATUS\tDELEGABLE\tREACHABLE\tBINDING\tFINGERPRINT\tWARNINGS\tREASON")
	for _, a := range agents {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%d\t%s\n", a.AgentID, a.Status, a.Delegable, reachability(a.Liveness), a.Binding, a.Fingerprint, len(a.Warnings), cmp.Or(a.StatusReason, a.NotDelegableReason))
	}
	return tw.Flush()
}

// reachability is an agent's liveness as the CLI shows it: "unknown"
// when the daemon has not probed it.
func reachability(l agentcard.Liveness) string {
	return cmp.Or(string(l.Reachability), string(agentcard.ReachabilityUnknown))
}

func printAgent(w io.Writer, a *agentcard.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Agent:\t%s\n", a.AgentID)
	fmt.Fprintf(tw, "Status:\t%s\n", a.Status)
	if a.StatusReason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", a.StatusReason)
	}
	fmt.Fprintf(tw, "Delegable:\t%v\n", a.Delegable)
	if a.NotDelegableReason != "" {
		fmt.Fprintf(tw, "Not delegable:\t%s\n", a.NotDelegableReason)
	}
	fmt.Fprintf(tw, "Reachable:\t%s", reachability(a.Liveness))
	if l := a.Liveness; !l.Since.IsZero() {
		fmt.Fprintf(tw, " since %s", l.Since.UTC().Format(time.RFC3339))
	}
	if l := a.Liveness; !l.CheckedAt.IsZero() {
		fmt.Fprintf(tw, " (checked %s)", l.CheckedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(tw)
	if a.Binding != "" && a.Interface != nil {
		// The interface URL is the card's, checked as a URL: shown quoted if
		// it holds anything a line should not.
		fmt.Fprintf(tw, "Binding:\t%s %s\n", a.Binding, shownText(a.Interface.URL))
	}
	if a.CardOrigin != "" {
		fmt.Fprintf(tw, "Card origin:\t%s\n", a.CardOrigin)
	}
	fmt.Fprintf(tw, "Fingerprint:\t%s\n", a.Fingerprint)
	fmt.Fprintf(tw, "Approved:\t%s\n", cmp.Or(a.ApprovedFingerprint, "-"))
	fmt.Fprintf(tw, "Tenants:\t%v\n", a.Tenants)
	if a.SignatureVerified {
		fmt.Fprintf(tw, "Signature:\tverified with a pinned key, over the %s payload of the card %s\n", a.SignaturePayload, cmp.Or(a.SignedForm, "as received"))
	}
	if r := a.LastRefusal; r != nil {
		fmt.Fprintf(tw, "Last refused:\t%s (%s, %s)\n", r.Reason, r.Source, r.At.Format(time.RFC3339))
	}
	if len(a.Changes) > 0 {
		fmt.Fprintf(tw, "Changed:\t%s (from the approved card; --json shows both)\n", strings.Join(a.Changes, ", "))
	}
	for _, n := range a.Notes {
		fmt.Fprintf(tw, "Note:\t%s: %s\n", shownPointer(n.Pointer), n.Reason)
	}
	for _, n := range a.AuthWarnings {
		fmt.Fprintf(tw, "Warning:\t%s: %s\n", shownPointer(n.Pointer), n.Reason)
	}
	// Where and what kind only: the card below shows the text, as data.
	for _, w := range a.Warnings {
		fmt.Fprintf(tw, "Warning:\tcard text phrased as instructions to a model at %s (%s)\n", w.Pointer, w.Kind)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(a.Card) == 0 {
		_, err := fmt.Fprintln(w, "Card:\t(none registered yet)")
		return err
	}
	// The card is the agent's own text: shown as data, as it was registered.
	var card bytes.Buffer
	if json.Indent(&card, a.Card, "", "  ") != nil {
		card.Reset()
		card.Write(a.Card)
	}
	_, err := fmt.Fprintf(w, "Card:\n%s\n", card.Bytes())
	return err
}

// mintDirect mints a credential with the shared key read from NATS (the
// a2ad_secrets bucket), as a2ad itself does: for set-ups with no HTTP
// listener. On the embedded server it connects as user a2ad with the
// password in dataDir, unless the URL names a user; caFile, if set,
// verifies the server over TLS.
func mintDirect(ctx context.Context, stderr io.Writer, natsURL, caFile, dataDir string, replicas int, id string, ttl time.Duration) (admin.Credential, error) {
	opts := []nats.Option{nats.Name("a2ad agents credential"), nats.CustomInboxPrefix(embedded.DaemonInboxPrefix), nats.Timeout(5 * time.Second)}
	if caFile != "" {
		opts = append(opts, nats.RootCAs(caFile))
	}
	if u, err := url.Parse(strings.Split(natsURL, ",")[0]); err == nil && u.User == nil {
		if pw, err := os.ReadFile(daemon.DaemonPasswordPath(dataDir)); err == nil {
			opts = append(opts, nats.UserInfo(embedded.DaemonUser, strings.TrimSpace(string(pw))))
		}
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			return admin.Credential{}, fmt.Errorf("NATS %s: %w (a2ad's NATS user is needed: in the URL, or --data-dir of the daemon that embeds this server)", natsURL, err)
		}
		if errors.Is(err, nats.ErrTLS) && caFile == "" {
			return admin.Credential{}, fmt.Errorf("NATS %s: %w (give the CA that issued the server's certificate with --nats-ca FILE)", natsURL, err)
		}
		return admin.Credential{}, fmt.Errorf("NATS %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return admin.Credential{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keys, err := daemon.AgentKeys(ctx, js, replicas)
	if err != nil {
		return admin.Credential{}, err
	}
	// Minted past a revocation of the agent's credentials, as a2ad mints.
	before, revoked, err := daemon.AgentRevokedBefore(ctx, js, id)
	if err != nil {
		return admin.Credential{}, err
	}
	if revoked {
		r := &agentcred.Revocations{}
		r.SetAgent(id, before)
		keys.SetRevocations(r)
	}
	tok, c, err := keys.MintClaims(id, ttl, time.Now())
	if err != nil {
		return admin.Credential{}, err
	}
	// Recorded as the admin API records it; the operator is who holds
	// a2ad's NATS user here, with no token subject to name.
	exp := c.Expires
	rec := audit.Record{Kind: audit.KindAgentCredential, Actor: audit.Actor{Type: audit.ActorOperator, Subject: "nats-cli"},
		AgentID: id, ExpiresAt: &exp, JTI: c.ID}
	switch err := audit.Write(ctx, js, rec, "a2ad agents credential"); {
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		// No audit stream yet: a2ad has not run on this NATS (it creates
		// the stream with its configured limits at its first start).
		fmt.Fprintf(stderr, "warning: credential for agent %s (jti %s) not recorded in the audit trail: no audit stream on this NATS yet (a2ad has not started on it)\n", id, c.ID)
	case err != nil:
		return admin.Credential{}, fmt.Errorf("credential not issued: %w", err)
	}
	return admin.Credential{AgentID: id, Credential: tok, ExpiresAt: c.Expires.UTC(), JTI: c.ID}, nil
}

// shownText is card text as a line may show it: quoted unless it is plain
// printable text without spaces.
func shownText(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s || strings.ContainsAny(s, " \t") {
		return q
	}
	return s
}
