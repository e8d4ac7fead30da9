package main

// `a2ad bench --processes`: a2ad and the peer (the agents and the trivial
// MCP server) as child processes of this binary, so that each one's CPU
// and allocations are its own (docs/benchmarks.md, "Out of process").

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// benchChildStart bounds a child's start: a2ad until it logs its
// listeners, the peer until it reports its own.
const benchChildStart = time.Minute

// clockTicksPerSecond is the unit of /proc's CPU times (USER_HZ): 100 on
// every Linux architecture Go supports, and what procfs assumes too.
const clockTicksPerSecond = 100

// startBenchProcesses starts the peer (`a2ad bench-peer`), then a2ad
// (`a2ad serve`) configured as the in-process bench's daemon with the
// peer's HTTP agent, then the peer's NATS agent with the credential a2ad
// mints for it, and connects the raw NATS echo. With profiling, a2ad
// serves net/http/pprof on a loopback port for env.profile.
func startBenchProcesses(ctx context.Context, dir string, log *slog.Logger, hosts int, profiling bool) (env *benchEnv, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: --processes runs this binary: %w", err)
	}
	env = &benchEnv{dataDir: filepath.Join(dir, "a2ad"), floorDir: filepath.Join(dir, "peer"), children: &benchChildren{}}
	env.closers = append(env.closers, env.children.stop)
	defer func() {
		if err != nil {
			env.stop()
		}
	}()
	for _, d := range []string{env.dataDir, env.floorDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return env, err
		}
	}

	peer, hello, err := startBenchPeer(ctx, exe, env.floorDir)
	if peer != nil {
		env.children.peer = peer
	}
	if err != nil {
		return env, err
	}
	env.floorURL, env.floorAud = hello.FloorURL, hello.FloorAudience

	cfgPath := filepath.Join(dir, "a2ad.yaml")
	b, err := benchConfigYAML(benchConfig(env.dataDir, hello.HTTPAgentURL, hosts))
	if err != nil {
		return env, err
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return env, err
	}
	args := []string{"serve", "--config", cfgPath, "--data-dir", env.dataDir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1"}
	want := []*regexp.Regexp{benchServingLine}
	if profiling {
		args = append(args, "--pprof-addr", "127.0.0.1:0")
		want = append(want, benchPprofLine)
	}
	a2ad, lines, err := startBenchChild("a2ad", exe, args, want)
	if a2ad != nil {
		env.children.a2ad = a2ad
	}
	if err != nil {
		return env, err
	}
	env.natsURL, env.a2adURL = lines[0][1], lines[0][2]
	a2ad.metricsURL = env.a2adURL + "/metrics"
	env.audience = devAudience(env.dataDir)
	if profiling {
		pprofURL := "http://" + lines[1][1] + "/debug/pprof/profile"
		env.profile = func(ctx context.Context, path string, d time.Duration) (func() error, error) {
			return profileOver(ctx, pprofURL, path, d)
		}
	}

	env.mint = func(id string) (string, error) {
		var c admin.Credential
		_, err := callJSON("POST", env.a2adURL, "", env.dataDir, "/v1/agents/"+url.PathEscape(id)+"/credential",
			map[string]int64{"ttl_seconds": 3600}, &c)
		return c.Credential, err
	}
	cred, err := env.mint("fraud-review")
	if err != nil {
		return env, fmt.Errorf("bench: the agent's credential: %w", err)
	}
	if err := peer.call(benchPeerRequest{NATSURL: env.natsURL, Credential: cred}); err != nil {
		return env, err
	}
	env.reportAtOnce = func(on bool) error { return peer.call(benchPeerRequest{ReportAtOnce: &on}) }
	for _, id := range []string{"fraud-review", benchHTTPAgent} {
		if err := waitDelegableAt(ctx, env.a2adURL, env.dataDir, id); err != nil {
			return env, err
		}
	}
	if err := env.connectEcho(); err != nil {
		return env, err
	}
	return env, nil
}

// The lines of a2ad serve's log the bench reads its addresses from.
var (
	benchServingLine = regexp.MustCompile(`msg="a2ad serving" nats=(nats://\S+) mcp=(http://\S+)/mcp`)
	benchPprofLine   = regexp.MustCompile(`msg="profiling listener[^"]*" addr=(\S+)`)
)

