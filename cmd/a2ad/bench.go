package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/hostile"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// benchOptions are the flags of `a2ad bench`.
type benchOptions struct {
	Duration    time.Duration
	Concurrency []int
	OpenTasks   int
	// EndedTasks is --ended-tasks: the history of the store-at-scale
	// measurement (benchstore.go), beside OpenTasks open ones; 0 skips it.
	EndedTasks int
	JSON       bool
	CPUProfile string
	Flood      bool
	// FloodProfile receives a CPU profile of the flooded measurement.
	FloodProfile string
	// Processes runs a2ad and the agents in child processes
	// (benchproc.go); the profiles are then a2ad's alone.
	Processes bool
}

// Sizes and shapes of the bench's workloads.
const (
	benchPayloadBytes = 1024             // the raw NATS echo's request and reply
	benchMaxWarmup    = time.Second      // warm-up before each latency measurement, at most
	benchMaxValidate  = 2 * time.Second  // each artifact validation run, at most
	benchTaskWriters  = 64               // concurrent Store.Create callers seeding open tasks
	benchCallTimeout  = 30 * time.Second // one operation; a slower one is a failure
	// benchCacheExpiry outlasts nats-server's file store block cache (10 s
	// after last use), which holds recently written and read records.
	benchCacheExpiry = 11 * time.Second
	// Round 5's a2ad process, one-event delegation at concurrency 64
	// (docs/benchmarks.md): the baselines of issue 20's halved allocations.
	benchRound5Mallocs = 3981
	benchRound5KB      = 896.6
)

func newBench() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure delegation latency and throughput on this machine, against a raw NATS round trip and a trivial MCP call",
		Long: "bench starts, in this process, a2ad with an embedded NATS server in a temporary directory, the reference " +
			"fraud-review agent over loopback TCP with its credential, and MCP hosts (the go-sdk client over Streamable HTTP " +
			"with a development token). At each concurrency it measures, for --duration after a warm-up: a raw NATS " +
			"request-reply of 1 KB between two TCP connections to the embedded server; a no-op tool call through a second " +
			"go-sdk server behind a2ad's own HTTP stack (token verification included); and a whole delegation (tools/call " +
			"delegate with wait_seconds, to completed), first with the agent answering in one event (the completed task " +
			"with its artifact), then in three (working, the artifact, completed). Concurrency N is N hosts, each with its own token, MCP session and " +
			"connection pool, calling in a loop. Then it measures artifact validations per second (one goroutine, then " +
			"GOMAXPROCS) and the cost of holding --open-tasks open tasks: the time to create them, the time for a fresh " +
			"task store to load and schedule them, and the heap they take, also once embedded NATS's block cache has " +
			"expired. It prints p50, p99, throughput, CPU time and allocations per operation, the ratios of the delegation " +
			"figures to the two floors, and the project's targets, met or missed. With --processes, a2ad runs as a child " +
			"process (`a2ad serve` of this binary) and the agents and the trivial MCP server as a second one, and the report adds " +
			"each one's CPU, heap bytes and allocations per operation and the whole machine's CPU; --cpuprofile and " +
			"--flood-cpuprofile are then a2ad's profiles alone (Linux only). With the defaults a run takes about " +
			"six minutes, one of them filling the store with --ended-tasks (0 skips it); progress goes to stderr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Duration <= 0 {
				return errors.New("bench: --duration must be positive")
			}
			if len(o.Concurrency) == 0 || slices.ContainsFunc(o.Concurrency, func(n int) bool { return n < 1 || n > 4096 }) {
				return errors.New("bench: --concurrency must list numbers between 1 and 4096")
			}
			if o.OpenTasks < 1 {
				return errors.New("bench: --open-tasks must be at least 1")
			}
			if o.EndedTasks < 0 {
				return errors.New("bench: --ended-tasks must be 0 (skip the store at scale) or more")
			}
			if o.Processes && runtime.GOOS != "linux" {
				return fmt.Errorf("bench: --processes reads each process's CPU time from /proc: Linux only, not %s", runtime.GOOS)
			}
			for flag, path := range map[string]string{"--cpuprofile": o.CPUProfile, "--flood-cpuprofile": o.FloodProfile} {
				if path == "" {
					continue
				}
				f, err := os.Create(path) // refused now, not after minutes of measurements
				if err != nil {
					return fmt.Errorf("bench: %s: %w", flag, err)
				}
				f.Close()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			gc := tuneGC(log) // as serve runs: the figures are serve's
			rep, err := runBench(ctx, o, cmd.ErrOrStderr(), log)
			if err != nil {
				return err
			}
			rep.GOGC, rep.MemoryLimit, rep.MemoryLimitSource = gc.describe(), gc.MemoryLimit, gc.MemorySource
			if o.JSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.print(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "length of each latency measurement, after a warm-up of a fifth of it (at most 1s)")
	f.IntSliceVar(&o.Concurrency, "concurrency", []int{1, 64}, "concurrent hosts (callers) of each latency measurement")
	f.IntVar(&o.OpenTasks, "open-tasks", 100_000, "open task records to create and load for the memory figures")
	f.IntVar(&o.EndedTasks, "ended-tasks", 1_000_000, "ended task records stored beside --open-tasks open ones for the store at scale: a daemon restarted over them, and its admin list (0 skips it)")
	f.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the first delegation measurement to `FILE` (with --processes: of the a2ad process alone)")
	f.StringVar(&o.FloodProfile, "flood-cpuprofile", "", "write a CPU profile of the delegations measured while the hostile agent floods to `FILE` (with --processes: of the a2ad process alone)")
	f.BoolVar(&o.Processes, "processes", false, "run a2ad (a2ad serve) and the agents with the trivial MCP server as two child processes of this binary, and report each process's CPU and allocations per operation beside the whole machine's (Linux)")
	f.BoolVar(&o.Flood, "flood", true, "also measure delegations at concurrency 1 while a hostile agent floods a2ad with events for tasks that do not exist, as fast as its limits allow")
	return cmd
}

