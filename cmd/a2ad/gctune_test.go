package main

import (
	"io"
	"log/slog"
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

func TestTuneGC(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(before) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("default", func(t *testing.T) {
		unsetenv(t, "GOGC")
		t.Setenv("GOMEMLIMIT", "1GiB") // a limit of its own: no cgroup lookup
		debug.SetGCPercent(100)
		s := tuneGC(log)
		if got := gcPercent(); got != 400 || s.GCPercent != 400 || s.describe() != "400 (a2ad default)" {
			t.Errorf("GC target %d, settings %+v (%q); want 400, a2ad's default", got, s, s.describe())
		}
		if s.MemoryLimit != 0 {
			t.Errorf("memory limit %d with GOMEMLIMIT set; want 0 (the environment's applies)", s.MemoryLimit)
		}
	})
	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "150")
		t.Setenv("AUTOMEMLIMIT", "off")
		debug.SetGCPercent(150) // what the runtime took from GOGC at start
		s := tuneGC(log)
		if got := gcPercent(); got != 150 || s.describe() != "150 (environment)" || s.MemoryLimit != 0 {
			t.Errorf("GC target %d, settings %+v (%q); want 150 left as the environment set it, no memory limit", got, s, s.describe())
		}
	})
}
