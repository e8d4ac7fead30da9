package audit_test

import (
	"context"
	"github.com/a2ad/a2ad/internal/testlog"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream gets a byte cap by default, 1 GiB, oldest records first; -1
// lifts it; other negative sizes are refused before anything is created.
func TestStreamSizeCap(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxBytes int64
		want     int64
	}{
		{"default", 0, 1 << 30},
		{"no cap", -1, -1},
		{"configured", 64 << 20, 64 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, js := natstest.Start(t)
			ctx := context.Background()
			st, drift, err := audit.EnsureStream(ctx, js, audit.Config{MaxBytes: c.maxBytes}, 1)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			if cfg.MaxBytes != c.want || cfg.Discard != jetstream.DiscardOld || cfg.MaxAge != audit.DefaultMaxAge || len(drift) != 0 {
				t.Errorf("max_bytes %d, discard %v, max_age %s, drift %v; want %d, old, %s, none", cfg.MaxBytes, cfg.Discard, cfg.MaxAge, drift, c.want, audit.DefaultMaxAge)
			}
		})
	}
	_, _, js := natstest.Start(t)
	if _, _, err := audit.EnsureStream(context.Background(), js, audit.Config{MaxBytes: -2}, 1); err == nil || !strings.Contains(err.Error(), "max_bytes -2") {
		t.Errorf("max_bytes -2: %v, want an error naming it", err)
	}
	if _, err := js.Stream(context.Background(), audit.Stream); err == nil {
		t.Error("a stream was created for max_bytes -2")
	}
}

// An existing stream with other settings is left as it is: Open logs one
// warning naming each setting, both values and the nats command that
// applies them, and the trail works on. ApplyStream, for a user allowed to
// update the stream, applies them.
func TestAnExistingStreamIsNotChangedButReported(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: audit.Stream, Subjects: []string{audit.SubjectPrefix + ".>"},
		Storage: jetstream.FileStorage, MaxAge: time.Hour, MaxBytes: -1, Discard: jetstream.DiscardNew, DenyPurge: true}); err != nil {
		t.Fatal(err)
	}
	var logged testlog.Buffer
	cfg := audit.Config{MaxAge: audit.Duration(2160 * time.Hour)}
	l, err := audit.Open(ctx, js, cfg, 1, "test/1", slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	l.Append(audit.Record{Kind: audit.KindTransition, TaskID: "tsk-1"})
	l.Close(10 * time.Second)
	if l.Written() != 1 {
		t.Errorf("written %d, want 1", l.Written())
	}
	st, _ := js.Stream(ctx, audit.Stream)
	if got := st.CachedInfo().Config; got.MaxAge != time.Hour || got.MaxBytes != -1 || got.Discard != jetstream.DiscardNew || got.DenyDelete {
		t.Errorf("the stream changed: max_age %s, max_bytes %d, discard %v, deny_delete %v", got.MaxAge, got.MaxBytes, got.Discard, got.DenyDelete)
	}
	log := logged.String()
	for _, want := range []string{
		"level=WARN",
		"max_age=1h (configured 2160h), max_bytes=-1 (configured 1073741824), discard=new (configured old), deny_delete=false (configured true)",
		`command="nats stream edit A2AD_AUDIT --max-age=2160h --max-bytes=1073741824 --discard=old --deny-delete"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, log)
	}

	applied, err := audit.ApplyStream(ctx, js, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 4 {
		t.Errorf("applied %v, want the 4 settings that differed", applied)
	}
	st, drift, err := audit.EnsureStream(ctx, js, cfg, 1)
	if err != nil || len(drift) != 0 {
		t.Errorf("after ApplyStream: drift %v, %v", drift, err)
	}
	if got := st.CachedInfo(); got.Config.MaxAge != 2160*time.Hour || got.Config.MaxBytes != 1<<30 || got.State.Msgs != 1 {
		t.Errorf("after ApplyStream: max_age %s, max_bytes %d, %d records", got.Config.MaxAge, got.Config.MaxBytes, got.State.Msgs)
	}
}

func TestEditCommand(t *testing.T) {
	want := jetstream.StreamConfig{MaxAge: 2160 * time.Hour, MaxBytes: -1, Replicas: 3, Discard: jetstream.DiscardOld, DenyDelete: true, DenyPurge: true}
	for _, c := range []struct {
		name string
		have jetstream.StreamConfig
		cmd  string
	}{
		{"same", want, "nats stream edit A2AD_AUDIT"},
		{"age and size", jetstream.StreamConfig{MaxAge: 90 * time.Minute, MaxBytes: 1 << 20, Replicas: 3, DenyDelete: true, DenyPurge: true},
			"nats stream edit A2AD_AUDIT --max-age=2160h --max-bytes=-1"},
		{"replicas and denials", jetstream.StreamConfig{MaxAge: 2160 * time.Hour, MaxBytes: -1, Replicas: 1},
			"nats stream edit A2AD_AUDIT --replicas=3 --deny-delete --deny-purge"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := audit.Diff(c.have, want).EditCommand(); got != c.cmd {
				t.Errorf("got  %s\nwant %s", got, c.cmd)
			}
		})
	}
}