// benchReport is what `a2ad bench` measured; --json prints it as is.
// Latencies are microseconds, rates per second, sizes bytes.
type benchReport struct {
	GoVersion  string `json:"go_version"`
	OSArch     string `json:"os_arch"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	CPUModel   string `json:"cpu_model"`
	Race       bool   `json:"race"`
	// LoadAverage is /proc/loadavg's 1, 5 and 15 minute figures at the
	// start: other work on the machine skews every figure.
	LoadAverage string `json:"load_average"`
	// Processes is --processes: a2ad and the peer (the agents and the
	// trivial MCP server) ran as child processes, and each figure has
	// their own usage.
	Processes bool   `json:"processes"`
	Duration  string `json:"duration"`
	Warmup    string `json:"warmup"`
	// GOGC is the Go GC target the run had and where it came from, as
	// `a2ad serve` decides it (docs/operations.md, "Go runtime"), e.g.
	// "400 (a2ad default under a memory limit)". MemoryLimit is the soft
	// memory limit in effect in bytes (0: none), from the cgroup or
	// GOMEMLIMIT; MemoryLimitSource says which, or why there is none.
	GOGC              string `json:"gogc"`
	MemoryLimit       int64  `json:"memory_limit_bytes"`
	MemoryLimitSource string `json:"memory_limit_source"`

	NATS    []benchFigures `json:"nats_request_reply"`
	Trivial []benchFigures `json:"mcp_trivial_call"`
	// Delegation is the whole delegation with an agent that answers at
	// once: its outcome (COMPLETED with the artifact) is one Task event.
	// The ratios and targets are of these figures.
	Delegation []benchFigures `json:"delegation"`
	// DelegationThreeEvents is the same delegation with the agent
	// reporting WORKING, the artifact and COMPLETED as three events, each
	// published once JetStream acknowledged the one before.
	DelegationThreeEvents []benchFigures `json:"delegation_three_events"`
	// DelegationHTTP is the same delegation to the reference agent served
	// over A2A's HTTP binding (JSON-RPC, a2a-go's a2asrv, in process): the
	// brief by SendMessage, WORKING, the artifact and COMPLETED observed on
	// its SubscribeToTask stream and published as events by a2ad.
	DelegationHTTP []benchFigures `json:"delegation_http"`
	Ratios         []benchRatios  `json:"ratios"`

	// Isolation is the honest delegation at concurrency 1, idle and while
	// a hostile agent floods (--flood).
	Isolation *benchIsolation `json:"isolation,omitempty"`

	OpenTasks benchOpenTasks `json:"open_tasks"`
	// History is the store at scale (--ended-tasks; nil when 0).
	History     *benchHistory `json:"history,omitempty"`
	Validations []benchRate   `json:"artifact_validations"`
	Targets     []benchTarget `json:"targets"`
}

// benchFigures is one latency measurement: Ops operations started in the
// measured window, by Concurrency callers in a loop.
type benchFigures struct {
	Concurrency int     `json:"concurrency"`
	Ops         int     `json:"ops"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	PerSecond   float64 `json:"per_second"`
	// CPUusPerOp is the CPU time of the bench process per operation over
	// the measured window: in process, of everything (a2ad, embedded
	// NATS, agents, hosts), so that GOMAXPROCS cores sustain at most
	// GOMAXPROCS·10⁶/CPUusPerOp operations per second; with --processes,
	// of the hosts and the raw NATS echo's two clients.
	CPUusPerOp float64 `json:"cpu_us_per_op"`
	// AllocBytesPerOp and MallocsPerOp are the heap bytes and objects the
	// bench process allocated per operation.
	AllocBytesPerOp float64 `json:"alloc_bytes_per_op"`
	MallocsPerOp    float64 `json:"mallocs_per_op"`
	// MachineCPUusPerOp is the CPU time of every core of the machine
	// (/proc/stat, all but idle and iowait) per operation, other work
	// included; 0 where /proc/stat is not. Its ticks are samples: with
	// cores idling between operations it can come out below the
	// processes' own (exact) CPU times (docs/benchmarks.md, round 5).
	MachineCPUusPerOp float64 `json:"machine_cpu_us_per_op,omitempty"`
	// A2AD is the a2ad process's own usage (--processes): a2ad with its
	// embedded NATS server.
	A2AD *benchProcessFigures `json:"a2ad,omitempty"`
	// Peer is the peer process's (--processes): the reference agent over
	// NATS and over HTTP and the trivial MCP call's server. Of the trivial
	// call, this is the MCP server's own cost.
	Peer *benchProcessFigures `json:"peer,omitempty"`
}

// benchProcessFigures are one child process's usage per operation over a
// measured window: CPU time from /proc/<pid>/stat (user + system, in the
// kernel's 10 ms ticks), heap bytes and objects allocated from its
// /metrics (go_memstats_alloc_bytes_total, go_memstats_mallocs_total),
// scraped before and after the window.
type benchProcessFigures struct {
	CPUusPerOp      float64 `json:"cpu_us_per_op"`
	AllocBytesPerOp float64 `json:"alloc_bytes_per_op"`
	MallocsPerOp    float64 `json:"mallocs_per_op"`
}

// benchRatios divide the delegation figures by the floors' at one
// concurrency: the quotients of the reported (rounded) figures.
type benchRatios struct {
	Concurrency     int     `json:"concurrency"`
	P50OverNATS     float64 `json:"p50_over_nats"`
	P99OverNATS     float64 `json:"p99_over_nats"`
	P50OverTrivial  float64 `json:"p50_over_trivial"`
	P99OverTrivial  float64 `json:"p99_over_trivial"`
	RateOverTrivial float64 `json:"throughput_over_trivial"`
}

// benchIsolation is one host delegating to the reference agent (one
// event), first with every other agent quiet, then while a hostile agent —
// configured with the default agent_limits, connected with nothing but its
// own credential — publishes events for tasks that do not exist as fast as
// its limits allow (hostile.Agent.FloodUnknown: JetStream publishes,
// 256 awaiting acknowledgement).
type benchIsolation struct {
	Idle    benchFigures `json:"idle"`
	Flooded benchFigures `json:"flooded"`
	// FloodStoredPerSecond are the hostile events JetStream stored (a2ad
	// applies, that is terminates, them at the agent's events_per_second);
	// FloodRefusedPerSecond those it refused (the agent's stream full).
	FloodStoredPerSecond  float64 `json:"flood_stored_per_second"`
	FloodRefusedPerSecond float64 `json:"flood_refused_per_second"`
	P50Ratio              float64 `json:"p50_flooded_over_idle"`
	P99Ratio              float64 `json:"p99_flooded_over_idle"`
}

// benchOpenTasks is the cost of holding open tasks: creating the records
// (Store.Create, benchTaskWriters at a time), then a fresh task.Store
// loading them and the broker scheduling their deadlines, as after a
// restart. Heap figures are HeapInuse differences after a collection.
// LoadedHeapBytes and SettledHeapBytes are what the process holds over the
// empty server, embedded NATS included, right after the load and once the
// server's block cache has let go of the records (benchCacheExpiry later);
// TrackedHeapBytes is a2ad's own share: the loaded store and schedule,
// settled heap with them minus settled heap without.
type benchOpenTasks struct {
	Tasks            int     `json:"tasks"`
	CreateSeconds    float64 `json:"create_seconds"`
	CreatesPerSecond float64 `json:"creates_per_second"`
	LoadSeconds      float64 `json:"load_seconds"`
	TrackedHeapBytes int64   `json:"tracked_heap_bytes"`
	TrackedPerTask   float64 `json:"tracked_bytes_per_task"`
	LoadedHeapBytes  int64   `json:"loaded_heap_bytes"`
	LoadedPerTask    float64 `json:"loaded_bytes_per_task"`
	SettledHeapBytes int64   `json:"settled_heap_bytes"`
	SettledPerTask   float64 `json:"settled_bytes_per_task"`
}

// benchRate is artifact.Check calls per second on Goroutines goroutines;
// ArtifactBytes is the artifact's JSON encoding.
type benchRate struct {
	Goroutines    int     `json:"goroutines"`
	ArtifactBytes int     `json:"artifact_bytes"`
	PerSecond     float64 `json:"per_second"`
}

