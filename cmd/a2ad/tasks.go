package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/task"
	"github.com/spf13/cobra"
)

// adminFlags are the flags of the commands that talk to the admin API.
type adminFlags struct {
	server, token, dataDir string
	asJSON                 bool
	// as is the subject of the admin token minted with --data-dir's
	// development key: the operator's name in task histories and the
	// audit trail (--as; default a2ad-cli).
	as string
	// caFile, certFile and keyFile are the TLS of an https server: the CAs
	// to verify it with besides the system's, and a client certificate
	// (mTLS, tls.client_ca_file) — see adminTLS.
	caFile, certFile, keyFile string
}

// bind adds the flags to cmd; the server defaults, once parsed, to the
// address the daemon of --data-dir serves.
func (f *adminFlags) bind(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.server, "server", os.Getenv("A2AD_SERVER"), "a2ad HTTP base URL (env A2AD_SERVER; default: the address the daemon of --data-dir serves, else http://127.0.0.1:8080)")
	pf.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	pf.StringVar(&f.token, "token", os.Getenv("A2AD_TOKEN"), "bearer token with scope a2a:admin (env A2AD_TOKEN); default: minted with --data-dir's development key")
	pf.StringVar(&f.dataDir, "data-dir", "./a2ad-data", "data directory of the daemon, for its development key")
	pf.StringVar(&f.caFile, "ca", os.Getenv("A2AD_CA_FILE"), "PEM CA certificates to verify an https server with, besides the system's (env A2AD_CA_FILE)")
	pf.StringVar(&f.certFile, "cert", os.Getenv("A2AD_CLIENT_CERT"), "PEM client certificate for an admin API that requires one (tls.client_ca_file; env A2AD_CLIENT_CERT)")
	pf.StringVar(&f.as, "as", defaultOperator, "operator name: the subject of the admin token minted with --data-dir's key, recorded in task histories and the audit trail (with --token, its own subject is)")
	pf.StringVar(&f.keyFile, "key", os.Getenv("A2AD_CLIENT_KEY"), "PEM private key of --cert (env A2AD_CLIENT_KEY)")
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if f.server == "" {
			f.server = cmp.Or(serverOf(f.dataDir), "http://127.0.0.1:8080")
		}
		if c.Flags().Changed("as") {
			if err := checkOperatorName(f.as); err != nil {
				return err
			}
			if f.token != "" {
				return usageError("--as %s: names the operator of a token this CLI mints; --token (or A2AD_TOKEN) is used as given, and its own subject is the operator", f.as)
			}
		}
		return nil
	}
}

// showTask prints a task: the API's JSON with --json, else a table.
func (f *adminFlags) showTask(cmd *cobra.Command, raw []byte, rec *task.Record) error {
	if f.asJSON {
		_, err := cmd.OutOrStdout().Write(raw)
		return err
	}
	return printTask(cmd.OutOrStdout(), rec, time.Now())
}

// get and call send a request to the admin API (see callJSON).
func (f *adminFlags) get(path string, v any) ([]byte, error) {
	return f.callJSON("GET", path, nil, v)
}

func (f *adminFlags) call(method, path string, body, v any) ([]byte, error) {
	return f.callJSON(method, path, body, v)
}

