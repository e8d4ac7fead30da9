package main

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// unsetenv removes name for the test and restores it afterwards.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // registers the restore
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// TestTuneGC: the larger GC target only under a memory limit, never over
// an operator's GOGC, and every setting reported as the runtime has it.
// GOGC and GOMEMLIMIT are read by the runtime at start only, so each case
// also sets what the runtime would have taken from them.
func TestTuneGC(t *testing.T) {
	percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })

	cases := []struct {
		name       string
		env        map[string]string // "" unsets, "<empty>" sets to ""
		runtimeGC  int               // what the runtime took from GOGC at start
		runtimeMem int64             // and from GOMEMLIMIT
		want       gcSettings
		describe   string
		warning    string
	}{
		{"memory limit from GOMEMLIMIT", map[string]string{"GOGC": "", "GOMEMLIMIT": "1GiB"}, 100, 1 << 30,
			gcSettings{400, "a2ad default under a memory limit", 1 << 30, "GOMEMLIMIT"}, "400 (a2ad default under a memory limit)", ""},
		{"no memory limit", map[string]string{"GOGC": "", "GOMEMLIMIT": "", "AUTOMEMLIMIT": "off"}, 100, math.MaxInt64,
			gcSettings{100, "Go default (no memory limit)", 0, "none: AUTOMEMLIMIT=off"}, "100 (Go default (no memory limit))", ""},
		{"GOGC set", map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}, 150, 1 << 30,
			gcSettings{150, "GOGC", 1 << 30, "GOMEMLIMIT"}, "150 (GOGC)", ""},
		{"GOGC off", map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, -1, 1 << 30,
			gcSettings{-1, "GOGC", 1 << 30, "GOMEMLIMIT"}, "off (GOGC)", ""},
		{"GOGC not understood", map[string]string{"GOGC": "garbage", "GOMEMLIMIT": "1GiB"}, 100, 1 << 30,
			gcSettings{100, "Go default (GOGC not understood)", 1 << 30, "GOMEMLIMIT"}, "100 (Go default (GOGC not understood))",
			`msg="GOGC is not a number or off; the Go runtime ignores it and runs at its default" GOGC=garbage`},
		{"GOMEMLIMIT off", map[string]string{"GOGC": "", "GOMEMLIMIT": "off"}, 100, math.MaxInt64,
			gcSettings{100, "Go default (no memory limit)", 0, "none: GOMEMLIMIT=off"}, "100 (Go default (no memory limit))", ""},
		{"GOMEMLIMIT 0", map[string]string{"GOGC": "", "GOMEMLIMIT": "0"}, 100, 0,
			gcSettings{400, "a2ad default under a memory limit", 0, "GOMEMLIMIT"}, "400 (a2ad default under a memory limit)",
			`msg="GOMEMLIMIT is 0: the Go collector runs continuously" GOMEMLIMIT=0`},
		{"GOGC empty is unset", map[string]string{"GOGC": "<empty>", "GOMEMLIMIT": "1GiB"}, 100, 1 << 30,
			gcSettings{400, "a2ad default under a memory limit", 1 << 30, "GOMEMLIMIT"}, "400 (a2ad default under a memory limit)", ""},
		{"AUTOMEMLIMIT not understood", map[string]string{"GOGC": "", "GOMEMLIMIT": "", "AUTOMEMLIMIT": "garbage"}, 100, math.MaxInt64,
			gcSettings{100, "Go default (no memory limit)", 0, "none: the cgroup memory limit could not be used"}, "100 (Go default (no memory limit))",
			`msg="Go memory limit not set from the cgroup; running without a memory limit" err="cannot parse AUTOMEMLIMIT: garbage"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				switch v {
				case "":
					unsetenv(t, k)
				case "<empty>":
					t.Setenv(k, "")
				default:
					t.Setenv(k, v)
				}
			}
			debug.SetGCPercent(c.runtimeGC)
			debug.SetMemoryLimit(c.runtimeMem)
			var logs bytes.Buffer
			s := tuneGC(slog.New(slog.NewTextHandler(&logs, nil)))
			if s != c.want || s.describe() != c.describe {
				t.Errorf("settings %+v (%q), want %+v (%q)", s, s.describe(), c.want, c.describe)
			}
			if got := debug.SetGCPercent(c.runtimeGC); got != c.want.GCPercent {
				t.Errorf("runtime GC target %d, want %d", got, c.want.GCPercent)
			}
			if c.warning == "" && logs.Len() > 0 || !strings.Contains(logs.String(), c.warning) {
				t.Errorf("logs %q, want %q", logs.String(), c.warning)
			}
		})
	}
}

// TestTuneGCRatio: AUTOMEMLIMIT's ratio, and what it is a share of, are
// reported. The machine may have no cgroup memory limit, so automemlimit's
// own fallback to the machine's memory (AUTOMEMLIMIT_EXPERIMENT=system)
// supplies one, and is named as such.
func TestTuneGCRatio(t *testing.T) {
	percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	unsetenv(t, "GOGC")
	unsetenv(t, "GOMEMLIMIT")
	t.Setenv("AUTOMEMLIMIT_EXPERIMENT", "system")
	of := "the cgroup memory limit" // automemlimit falls back to system memory only without one
	if _, err := memlimit.FromCgroup(); err != nil {
		of = "system memory (AUTOMEMLIMIT_EXPERIMENT=system)"
	}
	for ratio, want := range map[string]string{"": "90% of " + of, "0.5": "50% of " + of} {
		if ratio == "" {
			unsetenv(t, "AUTOMEMLIMIT")
		} else {
			t.Setenv("AUTOMEMLIMIT", ratio)
		}
		debug.SetMemoryLimit(math.MaxInt64)
		s := tuneGC(slog.New(slog.DiscardHandler))
		if s.MemorySource != want || s.MemoryLimit <= 0 || s.GCPercent != 400 {
			t.Errorf("AUTOMEMLIMIT=%q: settings %+v, want %q, a limit and GC 400", ratio, s, want)
		}
	}
}