// benchTarget is one of the project's targets and how the run fared:
// MissedByPercent is how far past the limit (or short of it, for a
// minimum) the figure is; 0 when met.
type benchTarget struct {
	Name            string  `json:"name"`
	Limit           string  `json:"limit"`
	Measured        float64 `json:"measured"`
	Unit            string  `json:"unit"`
	Met             bool    `json:"met"`
	MissedByPercent float64 `json:"missed_by_percent"`
}

func runBench(ctx context.Context, o benchOptions, progress io.Writer, log *slog.Logger) (*benchReport, error) {
	warmup := min(benchMaxWarmup, o.Duration/5)
	rep := &benchReport{
		GoVersion: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), CPUModel: cpuModel(), Race: raceEnabled(),
		LoadAverage: loadAverage(), Processes: o.Processes, Duration: o.Duration.String(), Warmup: warmup.String(),
	}
	dir, err := os.MkdirTemp("", "a2ad-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	if err := rep.roundTrips(ctx, o, warmup, filepath.Join(dir, "daemon"), progress, log); err != nil {
		return nil, err
	}
	fmt.Fprintln(progress, "bench: artifact validations")
	if rep.Validations, err = validationRates(ctx, min(benchMaxValidate, o.Duration)); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench: %d open tasks\n", o.OpenTasks)
	if rep.OpenTasks, err = openTasks(ctx, filepath.Join(dir, "open-tasks"), o.OpenTasks); err != nil {
		return nil, err
	}
	if o.EndedTasks > 0 {
		fmt.Fprintf(progress, "bench: the store at scale: %d open and %d ended tasks\n", o.OpenTasks, o.EndedTasks)
		h, err := history(ctx, filepath.Join(dir, "history"), o.OpenTasks, o.EndedTasks, progress, log)
		if err != nil {
			return nil, err
		}
		rep.History = &h
	}
	rep.derive()
	return rep, nil
}

// roundTrips starts the daemon, the agent, the floors and the hosts (in
// this process, or with o.Processes in child processes), and measures the
// round trips at each concurrency, one after the other so that they see
// the same machine. The first delegation measurement goes to
// o.CPUProfile, if set.
func (rep *benchReport) roundTrips(ctx context.Context, o benchOptions, warmup time.Duration, dir string, progress io.Writer, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	start := startBenchEnv
	if o.Processes {
		start = startBenchProcesses
	}
	env, err := start(ctx, dir, log, slices.Max(o.Concurrency), o.CPUProfile != "" || (o.Flood && o.FloodProfile != ""))
	if err != nil {
		return err
	}
	defer env.stop()
	for i, n := range o.Concurrency {
		profile := ""
		if i == 0 {
			profile = o.CPUProfile
		}
		f, err := env.level(ctx, n, warmup, o.Duration, profile, progress)
		if err != nil {
			return err
		}
		rep.NATS, rep.Trivial = append(rep.NATS, f.raw), append(rep.Trivial, f.trivial)
		rep.Delegation, rep.DelegationThreeEvents = append(rep.Delegation, f.del), append(rep.DelegationThreeEvents, f.del3)
		rep.DelegationHTTP = append(rep.DelegationHTTP, f.http)
	}
	if o.Flood {
		if rep.Isolation, err = env.isolation(ctx, warmup, o.Duration, o.FloodProfile, progress); err != nil {
			return err
		}
	}
	return nil
}

// benchHostile is the id of the hostile agent of --flood.
const benchHostile = "mallory"

// isolation measures one host's delegations idle, then while the hostile
// agent floods.
func (env *benchEnv) isolation(ctx context.Context, warmup, d time.Duration, profile string, progress io.Writer) (*benchIsolation, error) {
	cred, err := env.mint(benchHostile)
	if err != nil {
		return nil, err
	}
	m, err := hostile.Connect(env.natsURL, benchHostile, cred)
	if err != nil {
		return nil, fmt.Errorf("bench: hostile agent: %w", err)
	}
	defer m.Close()
	hosts, err := connectHosts(ctx, 1, env.a2adURL+"/mcp", env.hostToken)
	if err != nil {
		return nil, err
	}
	defer closeHosts(hosts)
	delegate := func(ctx context.Context, w int) error { return delegateOnce(ctx, hosts[w], env.cases.Add(1)) }
	if err := env.reportAtOnce(true); err != nil {
		return nil, err
	}
	iso := &benchIsolation{}
	fmt.Fprintf(progress, "bench: isolation: delegation, idle, %s\n", d)
	if iso.Idle, err = measure(ctx, 1, warmup, d, delegate, env.usage); err != nil {
		return nil, err
	}
	fctx, stop := context.WithCancel(ctx)
	flood := make(chan hostile.Stats, 1)
	start := time.Now()
	go func() { flood <- m.FloodUnknown(fctx, 0, 0) }()
	fmt.Fprintf(progress, "bench: isolation: delegation while %s floods, %s\n", benchHostile, d)
	stopProfile := func() error { return nil }
	if profile != "" {
		if stopProfile, err = env.profile(ctx, profile, warmup+d); err != nil {
			stop()
			<-flood
			return nil, err
		}
	}
	iso.Flooded, err = measure(ctx, 1, warmup, d, delegate, env.usage)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	stop()
	st := <-flood
	if err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	iso.FloodStoredPerSecond, iso.FloodRefusedPerSecond = round(float64(st.Acked)/secs, 0), round(float64(st.Refused)/secs, 0)
	iso.P50Ratio, iso.P99Ratio = round(iso.Flooded.P50us/iso.Idle.P50us, 2), round(iso.Flooded.P99us/iso.Idle.P99us, 2)
	return iso, nil
}

// levelFigures are the round trips measured at one concurrency.
type levelFigures struct {
	raw, trivial, del, del3, http benchFigures
}

// level measures the round trips with n hosts (n callers of the raw NATS
// echo): the two floors, then delegations with the agent answering in one
// event, then in three; profile, if set, receives a CPU profile of the
// one-event delegations.
func (env *benchEnv) level(ctx context.Context, n int, warmup, d time.Duration, profile string, progress io.Writer) (f levelFigures, err error) {
	fmt.Fprintf(progress, "bench: concurrency %d: connecting %d hosts\n", n, n)
	floorHosts, err := connectHosts(ctx, n, env.floorURL+"/mcp", env.floorToken)
	if err != nil {
		return f, fmt.Errorf("bench: trivial MCP hosts: %w", err)
	}
	defer closeHosts(floorHosts)
	hosts, err := connectHosts(ctx, n, env.a2adURL+"/mcp", env.hostToken)
	if err != nil {
		return f, fmt.Errorf("bench: a2ad hosts: %w", err)
	}
	defer closeHosts(hosts)
	run := func(name string, op func(context.Context, int) error) (benchFigures, error) {
		fmt.Fprintf(progress, "bench: concurrency %d: %s, %s\n", n, name, d)
		return measure(ctx, n, warmup, d, op, env.usage)
	}
	if f.raw, err = run("raw NATS request-reply", func(ctx context.Context, _ int) error { return env.echo(ctx) }); err != nil {
		return f, err
	}
	if f.trivial, err = run("trivial MCP tool call", func(ctx context.Context, w int) error { return noopOnce(ctx, floorHosts[w]) }); err != nil {
		return f, err
	}
	delegate := func(ctx context.Context, w int) error { return delegateOnce(ctx, hosts[w], env.cases.Add(1)) }
	if err := env.reportAtOnce(true); err != nil {
		return f, err
	}
	stop := func() error { return nil }
	if profile != "" {
		if stop, err = env.profile(ctx, profile, warmup+d); err != nil {
			return f, err
		}
	}
	f.del, err = run("delegation, agent answers in one event", delegate)
	if perr := stop(); err == nil {
		err = perr
	}
	if err != nil {
		return f, err
	}
	if err := env.reportAtOnce(false); err != nil {
		return f, err
	}
	if f.del3, err = run("delegation, agent answers in three events", delegate); err != nil {
		return f, err
	}
	f.http, err = run("delegation to the HTTP agent (JSON-RPC, stream)", func(ctx context.Context, w int) error {
		return delegateTo(ctx, hosts[w], benchHTTPAgent, env.cases.Add(1))
	})
	return f, err
}

