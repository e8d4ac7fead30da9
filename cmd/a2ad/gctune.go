package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// guardedGCPercent is the Go GC target a2ad runs with when a memory limit
// guards the heap and GOGC is not set: the heap may grow to five times
// what is live before a collection. At the runtime's default of 100 the
// collector took about a sixth of a delegation's CPU; 400 bought 20-25 %
// more delegations a second at concurrency 64 and brought p99 at
// concurrency 1 from about 6 to about 4 ms (docs/benchmarks.md). Without a
// limit it is not set: the peak heap grows with the target (a2ad bench's
// process peaked at 1.3-2.0 GB against 0.46 GB at 100).
const guardedGCPercent = 400

// memoryLimitRatio is the share of the cgroup memory limit (a container's
// or a systemd unit's MemoryMax) a2ad sets as the Go soft memory limit
// (GOMEMLIMIT) when GOMEMLIMIT is not set: near it the collector runs as
// often as it must, whatever the GC target.
const memoryLimitRatio = 0.9

// gcSettings is what tuneGC decided, for the startup log and the bench
// report.
type gcSettings struct {
	// GCPercent is the GC target in effect: guardedGCPercent, 100 (Go's
	// default, no memory limit), or -1 when GOGC is set in the
	// environment (the runtime applied it).
	GCPercent int
	// GOGC is the environment's GOGC, if set.
	GOGC string
	// MemoryLimit is the soft memory limit in effect in bytes, from the
	// cgroup or GOMEMLIMIT; 0 when there is none.
	MemoryLimit int64
	// FromCgroup reports whether tuneGC set MemoryLimit from the cgroup.
	FromCgroup bool
}

// tuneGC sets the soft memory limit to memoryLimitRatio of the cgroup
// memory limit unless GOMEMLIMIT is set or AUTOMEMLIMIT=off
// (github.com/KimMachineGun/automemlimit reads the limit, cgroup v1 or
// v2); then, if a memory limit is in effect (that one or GOMEMLIMIT's) and
// GOGC is not set, the GC target to guardedGCPercent. Process-wide: called
// once by the commands that run a2ad (serve, demo, bench), before it
// starts. A cgroup limit that cannot be read is logged and left unset.
func tuneGC(log *slog.Logger) gcSettings {
	var s gcSettings
	limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil {
		log.Warn("Go memory limit not set from the cgroup", "err", err)
	}
	s.FromCgroup = limit > 0
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 { // -1 reads it
		s.MemoryLimit = cur
	}
	switch v, ok := os.LookupEnv("GOGC"); {
	case ok:
		s.GCPercent, s.GOGC = -1, v
	case s.MemoryLimit > 0:
		debug.SetGCPercent(guardedGCPercent)
		s.GCPercent = guardedGCPercent
	default:
		s.GCPercent = 100
	}
	return s
}

// describe is the GC target in a few words, e.g. "400 (a2ad default under
// a memory limit)" or "150 (environment)".
func (s gcSettings) describe() string {
	switch {
	case s.GCPercent < 0:
		return s.GOGC + " (environment)"
	case s.GCPercent == guardedGCPercent:
		return fmt.Sprintf("%d (a2ad default under a memory limit)", s.GCPercent)
	}
	return fmt.Sprintf("%d (Go default: no memory limit)", s.GCPercent)
}

// logAttrs are s as log attributes.
func (s gcSettings) logAttrs() []any {
	mem := "none (no cgroup memory limit and no GOMEMLIMIT)"
	switch {
	case s.FromCgroup:
		mem = fmt.Sprintf("%.0f%% of the cgroup memory limit", memoryLimitRatio*100)
	case s.MemoryLimit > 0:
		mem = "GOMEMLIMIT (environment)"
	}
	return []any{"go_gc_percent", s.describe(), "go_memory_limit", mem, "go_memory_limit_bytes", s.MemoryLimit}
}