// client is the HTTP client of the admin API: timeout 0 for a stream, TLS
// as adminTLS says.
func (f *adminFlags) client(timeout time.Duration) (*http.Client, error) {
	cfg, err := adminTLS(f.caFile, f.certFile, f.keyFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// adminTLS is the TLS of the admin CLI's connections: TLS 1.2 or later;
// the server verified with the system's CAs and those of caFile (PEM); a
// client certificate from certFile and keyFile (PEM) when given. Errors
// name the flag.
func adminTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--ca %s: want PEM CA certificates; it holds none", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case (certFile == "") != (keyFile == ""):
		return nil, errors.New("--cert and --key go together (env A2AD_CLIENT_CERT, A2AD_CLIENT_KEY)")
	case certFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert %s and --key %s: want a PEM certificate and its PEM private key (%v)", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func newTasks() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List, show, cancel and watch delegated tasks of the running daemon (admin API)",
	}
	f.bind(cmd)
	var filter taskFilterFlags
	var limit int
	var all bool
	var pageToken string
	list := &cobra.Command{
		Use:   "list [--state s1,s2] [--agent A] [--tenant T] [--older-than D] [--newer-than D] [--limit N] [--page-token T] [--all]",
		Short: "List tasks, newest first: id, state, agent, age (one page of --limit; --all for every page)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := filter.query()
			if cmd.Flags().Changed("limit") {
				q.Set("limit", strconv.Itoa(limit))
			}
			if pageToken != "" {
				q.Set("page_token", pageToken)
			}
			var tasks []*task.Record
			var page admin.TaskPage
			for {
				page = admin.TaskPage{} // an absent next_page_token must not keep the last one
				raw, err := f.get("/v1/tasks?"+q.Encode(), &page)
				if err != nil {
					return err
				}
				if f.asJSON && !all {
					_, err := cmd.OutOrStdout().Write(raw)
					return err
				}
				tasks = append(tasks, page.Tasks...)
				if !all || page.NextPageToken == "" {
					break
				}
				q.Set("page_token", page.NextPageToken)
			}
			if f.asJSON {
				if tasks == nil {
					tasks = []*task.Record{}
				}
				return writeIndented(cmd.OutOrStdout(), admin.TaskPage{Tasks: tasks})
			}
			if err := printTaskTable(cmd.OutOrStdout(), tasks, time.Now()); err != nil {
				return err
			}
			if page.NextPageToken != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more tasks match: add --page-token %s (with the same filters and --limit) for the next page, or --all for every page\n", page.NextPageToken)
			}
			return nil
		},
	}
	filter.bind(list, true)
	list.Flags().IntVar(&limit, "limit", admin.DefaultLimit, fmt.Sprintf("tasks per page, 1 to %d", admin.MaxLimit))
	list.Flags().BoolVar(&all, "all", false, "follow every next page (--limit is then the page size)")
	list.Flags().StringVar(&pageToken, "page-token", "", "the page after the one that gave this token (next_page_token; same filters and --limit)")
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
			return f.showTask(cmd, raw, &rec)
		},
	}
	var reason string
	cancel := &cobra.Command{
		Use:   "cancel ID [--reason R] [--as NAME]",
		Short: "Cancel an open task (the agent gets CancelTask): recorded as canceled_by_operator, by you, with your reason, in the task and the audit trail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rec task.Record
			raw, err := f.call("POST", "/v1/tasks/"+url.PathEscape(args[0])+"/cancel", map[string]string{"reason": reason}, &rec)
			if err != nil {
				return err
			}
			return f.showTask(cmd, raw, &rec)
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why: kept in the task's history (note) and its audit record (at most 1024 bytes)")
	var watchFilter taskFilterFlags
	watch := &cobra.Command{
		Use:   "watch [--state s1,s2] [--agent A] [--tenant T]",
		Short: "Print each task change as it happens (time, task, state, agent, reason) until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			for {
				err := f.watch(ctx, watchFilter.query(), cmd.OutOrStdout(), cmd.ErrOrStderr())
				if !errors.Is(err, errWatchTokenExpired) || f.token != "" {
					return err
				}
				// The token this CLI minted expired (every admin stream
				// ends then): mint another and watch on.
				fmt.Fprintln(cmd.ErrOrStderr(), "the watch's token expired; watching on with a fresh one")
			}
		},
	}
	watchFilter.bind(watch, false)
	cmd.AddCommand(list, get, cancel, watch)
	return cmd
}

// taskFilterFlags are the filters of tasks list and watch.
type taskFilterFlags struct {
	states               []string
	agent, tenant        string
	olderThan, newerThan time.Duration
}