// benchHTTPAgent is the id of the reference agent over HTTP in the bench.
const benchHTTPAgent = "fraud-review-http"

// startCPUProfile profiles this process to path until the function it
// returns is called.
func startCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// benchEnv is what the measurements run against: a2ad with its embedded
// NATS, the reference agent over NATS and over HTTP, the raw NATS echo and
// the trivial MCP server — all in this process (startBenchEnv), or a2ad
// and the rest in two child processes (startBenchProcesses).
type benchEnv struct {
	a2adURL  string     // a2ad's HTTP base URL
	natsURL  string     // its embedded NATS server
	dataDir  string     // its data directory: the development key the hosts' tokens are signed with
	audience string     // and their audience
	floorURL string     // the trivial MCP server's base URL
	floorAud string     // and its tokens' audience,
	floorDir string     // signed with the development key of this directory
	echoReq  *nats.Conn // requester of the raw NATS round trip
	echoResp *nats.Conn // responder
	payload  []byte
	cases    atomic.Int64 // refund cases delegated so far: each gets its own case id and idempotency key

	// reportAtOnce makes the NATS agent answer in one event (true) or in
	// three, from its next task on.
	reportAtOnce func(on bool) error
	// mint mints a credential for agent id.
	mint func(id string) (string, error)
	// profile writes a CPU profile of the next d, and of whatever runs
	// until the function it returns is called, to path.
	profile func(ctx context.Context, path string, d time.Duration) (func() error, error)
	// children are the child processes of --processes: a2ad and the peer.
	children *benchChildren

	closers  []func() // in reverse order by stop
	stopOnce sync.Once
}

// benchEchoSubject is the raw round trip's subject.
const benchEchoSubject = "a2ad.bench.echo"

// benchConfig is a2ad's configuration in the bench, in process or not:
// inProcessConfig's agents (with the HTTP agent at httpAgentURL) and the
// hostile agent of --flood, host rate limits out of the way, and HTTP
// connections for every host.
func benchConfig(dir, httpAgentURL string, hosts int) daemon.Config {
	cfg := inProcessConfig(dir, httpAgentURL)
	// The hostile agent of --flood: configured, with the default limits,
	// for a tenant of its own.
	cfg.Agents = append(cfg.Agents, daemon.AgentConfig{AgentConfig: agentcard.AgentConfig{ID: benchHostile, Tenants: []string{"acme"}}})
	// The bench measures what a2ad sustains, not its rate limits: its
	// hosts, all of tenant default, go well past the defaults.
	unlimited := mcpedge.Rate{PerSecond: 1e9, Burst: 1e9}
	cfg.RateLimits = mcpedge.RateLimits{PerPrincipal: mcpedge.RateClasses{Reads: unlimited, Writes: unlimited},
		PerTenant: mcpedge.RateClasses{Reads: unlimited, Writes: unlimited}}
	// Each host holds two connections (its POSTs, its session's GET
	// stream); one level's hosts may not have closed theirs yet.
	if n := 3*hosts + 64; n > daemon.DefaultHTTPLimits.MaxConnections {
		cfg.HTTPLimits.MaxConnections = n
	}
	return cfg
}

// startBenchEnv starts everything in this process.
func startBenchEnv(ctx context.Context, dir string, log *slog.Logger, hosts int, _ bool) (env *benchEnv, err error) {
	env = &benchEnv{dataDir: dir, floorDir: dir}
	defer func() {
		if err != nil {
			env.stop()
		}
	}()
	_, httpAgentURL, stopHTTP, err := startHTTPAgent(nil, nil)
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, stopHTTP)
	d, err := daemon.Start(ctx, benchConfig(dir, httpAgentURL, hosts), log, true)
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, d.Stop)
	env.a2adURL, env.natsURL, env.audience = d.HTTPURL, d.NATSURL, d.Auth.Audience()
	agentNC, agent, err := startInProcessAgent(ctx, d, nil, nil)
	if err != nil {
		return env, fmt.Errorf("bench: %w", err)
	}
	env.closers = append(env.closers, agentNC.Close, agent.Stop)
	env.reportAtOnce = func(on bool) error { agent.SetReportAtOnce(on); return nil }
	env.mint = func(id string) (string, error) {
		cred, _, err := d.AgentKeys.Mint(id, time.Hour, time.Now())
		return cred, err
	}
	env.profile = func(_ context.Context, path string, _ time.Duration) (func() error, error) {
		return startCPUProfile(path)
	}
	for _, id := range []string{"fraud-review", benchHTTPAgent} {
		if err := waitDelegable(ctx, d, id); err != nil {
			return env, err
		}
	}
	if err := env.connectEcho(); err != nil {
		return env, err
	}
	floorURL, floorAud, stopFloor, err := startFloor(dir, log)
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, stopFloor)
	env.floorURL, env.floorAud = floorURL, floorAud
	return env, nil
}

// connectEcho connects the raw round trip's two clients to env.natsURL:
// two TCP connections as the daemon's own user, as an operator's tool on
// this host would connect.
func (env *benchEnv) connectEcho() error {
	pw, err := os.ReadFile(daemon.DaemonPasswordPath(env.dataDir))
	if err != nil {
		return err
	}
	user := nats.UserInfo(embedded.DaemonUser, strings.TrimSpace(string(pw)))
	if env.echoResp, err = nats.Connect(env.natsURL, user, nats.Name("a2ad-bench-echo")); err != nil {
		return fmt.Errorf("bench: NATS echo: %w", err)
	}
	env.closers = append(env.closers, env.echoResp.Close)
	if _, err := env.echoResp.Subscribe(benchEchoSubject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		return err
	}
	if err := env.echoResp.Flush(); err != nil {
		return err
	}
	if env.echoReq, err = nats.Connect(env.natsURL, user, nats.Name("a2ad-bench-requester")); err != nil {
		return fmt.Errorf("bench: NATS requester: %w", err)
	}
	env.closers = append(env.closers, env.echoReq.Close)
	env.payload = make([]byte, benchPayloadBytes)
	for i := range env.payload {
		env.payload[i] = 'a' + byte(i%26)
	}
	return nil
}

