package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/testlog"
)

// A store too small for what the configuration reserves stops a2ad at
// start, with the sum that does not fit — not a daemon that starts and
// refuses every delegation, nor JetStream's words half-way through.
func TestStoreTooSmallForTheReservationsStopsAtStart(t *testing.T) {
	agents := []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}}}}
	for name, c := range map[string]struct {
		store int64
		want  string
	}{
		"audit alone":       {512 << 20, "config: jetstream_max_store is 536870912 bytes, less than the configuration needs: 1224736768 = replicas 1 × (audit.max_bytes 1073741824 + max_pending_bytes of 1 agents 67108864 + 16777216 for task records) + storage.reserve_bytes 67108864"},
		"audit and reserve": {1100 << 20, "config: jetstream_max_store is 1153433600 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", JetStreamMaxStore: c.store,
				Agents: agents}, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("start: %v, want %q…", err, c.want)
			}
		})
	}
}

// An agent taken out of the configuration leaves its events stream (another
// instance may still serve it): a2ad says so at start, and how to delete it.
func TestUnservedEventsStreamIsReported(t *testing.T) {
	dir := t.TempDir()
	cfg := daemon.Config{DataDir: dir, NATSListen: "127.0.0.1:-1", Agents: []daemon.AgentConfig{
		{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}}},
		{AgentConfig: agentcard.AgentConfig{ID: "retired", Tenants: []string{"default"}}},
	}}
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	d.Stop()
	cfg.Agents = cfg.Agents[:1]
	var logs testlog.Buffer
	d, err = daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if !strings.Contains(logs.String(), "events stream of an agent this a2ad is not configured for") || !strings.Contains(logs.String(), "stream=A2AD_EVENTS_retired") {
		t.Fatalf("log does not report the retired agent's stream:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "stream=A2AD_EVENTS_fraud-review") {
		t.Fatal("the configured agent's stream is reported as unserved")
	}
}
