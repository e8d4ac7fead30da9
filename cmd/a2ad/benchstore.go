package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// benchHistory is the store at scale (issue 20, point 3): a daemon
// restarted over a task bucket holding Open open and Ended ended task
// records, as a2ad's bucket holds after months of work, and the admin list
// over it.
//
//   - ServingSeconds: from daemon.Start to the first answer of an
//     authenticated read of the admin API (GET /v1/agents, which reads no
//     task): hosts and operators are served.
//   - TrackedSeconds: from daemon.Start until its store's watcher has
//     delivered every stored record (readiness "loaded": every open task's
//     deadline scheduled).
//   - HeapBytes: the process's HeapInuse once loaded and settled
//     (benchCacheExpiry later), minus that of the first daemon over its
//     empty bucket: what the records cost a2ad, embedded NATS included;
//     HeapPerTask divides it by Open+Ended.
//   - ListPageMs: the median of benchListPages admin list pages
//     (GET /v1/tasks?limit=50), ListOpenPageMs with state=submitted (the
//     open ones only).
//   - OwnPerEnded and NATSPerEnded: what each ended task adds to the live
//     heap of a2ad (every allocation but the embedded NATS server's) and
//     to that of the embedded NATS server (an allocation with a frame of
//     nats-server in its stack), from the memory profile ([heapSplit]) of
//     two more daemons, untimed, each in a process of its own (`a2ad
//     bench-heap`, so that nothing of the daemons before counts): one over
//     the open tasks alone, before the ended ones are stored, and one over
//     all of them at the end; the difference divided by Ended.
type benchHistory struct {
	Open           int     `json:"open_tasks"`
	Ended          int     `json:"ended_tasks"`
	CreateSeconds  float64 `json:"create_seconds"`
	ServingSeconds float64 `json:"serving_seconds"`
	TrackedSeconds float64 `json:"tracked_seconds"`
	HeapBytes      int64   `json:"heap_bytes"`
	HeapPerTask    float64 `json:"heap_bytes_per_task"`
	ListPageMs     float64 `json:"list_page_ms"`
	ListOpenPageMs float64 `json:"list_open_page_ms"`
	OwnPerEnded    float64 `json:"a2ad_heap_bytes_per_ended_task"`
	NATSPerEnded   float64 `json:"nats_heap_bytes_per_ended_task"`
}

// benchListPages is how many admin list pages each list figure is the
// median of.
const benchListPages = 3