// startFloor serves the trivial MCP call on a free loopback port: a2ad's
// HTTP stack (the bearer check with dir's development key, then the
// two-era handler) in front of a go-sdk server with one no-op tool. It
// returns the base URL, the tokens' audience and a stop function.
func startFloor(dir string, log *slog.Logger) (base, audience string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	base = "http://" + ln.Addr().String()
	authn, err := mcpedge.NewAuthenticator(mcpedge.AuthConfig{}, dir, base)
	if err != nil {
		ln.Close()
		return "", "", nil, err
	}
	floor := mcp.NewServer(&mcp.Implementation{Name: "a2ad-bench-floor", Version: "1"}, &mcp.ServerOptions{Logger: log})
	mcp.AddTool(floor, &mcp.Tool{Name: "noop", Description: "Does nothing."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, struct{}, error) {
			return nil, struct{}{}, nil
		})
	mux := http.NewServeMux()
	mux.Handle("/mcp", authn.ProtectMCP(mcpedge.HTTPHandler(floor, log)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return base, authn.Audience(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func (env *benchEnv) stop() {
	env.stopOnce.Do(func() {
		for _, f := range slices.Backward(env.closers) {
			f()
		}
	})
}

// usage reads what the bench's processes have used so far.
func (env *benchEnv) usage(ctx context.Context) (benchUsage, error) {
	u := benchUsage{self: selfUsage(), machine: machineCPU()}
	if env.children == nil {
		return u, nil
	}
	var err error
	u.a2ad, u.peer, err = env.children.usage(ctx)
	return u, err
}

// hostToken is host i's token for a2ad; floorToken for the trivial server.
func (env *benchEnv) hostToken(i int) (string, error) {
	return mcpedge.MintDevToken(env.dataDir, env.audience, fmt.Sprintf("bench-host-%d", i), "default",
		mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate, time.Hour)
}

func (env *benchEnv) floorToken(i int) (string, error) {
	return mcpedge.MintDevToken(env.floorDir, env.floorAud, fmt.Sprintf("bench-host-%d", i), "default", mcpedge.ScopeRead, time.Hour)
}

func (env *benchEnv) echo(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, benchCallTimeout)
	defer cancel()
	m, err := env.echoReq.RequestWithContext(ctx, benchEchoSubject, env.payload)
	if err != nil {
		return fmt.Errorf("NATS request: %w", err)
	}
	if len(m.Data) != len(env.payload) {
		return fmt.Errorf("NATS request: %d bytes back, want %d", len(m.Data), len(env.payload))
	}
	return nil
}

// connectHosts connects n MCP hosts to endpoint, each with its own token
// (token(i)), session and connection pool, as n host processes would: one
// pool for all would keep only http.DefaultTransport's two idle
// connections and open a new one for most calls.
func connectHosts(ctx context.Context, n int, endpoint string, token func(int) (string, error)) ([]*mcp.ClientSession, error) {
	hosts := make([]*mcp.ClientSession, 0, n)
	for i := range n {
		tok, err := token(i)
		if err != nil {
			closeHosts(hosts)
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		client := mcp.NewClient(&mcp.Implementation{Name: "a2ad-bench-host", Version: "1"}, nil)
		s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
			HTTPClient: &http.Client{Transport: mcpedge.BearerTransport(tok, tr)}}, nil)
		if err != nil {
			closeHosts(hosts)
			return nil, err
		}
		hosts = append(hosts, s)
	}
	return hosts, nil
}

func closeHosts(hosts []*mcp.ClientSession) {
	for _, s := range hosts {
		_ = s.Close()
	}
}

func noopOnce(ctx context.Context, s *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, benchCallTimeout)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "noop", Arguments: map[string]any{}})
	if err != nil {
		return fmt.Errorf("noop: %w", err)
	}
	if res.IsError {
		return fmt.Errorf("noop: %s", resultText(res))
	}
	return nil
}

// delegateOnce delegates refund case C-<n> (below the manual review
// threshold, so the agent completes it at once) with its own idempotency
// key, and waits for completed.
func delegateOnce(ctx context.Context, s *mcp.ClientSession, n int64) error {
	return delegateTo(ctx, s, "fraud-review", n)
}

// delegateTo is delegateOnce to agent.
func delegateTo(ctx context.Context, s *mcp.ClientSession, agent string, n int64) error {
	ctx, cancel := context.WithTimeout(ctx, benchCallTimeout)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "delegate", Arguments: map[string]any{
		"agent": agent, "skill": "assess_refund_risk",
		"objective": "Assess the fraud risk of this refund request and recommend a risk level.",
		"evidence": map[string]any{"case_id": "C-" + strconv.FormatInt(n, 10), "amount_cents": 1999, "currency": "EUR",
			"manual_review_above_cents": 50000, "customer_tenure_days": 900, "prior_refunds_90d": 0},
		"constraints":     []string{"Do not contact the customer.", "Use only the evidence given."},
		"output_schema":   "risk_assessment",
		"budget":          map[string]any{"deadline_seconds": 120},
		"idempotency_key": "bench-" + strconv.FormatInt(n, 10),
		"wait_seconds":    20,
	}})
	if err != nil {
		return fmt.Errorf("delegate: %w", err)
	}
	if res.IsError {
		return fmt.Errorf("delegate: %s", resultText(res))
	}
	out, _ := res.StructuredContent.(map[string]any)
	if out["state"] != string(task.Completed) {
		return fmt.Errorf("delegate: task %v ended %v (%v), want completed", out["task_id"], out["state"], out["reason"])
	}
	return nil
}

func resultText(res *mcp.CallToolResult) string {
	var msg []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			msg = append(msg, t.Text)
		}
	}
	return strings.Join(msg, "; ")
}

// measure runs op on each of workers callers in a loop: for warmup, then
// for d, and on until each caller has completed one operation started
// after the warm-up (an operation slower than d still counts). Those
// operations give the figures; throughput is their number over the time
// from the warm-up's end to the last one's end, and the usage figures
// what usage reports at the warm-up's end and once the last one ended,
// per operation. The first error stops every caller and is returned.
func measure(parent context.Context, workers int, warmup, d time.Duration, op func(ctx context.Context, worker int) error,
	usage func(context.Context) (benchUsage, error)) (benchFigures, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	start := time.Now().Add(warmup)
	end := start.Add(d)
	lat := make([][]time.Duration, workers)
	last := make([]time.Time, workers)
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	var before benchUsage
	wg.Go(func() {
		select {
		case <-time.After(time.Until(start)):
			var err error
			if before, err = usage(ctx); err != nil {
				errOnce.Do(func() { firstErr = err })
				cancel()
			}
		case <-ctx.Done():
		}
	})
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) && len(lat[w]) > 0 {
					return
				}
				if err := op(ctx, w); err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
				if t1 := time.Now(); !t0.Before(start) {
					lat[w] = append(lat[w], t1.Sub(t0))
					last[w] = t1
				}
			}
		})
	}
	wg.Wait()
	after, err := usage(ctx)
	if err := parent.Err(); err != nil {
		return benchFigures{}, err
	}
	if firstErr != nil {
		return benchFigures{}, firstErr
	}
	if err != nil {
		return benchFigures{}, err
	}
	// Every caller completed at least one operation after start.
	all := slices.Concat(lat...)
	finish := slices.MaxFunc(last, func(a, b time.Time) int { return a.Compare(b) })
	slices.Sort(all)
	f := benchFigures{
		Concurrency: workers, Ops: len(all),
		P50us: micros(percentile(all, 0.50)), P99us: micros(percentile(all, 0.99)),
		PerSecond: round(float64(len(all))/finish.Sub(start).Seconds(), 1),
	}
	f.fill(before, after)
	return f, nil
}

