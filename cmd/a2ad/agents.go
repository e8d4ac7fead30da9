package main

import (
	"cmp"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/spf13/cobra"
)

func newAgents() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Show, approve and quarantine agents of the running daemon (admin API)",
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
		Short: "List every registered agent: status, fingerprint, delegable",
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
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tSTATUS\tDELEGABLE\tFINGERPRINT\tREASON")
			for _, a := range res.Agents {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", a.AgentID, a.Status, a.Delegable, a.Fingerprint, cmp.Or(a.StatusReason, a.NotDelegableReason))
			}
			return tw.Flush()
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
	cmd.AddCommand(list, show, approve, quarantine)
	return cmd
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
	fmt.Fprintf(tw, "Fingerprint:\t%s\n", a.Fingerprint)
	fmt.Fprintf(tw, "Approved:\t%s\n", cmp.Or(a.ApprovedFingerprint, "-"))
	fmt.Fprintf(tw, "Tenants:\t%v\n", a.Tenants)
	if len(a.Changes) > 0 {
		fmt.Fprintf(tw, "Changed:\t%s (from the approved card; --json shows both)\n", strings.Join(a.Changes, ", "))
	}
	for _, w := range a.Warnings {
		fmt.Fprintf(tw, "Warning:\tcard text phrased as instructions to a model, %s\n", w)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The card is the agent's own text: shown as data, as it was registered.
	_, err := fmt.Fprintf(w, "Card:\n%s\n", a.Card)
	return err
}
