package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
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
	err = fillBucket(ctx, d.NATSURL, dir, open, ended)
	d.Stop()
	if err != nil {
		return out, err
	}
	out.CreateSeconds = round(time.Since(start).Seconds(), 3)
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
	runtime.KeepAlive(d)
	return out, nil
}

// fillBucket stores open submitted and ended completed task records in the
// bucket of the daemon at natsURL (its data directory dir holds the
// daemon user's password).
func fillBucket(ctx context.Context, natsURL, dir string, open, ended int) error {
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
	total := int64(open + ended)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(int64(benchTaskWriters), total) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < total && ctx.Err() == nil; i = next.Add(1) - 1 {
				// Created as it is written, as a2ad creates tasks: the
				// admin list relies on it (a task is created before its
				// last write).
				now := time.Now().UTC()
				r := openTaskRecord(i, now)
				if i >= int64(open) {
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