// benchUsage is what the bench's processes have used so far: this one, the
// machine's cores together, and with --processes the a2ad and peer
// processes.
type benchUsage struct {
	self       processUsage
	machine    time.Duration // 0: /proc/stat not readable
	a2ad, peer *processUsage
}

// processUsage is one process's CPU time and heap allocations so far.
type processUsage struct {
	cpu        time.Duration
	allocBytes float64
	mallocs    float64
}

// perOp is the usage from u0 to u over f.Ops operations.
func (u processUsage) perOp(u0 processUsage, ops int) benchProcessFigures {
	n := float64(ops)
	return benchProcessFigures{CPUusPerOp: micros((u.cpu - u0.cpu) / time.Duration(ops)),
		AllocBytesPerOp: round((u.allocBytes-u0.allocBytes)/n, 0), MallocsPerOp: round((u.mallocs-u0.mallocs)/n, 1)}
}

// fill sets f's usage figures from the usage before and after its window.
func (f *benchFigures) fill(before, after benchUsage) {
	self := after.self.perOp(before.self, f.Ops)
	f.CPUusPerOp, f.AllocBytesPerOp, f.MallocsPerOp = self.CPUusPerOp, self.AllocBytesPerOp, self.MallocsPerOp
	if before.machine > 0 && after.machine > 0 {
		f.MachineCPUusPerOp = micros((after.machine - before.machine) / time.Duration(f.Ops))
	}
	if before.a2ad != nil && after.a2ad != nil {
		a := after.a2ad.perOp(*before.a2ad, f.Ops)
		f.A2AD = &a
	}
	if before.peer != nil && after.peer != nil {
		p := after.peer.perOp(*before.peer, f.Ops)
		f.Peer = &p
	}
}

// selfUsage is this process's user and system CPU time (getrusage) and
// heap allocations (runtime.MemStats) so far.
func selfUsage() processUsage {
	var u processUsage
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	u.allocBytes, u.mallocs = float64(m.TotalAlloc), float64(m.Mallocs)
	return u
}

// percentile is the nearest-rank q-quantile of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return round(float64(d)/float64(time.Microsecond), 1) }

func round(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}

// benchArtifact is a risk assessment as the reference agent returns it.
var benchArtifact = a2a.Artifact{ArtifactID: "risk-assessment", Name: "risk_assessment", Parts: []a2a.Part{a2a.DataPart(json.RawMessage(
	`{"case_id":"C-7","risk_level":"low","score":0.1,"reasons":["no risk signals in the evidence"],"policy_version":"` + refagent.PolicyVersion + `"}`))}}

// validationRates measures artifact.Check of benchArtifact against the
// built-in risk_assessment schema for d, on one goroutine and then on
// GOMAXPROCS.
func validationRates(ctx context.Context, d time.Duration) ([]benchRate, error) {
	reg, err := artifact.LoadFS(a2ad.HostSchemas(), ".")
	if err != nil {
		return nil, err
	}
	schema, err := reg.Get("risk_assessment")
	if err != nil {
		return nil, err
	}
	if v := artifact.Check(schema, benchArtifact); !v.Valid {
		return nil, fmt.Errorf("bench: the sample artifact is not valid: %+v", v.Violations)
	}
	encoded, err := json.Marshal(benchArtifact)
	if err != nil {
		return nil, err
	}
	var rates []benchRate
	for _, g := range slices.Compact([]int{1, runtime.GOMAXPROCS(0)}) {
		var n atomic.Int64
		start := time.Now()
		end := start.Add(d)
		var wg sync.WaitGroup
		for range g {
			wg.Go(func() {
				k := int64(0)
				for ctx.Err() == nil && time.Now().Before(end) {
					artifact.Check(schema, benchArtifact)
					k++
				}
				n.Add(k)
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rates = append(rates, benchRate{Goroutines: g, ArtifactBytes: len(encoded), PerSecond: round(float64(n.Load())/time.Since(start).Seconds(), 1)})
	}
	return rates, nil
}

// openTasks stores n open (submitted) task records through task.Store on a
// fresh embedded NATS server in dir, then loads them into a second Store
// whose changes feed a broker's schedule, as a restarted daemon does.
func openTasks(ctx context.Context, dir string, n int) (benchOpenTasks, error) {
	out := benchOpenTasks{Tasks: n}
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "jetstream"), Listen: "127.0.0.1:-1"})
	if err != nil {
		return out, err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("a2ad-bench-tasks"))
	if err != nil {
		return out, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return out, err
	}
	writerCtx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	writer, err := task.NewStore(writerCtx, js, 1, nil)
	if err != nil {
		return out, err
	}
	empty := heapInuse()

	now := time.Now().UTC()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for range min(benchTaskWriters, n) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
				if err := writer.Create(ctx, openTaskRecord(i, now)); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return out, firstErr
	}
	created := time.Since(start)
	out.CreateSeconds = round(created.Seconds(), 3)
	out.CreatesPerSecond = round(float64(n)/created.Seconds(), 1)
	// The writer's watcher holds its own map of the open tasks until its
	// context ends: let it catch up and stop it. The baseline waits for
	// the server's block cache to let go of the records just written.
	for deadline := time.Now().Add(time.Minute); writer.Open() != n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return out, fmt.Errorf("bench: the store's watcher saw %d of the %d tasks created", writer.Open(), n)
		}
	}
	stopWriter()
	if err := sleepCtx(ctx, benchCacheExpiry); err != nil {
		return out, err
	}
	before := heapInuse()

	svc := &broker.Service{}
	readerCtx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	start = time.Now()
	reader, err := task.NewStore(readerCtx, js, 1, svc.Track)
	if err != nil {
		return out, err
	}
	select {
	case <-reader.Loaded():
	case <-ctx.Done():
		return out, ctx.Err()
	}
	out.LoadSeconds = round(time.Since(start).Seconds(), 3)
	if reader.Open() != n || svc.Scheduled() != n {
		return out, fmt.Errorf("bench: loaded %d open tasks with %d scheduled, want %d", reader.Open(), svc.Scheduled(), n)
	}
	loaded := heapInuse()
	if err := sleepCtx(ctx, benchCacheExpiry); err != nil {
		return out, err
	}
	settled := heapInuse()
	runtime.KeepAlive(reader)
	runtime.KeepAlive(svc)
	perTask := func(b int64) float64 { return round(float64(b)/float64(n), 1) }
	out.TrackedHeapBytes, out.TrackedPerTask = settled-before, perTask(settled-before)
	out.LoadedHeapBytes, out.LoadedPerTask = loaded-empty, perTask(loaded-empty)
	out.SettledHeapBytes, out.SettledPerTask = settled-empty, perTask(settled-empty)
	return out, nil
}

