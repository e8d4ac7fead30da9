package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// guardedGCPercent is the Go GC target a2ad runs with when a memory limit
// guards the heap and GOGC is not set: the heap may grow to five times
// what is live before a collection. At the runtime's default of 100 the
// collector took about 11 % of the CPU at concurrency 64; 400 halved that,
// bought about a fifth more delegations a second and brought p99 at
// concurrency 1 from 5.7-6.7 to 3.9-4.3 ms (docs/benchmarks.md). Without a
// limit it is not set: the peak heap grows with the target (a2ad bench's
// process peaked at 1.15-1.29 GB resident against 0.39 GB at 100).
const guardedGCPercent = 400

// memoryLimitRatio is the share of the cgroup memory limit (a container's
// or a systemd unit's MemoryMax) a2ad sets as the Go soft memory limit
// (GOMEMLIMIT) when GOMEMLIMIT is not set, unless AUTOMEMLIMIT gives
// another ratio: near the limit the collector runs as often as it must,
// whatever the GC target.
const memoryLimitRatio = 0.9

// gcSettings is what tuneGC found and decided, for the startup log and
// the bench report.
type gcSettings struct {
	// GCPercent is the GC target in effect, as the runtime reports it: -1
	// for off.
	GCPercent int
	// GCSource says where GCPercent comes from: "a2ad default under a
	// memory limit", "Go default (no memory limit)" or "GOGC".
	GCSource string
	// MemoryLimit is the soft memory limit in effect in bytes; 0 when
	// there is none (or GOMEMLIMIT=0: MemorySource tells them apart).
	MemoryLimit int64
	// MemorySource says where MemoryLimit comes from, or why there is
	// none (then it starts with "none"): e.g. "90% of the cgroup memory
	// limit", "GOMEMLIMIT", "none: no cgroup memory limit".
	MemorySource string
}

// tuneGC sets the soft memory limit to a ratio of the cgroup memory limit
// (memoryLimitRatio, or AUTOMEMLIMIT's) unless GOMEMLIMIT is set or
// AUTOMEMLIMIT=off (github.com/KimMachineGun/automemlimit reads the limit,
// cgroup v1 or v2); then, if a memory limit is in effect (that one or
// GOMEMLIMIT's) and GOGC is not set, the GC target to guardedGCPercent.
// Process-wide: called once by the commands that run a2ad (serve, demo,
// bench), before it starts. What it cannot use is logged as a warning
// with its consequence: an AUTOMEMLIMIT that does not parse (no limit is
// set), a GOGC the runtime did not understand (the runtime runs at 100).
// A GOMEMLIMIT that does not parse never gets here: the Go runtime stops
// the process before main.
func tuneGC(log *slog.Logger) gcSettings {
	var s gcSettings
	limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil {
		log.Warn("Go memory limit not set from the cgroup; running without a memory limit", "err", err)
	}
	cur := debug.SetMemoryLimit(-1) // a negative value only reads it
	limited := cur != math.MaxInt64
	if limited {
		s.MemoryLimit = cur
	}
	env, gogcSet := os.LookupEnv("GOGC")
	gogcSet = gogcSet && env != "" // the runtime reads an empty GOGC as unset
	auto := os.Getenv("AUTOMEMLIMIT")
	switch _, memSet := os.LookupEnv("GOMEMLIMIT"); {
	case limit > 0:
		ratio := memoryLimitRatio
		if r, err := strconv.ParseFloat(auto, 64); err == nil {
			ratio = r
		}
		of := "the cgroup memory limit"
		if _, err := memlimit.FromCgroup(); err != nil {
			of = "system memory (AUTOMEMLIMIT_EXPERIMENT=system)" // automemlimit's fallback
		}
		s.MemorySource = fmt.Sprintf("%g%% of %s", math.Round(ratio*1000)/10, of)
	case memSet && limited:
		s.MemorySource = "GOMEMLIMIT"
		if cur == 0 {
			log.Warn("GOMEMLIMIT is 0: the Go collector runs continuously", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		}
	case memSet:
		s.MemorySource = "none: GOMEMLIMIT=" + os.Getenv("GOMEMLIMIT")
	case auto == "off":
		s.MemorySource = "none: AUTOMEMLIMIT=off"
	case err != nil:
		s.MemorySource = "none: the cgroup memory limit could not be used"
	default:
		s.MemorySource = "none: no cgroup memory limit"
	}
	switch {
	case gogcSet:
		s.GCSource = "GOGC"
		if env != "off" {
			if _, err := strconv.Atoi(env); err != nil {
				log.Warn("GOGC is not a number or off; the Go runtime ignores it and runs at its default", "GOGC", env)
				s.GCSource = "Go default (GOGC not understood)"
			}
		}
	case limited:
		debug.SetGCPercent(guardedGCPercent)
		s.GCSource = "a2ad default under a memory limit"
	default:
		s.GCSource = "Go default (no memory limit)"
	}
	s.GCPercent = debug.SetGCPercent(100)
	debug.SetGCPercent(s.GCPercent)
	return s
}

// describe is the GC target in a few words, e.g. "400 (a2ad default
// under a memory limit)", "150 (GOGC)" or "off (GOGC)".
func (s gcSettings) describe() string {
	p := strconv.Itoa(s.GCPercent)
	if s.GCPercent < 0 {
		p = "off"
	}
	return p + " (" + s.GCSource + ")"
}

// logAttrs are s as log attributes: numbers and where they come from.
func (s gcSettings) logAttrs() []any {
	return []any{"go_gc_percent", s.GCPercent, "go_gc_source", s.GCSource,
		"go_memory_limit_bytes", s.MemoryLimit, "go_memory_limit_source", s.MemorySource}
}
