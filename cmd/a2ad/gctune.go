package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// defaultGCPercent is the Go GC target a2ad runs with unless GOGC is set:
// the heap may grow to five times what is live before a collection. The
// runtime's default of 100 spent about a sixth of a delegation's CPU in
// the collector; 400 bought 20-25 % more delegations a second at
// concurrency 64 and brought p99 at concurrency 1 from 5.8 to 4.2 ms
// (docs/benchmarks.md). a2ad's live heap is small (about 40 MB with
// 100,000 open tasks, embedded NATS included), so the price is a bigger,
// still bounded heap; memoryLimitRatio caps it in a container.
const defaultGCPercent = 400

// memoryLimitRatio is the share of the cgroup memory limit (a container's
// or a systemd unit's MemoryMax) a2ad sets as the Go soft memory limit
// (GOMEMLIMIT) when GOMEMLIMIT is not set: near it the collector runs as
// often as it must, whatever the GC target.
const memoryLimitRatio = 0.9

// gcSettings is what tuneGC decided, for the startup log.
type gcSettings struct {
	// GCPercent is the GC target in effect: defaultGCPercent, or -1 when
	// GOGC is set in the environment (the runtime applied it).
	GCPercent int
	// GOGC is the environment's GOGC, if set.
	GOGC string
	// MemoryLimit is the soft memory limit set from the cgroup, in bytes;
	// 0 when none was set (GOMEMLIMIT set, AUTOMEMLIMIT=off, no cgroup
	// limit, or no cgroup).
	MemoryLimit int64
}

// tuneGC sets the Go runtime's GC target to defaultGCPercent unless GOGC
// is set, and the soft memory limit to memoryLimitRatio of the cgroup
// memory limit unless GOMEMLIMIT is set or AUTOMEMLIMIT=off
// (github.com/KimMachineGun/automemlimit reads the limit, cgroup v1 or
// v2). Process-wide: called once by the commands that run a2ad (serve,
// demo, bench), before it starts. A limit that cannot be read is logged
// and left unset.
func tuneGC(log *slog.Logger) gcSettings {
	var s gcSettings
	if v, ok := os.LookupEnv("GOGC"); ok {
		s.GCPercent, s.GOGC = -1, v
	} else {
		debug.SetGCPercent(defaultGCPercent)
		s.GCPercent = defaultGCPercent
	}
	limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil {
		log.Warn("Go memory limit not set from the cgroup", "err", err)
	}
	s.MemoryLimit = limit
	return s
}

// describe is the GC target in a few words: "400 (a2ad default)" or
// "150 (environment)".
func (s gcSettings) describe() string {
	if s.GCPercent >= 0 {
		return fmt.Sprintf("%d (a2ad default)", s.GCPercent)
	}
	return s.GOGC + " (environment)"
}

// logAttrs are s as log attributes.
func (s gcSettings) logAttrs() []any {
	gc := "GOGC=" + s.GOGC + " (environment)"
	if s.GCPercent >= 0 {
		gc = fmt.Sprintf("%d (a2ad default; set GOGC to change)", s.GCPercent)
	}
	mem := "none (no cgroup memory limit, or GOMEMLIMIT or AUTOMEMLIMIT set)"
	if s.MemoryLimit > 0 {
		mem = fmt.Sprintf("%.0f%% of the cgroup memory limit", memoryLimitRatio*100)
	}
	return []any{"go_gc_percent", gc, "go_memory_limit", mem, "go_memory_limit_bytes", s.MemoryLimit}
}