// benchConfigYAML is cfg as a configuration file, for the settings
// benchConfig makes: the agents, the rate limits, the HTTP connections.
func benchConfigYAML(cfg daemon.Config) ([]byte, error) {
	type agent struct {
		ID              string              `yaml:"id"`
		Tenants         []string            `yaml:"tenants"`
		TrustOnFirstUse bool                `yaml:"trust_on_first_use,omitempty"`
		CardURL         string              `yaml:"card_url,omitempty"`
		EvidenceSchemas map[string]string   `yaml:"evidence_schemas,omitempty"`
		EvidenceKeys    map[string][]string `yaml:"evidence_keys,omitempty"`
	}
	type httpLimits struct {
		MaxConnections int `yaml:"max_connections,omitempty"`
	}
	file := struct {
		Agents     []agent            `yaml:"agents"`
		RateLimits mcpedge.RateLimits `yaml:"rate_limits"`
		HTTPLimits httpLimits         `yaml:"http_limits,omitempty"`
	}{RateLimits: cfg.RateLimits, HTTPLimits: httpLimits{cfg.HTTPLimits.MaxConnections}}
	for _, a := range cfg.Agents {
		file.Agents = append(file.Agents, agent{ID: a.ID, Tenants: a.Tenants, TrustOnFirstUse: a.TrustOnFirstUse, CardURL: a.CardURL,
			EvidenceSchemas: a.EvidenceSchemas, EvidenceKeys: a.EvidenceKeys})
	}
	return yaml.Marshal(file)
}

// waitDelegableAt waits, at most 15 s, until the admin API at server says
// agent id is delegable.
func waitDelegableAt(ctx context.Context, server, dataDir, id string) error {
	var rec struct {
		Delegable bool `json:"delegable"`
	}
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err = callJSON("GET", server, "", dataDir, "/v1/agents/"+url.PathEscape(id), nil, &rec); err == nil && rec.Delegable {
			return nil
		}
	}
	return fmt.Errorf("bench: agent %s not delegable within 15s (last answer: %v)", id, err)
}

// profileOver asks a2ad's net/http/pprof for a CPU profile of d rounded
// up to whole seconds, plus one (the measurement's tail), into path; the
// function it returns waits for the profile and reports its errors.
func profileOver(ctx context.Context, pprofURL, path string, d time.Duration) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: CPU profile: %w", err)
	}
	secs := int(math.Ceil(d.Seconds())) + 1
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pprofURL+"?seconds="+strconv.Itoa(secs), nil)
	if err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			done <- fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- err
	}()
	return func() error {
		err := <-done
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("bench: a2ad's CPU profile: %w", err)
		}
		return nil
	}, nil
}

// benchChildren are the child processes of --processes.
type benchChildren struct {
	a2ad, peer *benchChild
}

// usage reads a2ad's and the peer's usage so far.
func (c *benchChildren) usage(ctx context.Context) (a2ad, peer *processUsage, err error) {
	if a2ad, err = c.a2ad.usage(ctx); err != nil {
		return nil, nil, err
	}
	if peer, err = c.peer.usage(ctx); err != nil {
		return nil, nil, err
	}
	return a2ad, peer, nil
}

// stop stops a2ad, then the peer.
func (c *benchChildren) stop() {
	for _, ch := range []*benchChild{c.a2ad, c.peer} {
		if ch != nil {
			ch.stop()
		}
	}
}

