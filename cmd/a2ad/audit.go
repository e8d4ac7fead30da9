package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/spf13/cobra"
)

func newAudit() *cobra.Command {
	var f adminFlags
	var kind, taskID, agent, tenant, since string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit [--kind K] [--task ID] [--agent A] [--tenant T] [--since 1h|RFC3339] [--limit N]",
		Short: "Print the newest records of the audit trail, oldest first: when, what, who, tenant, task, agent, details (admin API)",
		Long: `Prints records of the audit trail (the A2AD_AUDIT JetStream stream): every
delegation with its brief digest, refused delegation, task transition, refused
transition, artifact verdict, agent registration, approval, quarantine and
credential, and every operator's cancel with its reason. Kinds: ` + strings.Join(audit.Kinds, ", ") + `;
a prefix such as "agent.>" selects a family.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for k, v := range map[string]string{"kind": kind, "task": taskID, "agent": agent, "tenant": tenant, "since": since} {
				if v != "" {
					q.Set(k, v)
				}
			}
			q.Set("limit", strconv.Itoa(limit))
			var page audit.Page
			raw, err := f.get("/v1/audit?"+q.Encode(), &page)
			if err != nil {
				return err
			}
			if f.asJSON {
				_, err := cmd.OutOrStdout().Write(raw)
				return err
			}
			if err := printAudit(cmd.OutOrStdout(), page.Records); err != nil {
				return err
			}
			if page.More {
				fmt.Fprintf(cmd.ErrOrStderr(), "older records match too: --limit (up to %d), --since or a narrower filter shows them\n", admin.MaxAuditLimit)
			}
			return nil
		},
	}
	f.bind(cmd)
	fl := cmd.Flags()
	fl.StringVar(&kind, "kind", "", "a record kind, or a prefix such as agent.>")
	fl.StringVar(&taskID, "task", "", "records of this task id")
	fl.StringVar(&agent, "agent", "", "records of this agent id")
	fl.StringVar(&tenant, "tenant", "", "records of this tenant")
	fl.StringVar(&since, "since", "", "records from this time on: an RFC 3339 time or a duration back from now (24h)")
	fl.IntVar(&limit, "limit", 100, fmt.Sprintf("records to print, 1 to %d", admin.MaxAuditLimit))
	return cmd
}

// printAudit prints one line per record.
func printAudit(w io.Writer, recs []audit.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tWHO\tTENANT\tTASK\tAGENT\tDETAILS")
	for _, r := range recs {
		who := r.Actor.Type
		if r.Actor.Subject != "" {
			who += ":" + r.Actor.Subject
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At.Local().Format(time.RFC3339), r.Kind, who,
			dash(r.Tenant), dash(r.TaskID), dash(r.AgentID), details(r))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// details is the kind-specific part of a record, on one line.
func details(r audit.Record) string {
	var d []string
	if r.From != "" || r.To != "" {
		d = append(d, fmt.Sprintf("%s→%s (%s)", dash(r.From), r.To, r.Event))
	}
	if r.Code != "" {
		d = append(d, "code="+r.Code)
	}
	if r.Field != "" {
		d = append(d, "field="+r.Field)
	}
	if r.SecretKind != "" {
		d = append(d, "secret="+r.SecretKind)
	}
	if r.Reason != "" {
		d = append(d, "reason="+strconv.Quote(r.Reason))
	}
	if r.Note != "" {
		d = append(d, "note="+strconv.Quote(r.Note))
	}
	if r.BriefDigest != "" && r.Kind != audit.KindTransition {
		d = append(d, "brief="+r.BriefDigest)
	}
	if r.Verdict != nil {
		v := "valid"
		if !r.Verdict.Valid {
			v = "invalid: " + strings.Join(r.Verdict.Violations, ", ")
		}
		d = append(d, "artifact "+r.Verdict.ArtifactID+" "+v)
	}
	if r.Status != "" {
		d = append(d, "status="+r.Status)
	}
	if r.Fingerprint != "" {
		d = append(d, "fingerprint="+r.Fingerprint)
	}
	if r.ExpiresAt != nil {
		d = append(d, "expires="+r.ExpiresAt.Format(time.RFC3339))
	}
	if r.TraceID != "" {
		d = append(d, "trace="+r.TraceID)
	}
	if r.Suppressed > 0 {
		d = append(d, "suppressed="+strconv.Itoa(r.Suppressed)) // records like it not written since the last
	}
	return strings.Join(d, " ")
}