// history measures benchHistory with open and ended task records in a
// daemon of its own in dir: a first daemon's bucket is filled directly
// (task.Store.Create over NATS as the daemon's user, benchTaskWriters at
// a time: the broker would take hours for a million), then that daemon
// stops and a second one starts on the same data directory.
func history(ctx context.Context, dir string, open, ended int, progress io.Writer, log *slog.Logger) (benchHistory, error) {
	out := benchHistory{Open: open, Ended: ended}
	cfg := inProcessConfig(dir, "")
	d, err := daemon.Start(ctx, cfg, log, true)
	if err != nil {
		return out, err
	}
	select {
	case <-d.Service.Tasks.Loaded():
	case <-ctx.Done():
		d.Stop()
		return out, ctx.Err()
	}
	empty := heapInuse()
	start := time.Now()
	err = fillBucket(ctx, d.NATSURL, dir, 0, open, false)
	d.Stop()
	if err != nil {
		return out, err
	}
	created := time.Since(start)
	// The open tasks alone, profiled; then the ended ones stored beside.
	var openOnly heapProfile
	if ended > 0 {
		if openOnly, err = benchHeap(ctx, dir); err != nil {
			return out, err
		}
	}
	if d, err = daemon.Start(ctx, cfg, log, true); err != nil {
		return out, err
	}
	start = time.Now()
	err = fillBucket(ctx, d.NATSURL, dir, open, open+ended, true)
	d.Stop()
	if err != nil {
		return out, err
	}
	out.CreateSeconds = round((created + time.Since(start)).Seconds(), 3)
	fmt.Fprintf(progress, "bench: stored %d open and %d ended tasks in %.1f s; restarting\n", open, ended, out.CreateSeconds)

	start = time.Now()
	d, err = daemon.Start(ctx, cfg, log, true)
	if err != nil {
		return out, err
	}
	defer d.Stop()
	tok, err := mcpedge.MintDevToken(dir, d.Auth.Audience(), "bench-operator", "default", mcpedge.ScopeAdmin, time.Hour)
	if err != nil {
		return out, err
	}
	get := func(path string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.HTTPURL+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("bench: GET %s: %s", path, resp.Status)
		}
		return nil
	}
	for {
		if err := get("/v1/agents"); err == nil {
			break
		} else if time.Since(start) > time.Minute || ctx.Err() != nil {
			return out, fmt.Errorf("bench: the restarted daemon does not serve: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	out.ServingSeconds = round(time.Since(start).Seconds(), 3)
	select {
	case <-d.Service.Tasks.Loaded():
	case <-ctx.Done():
		return out, ctx.Err()
	}
	out.TrackedSeconds = round(time.Since(start).Seconds(), 3)
	if n := d.Service.Tasks.Open(); n != open {
		return out, fmt.Errorf("bench: the restarted daemon tracks %d open tasks, want %d", n, open)
	}
	if err := sleepCtx(ctx, benchCacheExpiry); err != nil {
		return out, err
	}
	out.HeapBytes = heapInuse() - empty
	out.HeapPerTask = round(float64(out.HeapBytes)/float64(max(1, open+ended)), 1)
	fmt.Fprintln(progress, "bench: admin list pages")
	page := func(path string) (float64, error) {
		var ms []float64
		for range benchListPages {
			t0 := time.Now()
			if err := get(path); err != nil {
				return 0, err
			}
			ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
		}
		slices.Sort(ms)
		return round(ms[len(ms)/2], 2), nil
	}
	if out.ListPageMs, err = page("/v1/tasks?limit=50"); err != nil {
		return out, err
	}
	if out.ListOpenPageMs, err = page("/v1/tasks?limit=50&state=submitted"); err != nil {
		return out, err
	}
	d.Stop()
	if ended > 0 {
		fmt.Fprintln(progress, "bench: the heap per ended task, profiled")
		all, err := benchHeap(ctx, dir)
		if err != nil {
			return out, err
		}
		out.OwnPerEnded = round(float64(all.Own-openOnly.Own)/float64(ended), 1)
		out.NATSPerEnded = round(float64(all.NATS-openOnly.NATS)/float64(ended), 1)
	}
	return out, nil
}

// heapProfile is the live heap as the memory profile samples it, scaled
// as pprof scales it: nats the allocations with a frame of the NATS server
// (github.com/nats-io/nats-server) in their stack, own every other.
type heapProfile struct {
	NATS int64 `json:"nats"`
	Own  int64 `json:"own"`
}

// benchHeapProfileRate is the memory profile's sampling interval while a
// profiled daemon starts and loads (bytes): at one sample per KiB
// allocated, the sampling noise of the difference of two heaps of about
// 100 MiB is near half a megabyte (the square root of twice the heap times
// the rate), half a byte per ended task at a million.
const benchHeapProfileRate = 1024

// benchHeap runs `a2ad bench-heap --dir dir` (this binary) and returns
// the heap profile it prints.
func benchHeap(ctx context.Context, dir string) (heapProfile, error) {
	var hp heapProfile
	exe, err := os.Executable()
	if err != nil {
		return hp, fmt.Errorf("bench: the heap per ended task runs this binary: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, "bench-heap", "--dir", dir)
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return hp, fmt.Errorf("bench: bench-heap: %w\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(b, &hp); err != nil {
		return hp, fmt.Errorf("bench: bench-heap printed %q: %w", b, err)
	}
	return hp, nil
}

func newBenchHeap() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "bench-heap",
		Short:  "Print the heap profile of a daemon loaded over --dir, split into embedded NATS's and a2ad's (started by `a2ad bench`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			runtime.MemProfileRate = benchHeapProfileRate // before anything it counts
			if dir == "" {
				return usageError("bench-heap: --dir is required")
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			tuneGC(log) // as the bench runs
			hp, err := profiledDaemon(cmd.Context(), inProcessConfig(dir, ""), log)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(hp)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the bench's data directory")
	return cmd
}

// profiledDaemon starts a daemon on cfg, waits until it has loaded and its
// caches have let go (benchCacheExpiry), and returns its heap profile
// (the memory profile rate set by the caller). Nothing is timed.
func profiledDaemon(ctx context.Context, cfg daemon.Config, log *slog.Logger) (heapProfile, error) {
	d, err := daemon.Start(ctx, cfg, log, true)
	if err != nil {
		return heapProfile{}, err
	}
	defer d.Stop()
	select {
	case <-d.Service.Tasks.Loaded():
	case <-ctx.Done():
		return heapProfile{}, ctx.Err()
	}
	if err := sleepCtx(ctx, benchCacheExpiry); err != nil {
		return heapProfile{}, err
	}
	return heapSplit(), nil
}

// heapSplit reads the memory profile after two collections (the profile
// is as of the last one) and sums the live bytes of each record, scaled by
// 1/(1-exp(-size/rate)) with the record's mean object size, as pprof does.
func heapSplit() heapProfile {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for n, _ := runtime.MemProfile(nil, false); ; {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var out heapProfile
	for _, r := range recs {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs <= 0 || bytes <= 0 {
			continue
		}
		scaled := int64(float64(bytes) / (1 - math.Exp(-float64(bytes)/float64(objs)/rate)))
		if inNATSServer(r.Stack()) {
			out.NATS += scaled
		} else {
			out.Own += scaled
		}
	}
	return out
}

// inNATSServer reports whether a stack has a frame of the NATS server.
func inNATSServer(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/nats-io/nats-server/") {
			return true
		}
		if !more {
			return false
		}
	}
}

// fillBucket stores the task records numbered from to to-1 (openTaskRecord),
// open submitted ones or, with ended, completed ones, in the bucket of the
// daemon at natsURL (its data directory dir holds the daemon user's
// password).
func fillBucket(ctx context.Context, natsURL, dir string, from, to int, ended bool) error {
	pw, err := os.ReadFile(daemon.DaemonPasswordPath(dir))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL, nats.UserInfo(embedded.DaemonUser, strings.TrimSpace(string(pw))), nats.Name("a2ad-bench-history"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := task.NewStore(wctx, js, 1, nil)
	if err != nil {
		return err
	}
	total := int64(to)
	var next atomic.Int64
	next.Store(int64(from))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(int64(benchTaskWriters), total-int64(from)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < total && ctx.Err() == nil; i = next.Add(1) - 1 {
				// Created as it is written, as a2ad creates tasks: the
				// admin list relies on it (a task is created before its
				// last write).
				now := time.Now().UTC()
				r := openTaskRecord(i, now)
				if ended {
					endTaskRecord(r, now)
				}
				if err := w.Create(ctx, r); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// endTaskRecord makes r a task the agent completed at now: working, then
// completed, its artifact accepted.
func endTaskRecord(r *task.Record, now time.Time) {
	r.State, r.EndedAt = task.Completed, now
	r.History = append(r.History,
		task.Transition{At: now, From: task.Submitted, To: task.Working, Event: "status", Source: task.SourceAgent, By: r.AgentID},
		task.Transition{At: now, From: task.Working, To: task.Completed, Event: "status", Source: task.SourceAgent, By: r.AgentID})
}

// EndedHeapPerTask is the heap the ended tasks cost per ended task: the
// whole HeapBytes less openPerTask (a2ad's share per open task, measured
// by openTasks) for each open one; 0 without ended tasks.
func (h benchHistory) EndedHeapPerTask(openPerTask float64) float64 {
	if h.Ended == 0 {
		return 0
	}
	return round(max(0, float64(h.HeapBytes)-openPerTask*float64(h.Open))/float64(h.Ended), 1)
}
