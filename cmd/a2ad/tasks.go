package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/a2ad/a2ad/task"
	"github.com/spf13/cobra"
)

// adminFlags are the flags of the commands that talk to the admin API.
type adminFlags struct {
	server, token, dataDir string
	asJSON                 bool
}

// bind adds the flags to cmd; the server defaults, once parsed, to the
// address the daemon of --data-dir serves.
func (f *adminFlags) bind(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.server, "server", os.Getenv("A2AD_SERVER"), "a2ad HTTP base URL (env A2AD_SERVER; default: the address the daemon of --data-dir serves, else http://127.0.0.1:8080)")
	pf.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	pf.StringVar(&f.token, "token", os.Getenv("A2AD_TOKEN"), "bearer token with scope a2a:admin (env A2AD_TOKEN); default: minted with --data-dir's development key")
	pf.StringVar(&f.dataDir, "data-dir", "./a2ad-data", "data directory of the daemon, for its development key")
	cmd.PersistentPreRun = func(*cobra.Command, []string) {
		if f.server == "" {
			f.server = cmp.Or(serverOf(f.dataDir), "http://127.0.0.1:8080")
		}
	}
}

// get and call send a request to the admin API (see callJSON).
func (f *adminFlags) get(path string, v any) ([]byte, error) {
	return callJSON("GET", f.server, f.token, f.dataDir, path, nil, v)
}

func (f *adminFlags) call(method, path string, body, v any) ([]byte, error) {
	return callJSON(method, f.server, f.token, f.dataDir, path, body, v)
}

func newTasks() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "Show delegated tasks of the running daemon (admin API)",
	}
	f.bind(cmd)
	list := &cobra.Command{
		Use:   "list",
		Short: "List every task: id, state, agent, age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out struct {
				Tasks []task.Record `json:"tasks"`
			}
			raw, err := f.get("/v1/tasks", &out)
			if err != nil {
				return err
			}
			if f.asJSON {
				_, err := cmd.OutOrStdout().Write(raw)
				return err
			}
			return printTaskTable(cmd.OutOrStdout(), out.Tasks, time.Now())
		},
	}
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show one task with its transition history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rec task.Record
			raw, err := f.get("/v1/tasks/"+url.PathEscape(args[0]), &rec)
			if err != nil {
				return err
			}
			if f.asJSON {
				_, err := cmd.OutOrStdout().Write(raw)
				return err
			}
			return printTask(cmd.OutOrStdout(), &rec, time.Now())
		},
	}
	cmd.AddCommand(list, get)
	return cmd
}

// callJSON sends method with an optional JSON body to the admin API and
// decodes the answer into v; it returns the raw answer for --json.
func callJSON(method, server, token, dataDir, path string, body any, v any) ([]byte, error) {
	tok, err := adminToken(server, token, dataDir)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimRight(server, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach a2ad at %s (is `a2ad serve` running?): %w", server, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
			return nil, fmt.Errorf("%s: %s", e.Error.Code, e.Error.Message)
		}
		return nil, fmt.Errorf("a2ad answered %s", resp.Status)
	}
	return raw, json.Unmarshal(raw, v)
}

func printTaskTable(w io.Writer, recs []task.Record, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tAGENT\tSKILL\tTENANT\tAGE\tREASON")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.AgentID, r.Skill, r.Tenant, age(now, r.CreatedAt), r.Reason)
	}
	return tw.Flush()
}

func printTask(w io.Writer, r *task.Record, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Task:\t%s\n", r.ID)
	fmt.Fprintf(tw, "State:\t%s\n", r.State)
	if r.Reason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", r.Reason)
	}
	fmt.Fprintf(tw, "Agent:\t%s (skill %s, agent task %s)\n", r.AgentID, r.Skill, r.AgentTaskID)
	fmt.Fprintf(tw, "Tenant:\t%s (subject %s)\n", r.Tenant, r.Subject)
	fmt.Fprintf(tw, "Age:\t%s (created %s)\n", age(now, r.CreatedAt), r.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(tw, "Deadline:\t%s\n", r.Deadline.Format(time.RFC3339))
	fmt.Fprintf(tw, "Brief:\t%s (schema %s)\n", r.BriefDigest, r.OutputSchema)
	if r.Question != "" {
		fmt.Fprintf(tw, "Question:\t%q\n", r.Question)
	}
	for _, v := range r.Verdicts {
		verdict := "valid"
		if !v.Valid {
			verdict = "rejected"
			for _, x := range v.Violations {
				verdict += fmt.Sprintf(" %s(%s)", x.Pointer, x.Keyword)
			}
		}
		fmt.Fprintf(tw, "Artifact:\t%s %s\n", v.ArtifactID, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "History:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tEVENT\tFROM\tTO\tSOURCE\tNOTE")
	for _, h := range r.History {
		note := h.Reason
		if h.Refused && !strings.HasPrefix(note, "refused") {
			note = "refused " + note
		}
		from := string(h.From)
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", h.At.Format("15:04:05.000"), h.Event, from, h.To, h.Source, note)
	}
	return tw.Flush()
}

func age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
