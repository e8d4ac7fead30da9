package main

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// unsetenv removes name for the test and restores it afterwards.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // registers the restore
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// gcPercent reads the runtime's GC target without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTuneGC: the larger GC target only under a memory limit, never over
// an operator's GOGC. The GOMEMLIMIT environment variable is read by the
// runtime at start only, so the test sets the limit the runtime would
// have taken from it as well.
func TestTuneGC(t *testing.T) {
	percent, limit := gcPercent(), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("memory limit", func(t *testing.T) {
		unsetenv(t, "GOGC")
		t.Setenv("GOMEMLIMIT", "1GiB")
		debug.SetMemoryLimit(1 << 30)
		debug.SetGCPercent(100)
		s := tuneGC(log)
		if got := gcPercent(); got != 400 || s.describe() != "400 (a2ad default under a memory limit)" || s.MemoryLimit != 1<<30 || s.FromCgroup {
			t.Errorf("GC target %d, settings %+v (%q); want 400 under GOMEMLIMIT's 1 GiB", got, s, s.describe())
		}
	})
	t.Run("no memory limit", func(t *testing.T) {
		unsetenv(t, "GOGC")
		unsetenv(t, "GOMEMLIMIT")
		t.Setenv("AUTOMEMLIMIT", "off") // whatever cgroup this test runs in
		debug.SetMemoryLimit(math.MaxInt64)
		debug.SetGCPercent(100)
		s := tuneGC(log)
		if got := gcPercent(); got != 100 || s.describe() != "100 (Go default: no memory limit)" || s.MemoryLimit != 0 {
			t.Errorf("GC target %d, settings %+v (%q); want Go's 100 without a memory limit", got, s, s.describe())
		}
	})
	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "150")
		t.Setenv("GOMEMLIMIT", "1GiB")
		debug.SetMemoryLimit(1 << 30)
		debug.SetGCPercent(150) // what the runtime took from GOGC at start
		s := tuneGC(log)
		if got := gcPercent(); got != 150 || s.describe() != "150 (environment)" {
			t.Errorf("GC target %d, settings %+v (%q); want 150 left as the environment set it", got, s, s.describe())
		}
	})
}