func (t *taskFilterFlags) bind(cmd *cobra.Command, age bool) {
	fs := cmd.Flags()
	fs.StringSliceVar(&t.states, "state", nil, "only tasks in these states (submitted, working, input-required, auth-required, completed, failed, canceled, rejected)")
	fs.StringVar(&t.agent, "agent", "", "only tasks delegated to this agent id")
	fs.StringVar(&t.tenant, "tenant", "", "only tasks of this tenant")
	if age {
		fs.DurationVar(&t.olderThan, "older-than", 0, "only tasks created at least this long ago (e.g. 10m)")
		fs.DurationVar(&t.newerThan, "newer-than", 0, "only tasks created at most this long ago (e.g. 24h)")
	}
}

// query is the filter as admin API parameters; the daemon validates them.
func (t *taskFilterFlags) query() url.Values {
	q := url.Values{}
	if len(t.states) > 0 {
		q.Set("state", strings.Join(t.states, ","))
	}
	if t.agent != "" {
		q.Set("agent", t.agent)
	}
	if t.tenant != "" {
		q.Set("tenant", t.tenant)
	}
	if t.olderThan != 0 {
		q.Set("older_than", t.olderThan.String())
	}
	if t.newerThan != 0 {
		q.Set("newer_than", t.newerThan.String())
	}
	return q
}

// errWatchTokenExpired: the watch stream ended with event: token_expired.
var errWatchTokenExpired = errors.New("watch: the token expired; watch again with a fresh one")

// watch follows GET /v1/tasks/watch until ctx ends (nil error) or the
// stream does, printing a line per change, or its JSON with --json. Once
// the daemon answered it says so on stderr.
func (f *adminFlags) watch(ctx context.Context, q url.Values, stdout, stderr io.Writer) error {
	req, err := f.request(ctx, "GET", "/v1/tasks/watch?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	c, err := f.client(0) // no timeout: the stream lasts
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return reachError(f.server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return answerError(resp, raw)
	}
	fmt.Fprintf(stderr, "watching task changes at %s (interrupt to stop)\n", f.server)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		switch sc.Text() {
		case "event: shutdown":
			return errors.New("watch: a2ad is shutting down; watch again (another instance, or this one once restarted)")
		case "event: token_expired":
			return errWatchTokenExpired
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // event names, heartbeats, blank separators
		}
		if f.asJSON {
			if _, err := fmt.Fprintln(stdout, data); err != nil {
				return err
			}
			continue
		}
		var c admin.TaskChange
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fmt.Errorf("a2ad sent a change that is not JSON: %w", err)
		}
		if _, err := fmt.Fprintf(stdout, "%s  %s  %-14s  %s  %s\n", c.UpdatedAt.Local().Format("15:04:05.000"),
			c.TaskID, c.State, c.AgentID, c.Reason); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return errors.New("watch: a2ad closed the stream")
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// callJSON sends method with an optional JSON body to the admin API of a
// daemon in plain text (the demo's) and decodes the answer into v; it
// returns the raw answer for --json.
func callJSON(method, server, token, dataDir, path string, body any, v any) ([]byte, error) {
	f := adminFlags{server: server, token: token, dataDir: dataDir}
	return f.callJSON(method, path, body, v)
}

// callJSON sends method with an optional JSON body to the admin API and
// decodes the answer into v; it returns the raw answer for --json.
func (f *adminFlags) callJSON(method, path string, body any, v any) ([]byte, error) {
	req, err := f.request(context.Background(), method, path, body)
	if err != nil {
		return nil, err
	}
	c, err := f.client(10 * time.Second)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, reachError(f.server, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, answerError(resp, raw)
	}
	return raw, json.Unmarshal(raw, v)
}

// request builds an authorized admin API request with an optional JSON body.
func (f *adminFlags) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	tok, err := adminToken(f.server, f.token, f.dataDir, cmp.Or(f.as, defaultOperator))
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
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(f.server, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return req, nil
}

// reachError says why the admin API at server did not answer: in a2ad's
// words when TLS is why (the server's certificate not verified, a client
// certificate refused), with the library's reason after them.
func reachError(server string, err error) error {
	return codedError("unreachable", reachReason(server, err))
}

// reachReason is reachError's message.
func reachReason(server string, err error) error {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var record tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("a2ad at %s: its TLS certificate is not signed by a CA this CLI trusts: pass --ca FILE (or A2AD_CA_FILE) with the CA that issued it (%v)", server, err)
	case errors.As(err, &host):
		return fmt.Errorf("a2ad at %s: its TLS certificate is not for this host name: use --server with a name the certificate holds (%v)", server, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("a2ad at %s: its TLS certificate is not valid (%v)", server, err)
	case errors.As(err, &record):
		return fmt.Errorf("a2ad at %s does not speak TLS: use --server http://… (%v)", server, err)
	case strings.Contains(err.Error(), "remote error: tls: bad certificate"), strings.Contains(err.Error(), "remote error: tls: unknown certificate authority"),
		strings.Contains(err.Error(), "remote error: tls: certificate required"):
		// The server's alert (RFC 8446 §6.2); crypto/tls has no exported type for it.
		return fmt.Errorf("a2ad at %s refused this CLI's TLS client certificate: pass --cert and --key with one its tls.client_ca_file trusts (%v)", server, err)
	}
	return fmt.Errorf("cannot reach a2ad at %s (is `a2ad serve` running?): %w", server, err)
}

// answerError is the error of a non-200 answer, "CODE: MESSAGE" with the
// API's code (task_not_found, task_terminal, invalid_argument, …) as its
// --json code when the answer is the API's JSON error; else "a2ad
// answered STATUS" with a code from the HTTP status (unauthorized,
// forbidden, not_found, conflict, unavailable, internal).
func answerError(resp *http.Response, raw []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
		return codedError(e.Error.Code, fmt.Errorf("%s: %s", e.Error.Code, e.Error.Message))
	}
	code := "internal"
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		code = "unauthorized"
	case http.StatusForbidden:
		code = "forbidden"
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusConflict:
		code = "conflict"
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		code = "unavailable"
	}
	msg := fmt.Sprintf("a2ad answered %s", resp.Status)
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		msg += ": the token is refused (a2ad needs one with scope a2a:admin, for this daemon's audience, not expired)"
	}
	return codedError(code, errors.New(msg))
}