// benchChild is one child process, in a process group of its own (so
// that a Ctrl-C in the terminal reaches the bench, which stops it) and
// killed by the kernel if the bench dies first (Pdeathsig, Linux).
type benchChild struct {
	name       string
	cmd        *exec.Cmd
	metricsURL string
	stderr     *benchChildLog
	done       chan struct{} // closed once it exited; then err is why
	err        error

	// The peer's request channel: requests on stdin, replies on stdout.
	mu    sync.Mutex
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startBenchChild starts exe with args and waits until its log has had a
// line matching each of want; it returns their submatches, in want's
// order. The child
// is returned, to be stopped, even with an error.
func startBenchChild(name, exe string, args []string, want []*regexp.Regexp) (*benchChild, [][]string, error) {
	c := &benchChild{name: name, cmd: exec.Command(exe, args...), done: make(chan struct{})}
	found := make(chan [][]string, 1)
	c.stderr = newBenchChildLog(name, want, found)
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = benchChildAttr()
	if err := c.start(); err != nil {
		return nil, nil, err
	}
	select {
	case m := <-found:
		return c, m, nil
	case <-c.done:
		return c, nil, fmt.Errorf("bench: %s exited while starting (%v):\n%s", name, c.err, c.stderr.tail())
	case <-time.After(benchChildStart):
		return c, nil, fmt.Errorf("bench: %s did not report its listeners within %s:\n%s", name, benchChildStart, c.stderr.tail())
	}
}

func (c *benchChild) start() error {
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("bench: starting %s: %w", c.name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return nil
}

// stop closes the child's stdin, sends its process group SIGTERM, and
// SIGKILL if it has not exited 10 s later.
func (c *benchChild) stop() {
	if c.stdin != nil {
		c.stdin.Close()
	}
	pid := c.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-c.done
	}
}

// usage is the child's CPU time so far (/proc/<pid>/stat), read before
// its heap counters (/metrics): the scrape's own CPU falls after the
// reading at a window's start, before the one at its end.
func (c *benchChild) usage(ctx context.Context) (*processUsage, error) {
	select {
	case <-c.done:
		return nil, fmt.Errorf("bench: %s exited (%v):\n%s", c.name, c.err, c.stderr.tail())
	default:
	}
	cpu, err := procCPU(c.cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("bench: %s's CPU time: %w", c.name, err)
	}
	alloc, mallocs, err := scrapeAllocs(ctx, c.metricsURL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s's /metrics: %w", c.name, err)
	}
	return &processUsage{cpu: cpu, allocBytes: alloc, mallocs: mallocs}, nil
}

// procCPU is process pid's user and system CPU time, all its threads
// (/proc/<pid>/stat fields 14 and 15, in clock ticks).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/<pid>/stat")
	}
	f := strings.Fields(string(b[i+1:])) // from field 3 on
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc/<pid>/stat")
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicksPerSecond, nil
}

// machineCPU is the CPU time of all the machine's cores but idle and
// iowait (/proc/stat's cpu line: user, nice, system, irq, softirq,
// steal; guest time is within user), or 0 where /proc/stat is not.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system [idle iowait] irq softirq steal
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond
}

// scrapeAllocs reads go_memstats_alloc_bytes_total and
// go_memstats_mallocs_total from a Prometheus text exposition at u.
func scrapeAllocs(ctx context.Context, u string) (allocBytes, mallocs float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, errors.New(resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", u, err)
	}
	value := func(name string) (float64, bool) {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			return 0, false
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetUntyped().GetValue(), m.GetUntyped() != nil
	}
	a, ok1 := value("go_memstats_alloc_bytes_total")
	m, ok2 := value("go_memstats_mallocs_total")
	if !ok1 || !ok2 {
		return 0, 0, errors.New("no go_memstats_alloc_bytes_total or go_memstats_mallocs_total")
	}
	return a, m, nil
}

// benchChildLog receives a child's stderr: it keeps the last lines (for
// errors), sends the submatches of want once each has matched a line,
// and passes warnings and errors on to this process's stderr, as the
// in-process bench's logger would print them.
type benchChildLog struct {
	name  string
	want  []*regexp.Regexp
	found chan<- [][]string

	mu      sync.Mutex
	partial []byte
	lines   []string
	matched [][]string // by want's index
	missing int
}

func newBenchChildLog(name string, want []*regexp.Regexp, found chan<- [][]string) *benchChildLog {
	return &benchChildLog{name: name, want: want, found: found, matched: make([][]string, len(want)), missing: len(want)}
}

func (l *benchChildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		l.lines = append(l.lines, line)
		if len(l.lines) > 50 {
			l.lines = l.lines[1:]
		}
		for i, re := range l.want {
			if m := re.FindStringSubmatch(line); m != nil && l.matched[i] == nil {
				l.matched[i] = m
				if l.missing--; l.missing == 0 {
					l.found <- l.matched
				}
			}
		}
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			fmt.Fprintf(os.Stderr, "%s: %s\n", l.name, line)
		}
	}
	return len(p), nil
}

// tail is the last lines the child logged.
func (l *benchChildLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
