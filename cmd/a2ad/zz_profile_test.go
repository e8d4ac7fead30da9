package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
)

func TestZZProfileRestart(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	dir := os.Getenv("ZZDIR")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	cfg := inProcessConfig(dir, "")
	if os.Getenv("ZZFILL") != "" {
		d, err := daemon.Start(ctx, cfg, log, true)
		if err != nil {
			t.Fatal(err)
		}
		<-d.Service.Tasks.Loaded()
		t0 := time.Now()
		if err := fillBucket(ctx, d.NATSURL, dir, 100000, 1000000); err != nil {
			t.Fatal(err)
		}
		t.Logf("filled in %s", time.Since(t0))
		d.Stop()
	}
	f, _ := os.Create("/tmp/restart.pprof")
	pprof.StartCPUProfile(f)
	t0 := time.Now()
	d, err := daemon.Start(ctx, cfg, log, true)
	if err != nil {
		t.Fatal(err)
	}
	<-d.Service.Tasks.Loaded()
	t.Logf("tracked in %s, open %d", time.Since(t0), d.Service.Tasks.Open())
	pprof.StopCPUProfile()
	time.Sleep(5 * time.Second)
	runtime.GC()
	h, _ := os.Create("/tmp/restart.heap")
	pprof.WriteHeapProfile(h)
	h.Close()
	d.Stop()
}