func printTaskTable(w io.Writer, recs []*task.Record, now time.Time) error {
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
	agentTask := r.AgentTaskID
	if agentTask == "" {
		agentTask = "not known"
	}
	if r.AgentReplica != "" { // the replica that holds it (docs/nats-binding.md §5.8)
		agentTask += " on replica " + r.AgentReplica
	}
	fmt.Fprintf(tw, "Agent:\t%s (skill %s, agent task %s)\n", r.AgentID, r.Skill, agentTask)
	fmt.Fprintf(tw, "Tenant:\t%s (subject %s)\n", r.Tenant, r.Subject)
	fmt.Fprintf(tw, "Age:\t%s (created %s)\n", age(now, r.CreatedAt), r.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(tw, "Deadline:\t%s\n", r.Deadline.Format(time.RFC3339))
	fmt.Fprintf(tw, "Brief:\t%s (schema %s)\n", r.BriefDigest, r.OutputSchema)
	if r.Question != "" {
		fmt.Fprintf(tw, "Question:\t%q\n", r.Question)
	}
	if r.QuestionSchema != nil {
		fmt.Fprintf(tw, "Answer form:\t%s\n", r.QuestionSchema)
	}
	if r.QuestionSchemaNote != "" {
		fmt.Fprintf(tw, "Answer form:\t%s\n", r.QuestionSchemaNote)
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
	fmt.Fprintln(tw, "  AT\tEVENT\tFROM\tTO\tSOURCE\tBY\tNOTE")
	for _, h := range r.History {
		note := h.Reason
		if h.Note != "" {
			note += " " + strconv.Quote(h.Note)
		}
		if h.Refused && !strings.HasPrefix(note, "refused") {
			note = "refused " + note
		}
		from := string(h.From)
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.At.Format("15:04:05.000"), h.Event, from, h.To, h.Source, cmp.Or(h.By, "-"), note)
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