// sleepCtx sleeps for d, or returns ctx's error if it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openTaskRecord is task i as a delegation leaves it once the agent has the
// brief: submitted, deadline in an hour, one transition.
func openTaskRecord(i int64, now time.Time) *task.Record {
	return &task.Record{ID: fmt.Sprintf("tsk-bench%015d", i), Tenant: "default", Subject: "bench-host", AgentID: "fraud-review",
		Skill: "assess_refund_risk", AgentTaskID: fmt.Sprintf("fr-%d", i), BriefDigest: "sha256:" + strings.Repeat("0", 64),
		OutputSchema: "risk_assessment", SchemaDigest: "sha256:" + strings.Repeat("1", 64), State: task.Submitted, Turns: 1,
		Deadline: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now,
		History: []task.Transition{{At: now, To: task.Submitted, Event: "submit", Source: task.SourceHost, By: "bench-host"}}}
}

// heapInuse is runtime.MemStats.HeapInuse after two collections.
func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// derive fills the ratios and the targets from the figures.
func (rep *benchReport) derive() {
	at := func(figs []benchFigures, n int) (benchFigures, bool) {
		i := slices.IndexFunc(figs, func(f benchFigures) bool { return f.Concurrency == n })
		if i < 0 {
			return benchFigures{}, false
		}
		return figs[i], true
	}
	for _, del := range rep.Delegation {
		raw, ok1 := at(rep.NATS, del.Concurrency)
		tr, ok2 := at(rep.Trivial, del.Concurrency)
		if !ok1 || !ok2 {
			continue
		}
		rep.Ratios = append(rep.Ratios, benchRatios{Concurrency: del.Concurrency,
			P50OverNATS: del.P50us / raw.P50us, P99OverNATS: del.P99us / raw.P99us,
			P50OverTrivial: del.P50us / tr.P50us, P99OverTrivial: del.P99us / tr.P99us,
			RateOverTrivial: del.PerSecond / tr.PerSecond})
	}
	upTo := func(name, limit string, measured, max float64, unit string) benchTarget {
		t := benchTarget{Name: name, Limit: limit, Measured: measured, Unit: unit, Met: measured <= max}
		if !t.Met {
			t.MissedByPercent = round((measured/max-1)*100, 1)
		}
		return t
	}
	atLeast := func(name, limit string, measured, min float64, unit string) benchTarget {
		t := benchTarget{Name: name, Limit: limit, Measured: measured, Unit: unit, Met: measured >= min}
		if !t.Met {
			t.MissedByPercent = round((1-measured/min)*100, 1)
		}
		return t
	}
	// Issue 20's targets (round 3); the allocation baselines are round 5's
	// a2ad process at concurrency 64 (docs/benchmarks.md).
	if d, ok := at(rep.Delegation, 1); ok {
		rep.Targets = append(rep.Targets,
			upTo("delegation p50 at concurrency 1", "at most 1.2 ms", d.P50us, 1200, "µs"),
			upTo("delegation p99 at concurrency 1", "at most 4 ms", d.P99us, 4000, "µs"))
	}
	if d, ok := at(rep.Delegation, 64); ok {
		name := "delegations per second at concurrency 64"
		if !rep.Processes {
			name += " (in process; the target is out of process, --processes)"
		}
		rep.Targets = append(rep.Targets, atLeast(name, "at least 2000", d.PerSecond, 2000, "/s"))
		if tr, ok := at(rep.Trivial, 64); ok && d.A2AD != nil && tr.Peer != nil && tr.Peer.CPUusPerOp > 0 {
			rep.Targets = append(rep.Targets,
				upTo("a2ad CPU per delegation / trivial MCP server's per call at concurrency 64", "at most 2×", round(d.A2AD.CPUusPerOp/tr.Peer.CPUusPerOp, 2), 2, "×"),
				upTo("a2ad allocations per delegation at concurrency 64", "at most half of round 5's 3,981", round(d.A2AD.MallocsPerOp, 0), benchRound5Mallocs/2, "objects"),
				upTo("a2ad bytes allocated per delegation at concurrency 64", "at most half of round 5's 896.6 KB", round(d.A2AD.AllocBytesPerOp/1024, 1), benchRound5KB/2, "KB"))
		}
	}
	if h := rep.History; h != nil {
		scale := fmt.Sprintf(" (%d open, %d ended)", h.Open, h.Ended)
		rep.Targets = append(rep.Targets,
			upTo("admin list page at 1,000,000 tasks"+scale, "at most 50 ms", h.ListPageMs, 50, "ms"),
			upTo("restart with 100,000 open and 1,000,000 ended tasks: serving"+scale, "at most 2 s", h.ServingSeconds, 2, "s"),
			upTo("restart with 100,000 open and 1,000,000 ended tasks: every open task tracked"+scale, "at most 10 s", h.TrackedSeconds, 10, "s"))
		if h.Ended > 0 {
			rep.Targets = append(rep.Targets, upTo("a2ad heap per ended task, embedded NATS's excluded (memory grows with open tasks only)"+scale, "at most 1 B",
				h.OwnPerEnded, 1, "B"))
		}
	}
	if iso := rep.Isolation; iso != nil {
		rep.Targets = append(rep.Targets,
			upTo("delegation p50 while a hostile agent floods / idle", "at most 2×", iso.P50Ratio, 2, "×"),
			upTo("delegation p99 while a hostile agent floods / idle", "at most 2×", iso.P99Ratio, 2, "×"))
	}
	if i := slices.IndexFunc(rep.Ratios, func(r benchRatios) bool { return r.Concurrency == 1 }); i >= 0 {
		r := rep.Ratios[i]
		rep.Targets = append(rep.Targets,
			upTo("delegation p50 / raw NATS p50 at concurrency 1", "at most 8×", round(r.P50OverNATS, 2), 8, "×"),
			upTo("delegation p50 / trivial MCP call p50 at concurrency 1", "at most 3×", round(r.P50OverTrivial, 2), 3, "×"))
	}
}

// print writes the report as tables.
func (rep *benchReport) print(w io.Writer) error {
	race := "off"
	if rep.Race {
		race = "ON (figures are not representative)"
	}
	mem := rep.MemoryLimitSource
	if !strings.HasPrefix(mem, "none") {
		mem = fmt.Sprintf("%.0f MiB (%s)", float64(rep.MemoryLimit)/(1<<20), rep.MemoryLimitSource)
	}
	fmt.Fprintf(w, "a2ad bench: %s %s, GOMAXPROCS %d (%d CPUs, %s), race detector %s, load average %s\n",
		rep.GoVersion, rep.OSArch, rep.GOMAXPROCS, rep.NumCPU, rep.CPUModel, race, rep.LoadAverage)
	fmt.Fprintf(w, "Go GC target %s, memory limit %s\n", rep.GOGC, mem)
	fmt.Fprintf(w, "each latency measurement: %s after a %s warm-up; concurrency N = N hosts, each its own token, session and connections\n",
		rep.Duration, rep.Warmup)
	if rep.Processes {
		fmt.Fprintln(w, "a2ad and the peer (agents, trivial MCP server) in child processes; CPU µs/op and KB alloc/op: this process's (hosts, NATS echo)")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round trip\tconcurrency\tops\tp50 µs\tp99 µs\tper second\tCPU µs/op\tKB alloc/op\tmachine CPU µs/op\t")
	rows := []struct {
		name string
		figs []benchFigures
	}{{"raw NATS request-reply, 1 KB, TCP", rep.NATS}, {"trivial MCP tool call", rep.Trivial},
		{"delegation to completed, agent: 1 event", rep.Delegation}, {"delegation to completed, agent: 3 events", rep.DelegationThreeEvents},
		{"delegation to completed, HTTP agent (JSON-RPC, stream)", rep.DelegationHTTP}}
	for _, s := range rows {
		for _, f := range s.figs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.0f\t%.0f\t%.1f\t%.0f\t\n", s.name, f.Concurrency, f.Ops, f.P50us, f.P99us, f.PerSecond,
				f.CPUusPerOp, f.AllocBytesPerOp/1024, f.MachineCPUusPerOp)
		}
	}
	if rep.Processes {
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t")
		fmt.Fprintln(tw, "per process, per op\tconcurrency\ta2ad CPU µs\ta2ad KB\ta2ad allocs\tpeer CPU µs\tpeer KB\tpeer allocs\tall 3 CPU µs\tmachine CPU µs\t")
		for _, s := range rows {
			for _, f := range s.figs {
				printProcessRow(tw, s.name, f)
			}
		}
	}
	fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t")
	fmt.Fprintln(tw, "delegation (agent: 1 event) ÷ floor\tconcurrency\tp50\tp99\tper second\t\t\t\t\t")
	for _, r := range rep.Ratios {
		fmt.Fprintf(tw, "÷ raw NATS\t%d\t%.2f×\t%.2f×\t\t\t\t\t\t\n", r.Concurrency, r.P50OverNATS, r.P99OverNATS)
		fmt.Fprintf(tw, "÷ trivial MCP call\t%d\t%.2f×\t%.2f×\t%.2f×\t\t\t\t\t\n", r.Concurrency, r.P50OverTrivial, r.P99OverTrivial, r.RateOverTrivial)
	}
	if iso := rep.Isolation; iso != nil {
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t")
		fmt.Fprintln(tw, "delegation (agent: 1 event), one host\tconcurrency\tops\tp50 µs\tp99 µs\tper second\tCPU µs/op\tKB alloc/op\tmachine CPU µs/op\t")
		isoRows := []struct {
			name string
			f    benchFigures
		}{{"other agents quiet", iso.Idle}, {benchHostile + " flooding", iso.Flooded}}
		for _, row := range isoRows {
			f := row.f
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.0f\t%.0f\t%.1f\t%.0f\t\n", row.name, f.Concurrency, f.Ops, f.P50us, f.P99us, f.PerSecond,
				f.CPUusPerOp, f.AllocBytesPerOp/1024, f.MachineCPUusPerOp)
		}
		if rep.Processes {
			for _, row := range isoRows {
				printProcessRow(tw, row.name, row.f)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if iso := rep.Isolation; iso != nil {
		fmt.Fprintf(w, "\n%s's flood (events for tasks that do not exist, as fast as its limits allow): %.0f/s stored, %.0f/s refused by JetStream; "+
			"honest delegation flooded ÷ idle: p50 %.2f×, p99 %.2f×\n", benchHostile, iso.FloodStoredPerSecond, iso.FloodRefusedPerSecond, iso.P50Ratio, iso.P99Ratio)
	}
	ot := rep.OpenTasks
	fmt.Fprintf(w, "\n%d open tasks: created in %.2f s (%.0f/s, %d concurrent Store.Create); a fresh store loaded and scheduled them in %.2f s\n",
		ot.Tasks, ot.CreateSeconds, ot.CreatesPerSecond, benchTaskWriters, ot.LoadSeconds)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Fprintf(w, "heap in use: a2ad's share (store and schedule) %+.1f MiB (%.0f B/task); over the empty server, embedded NATS included, "+
		"%+.1f MiB right after the load (%.0f B/task) and %+.1f MiB once NATS's block cache let go (%.0f B/task)\n",
		mib(ot.TrackedHeapBytes), ot.TrackedPerTask, mib(ot.LoadedHeapBytes), ot.LoadedPerTask, mib(ot.SettledHeapBytes), ot.SettledPerTask)
	if h := rep.History; h != nil {
		fmt.Fprintf(w, "\nthe store at scale, %d open and %d ended tasks (stored in %.1f s): a restarted daemon served in %.2f s and tracked every open task in %.2f s; "+
			"heap %+.1f MiB (%.0f B/task); admin list page of 50: %.1f ms, open ones only (state=submitted): %.1f ms\n",
			h.Open, h.Ended, h.CreateSeconds, h.ServingSeconds, h.TrackedSeconds, mib(h.HeapBytes), h.HeapPerTask, h.ListPageMs, h.ListOpenPageMs)
		fmt.Fprintf(w, "each ended task adds %.1f B to a2ad's heap and %.1f B to the embedded NATS server's (its per-subject index of the bucket; an external NATS holds it in its own process); "+
			"the whole process, %.0f B less a2ad's share per open task: %.0f B\n",
			h.OwnPerEnded, h.NATSPerEnded, rep.OpenTasks.TrackedPerTask, h.EndedHeapPerTask(rep.OpenTasks.TrackedPerTask))
	}
	for _, v := range rep.Validations {
		fmt.Fprintf(w, "artifact validations (risk_assessment, %d B), %d goroutine(s): %.0f/s\n", v.ArtifactBytes, v.Goroutines, v.PerSecond)
	}
	fmt.Fprintln(w, "\ntargets")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range rep.Targets {
		verdict := "met"
		if !t.Met {
			verdict = fmt.Sprintf("MISSED by %.0f%%", t.MissedByPercent)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s %s\t%s\n", t.Name, t.Limit, strconv.FormatFloat(t.Measured, 'f', -1, 64), t.Unit, verdict)
	}
	return tw.Flush()
}

// printProcessRow writes f's per-process figures (--processes): a2ad's
// and the peer's CPU µs, KB and allocations per operation, the CPU of the
// three processes together, and the machine's.
func printProcessRow(tw io.Writer, name string, f benchFigures) {
	if f.A2AD == nil || f.Peer == nil {
		return
	}
	a, p := f.A2AD, f.Peer
	fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t\n", name, f.Concurrency, a.CPUusPerOp, a.AllocBytesPerOp/1024, a.MallocsPerOp,
		p.CPUusPerOp, p.AllocBytesPerOp/1024, p.MallocsPerOp, a.CPUusPerOp+p.CPUusPerOp+f.CPUusPerOp, f.MachineCPUusPerOp)
}

// cpuModel is the first "model name" of /proc/cpuinfo, or GOARCH.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// loadAverage is /proc/loadavg's first three fields, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// raceEnabled reports whether this binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
