package audit_test

import (
	"context"
	"strings"
	"testing"

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
			st, err := audit.EnsureStream(ctx, js, audit.Config{MaxBytes: c.maxBytes}, 1)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			if cfg.MaxBytes != c.want || cfg.Discard != jetstream.DiscardOld || cfg.MaxAge != audit.DefaultMaxAge {
				t.Errorf("max_bytes %d, discard %v, max_age %s; want %d, old, %s", cfg.MaxBytes, cfg.Discard, cfg.MaxAge, c.want, audit.DefaultMaxAge)
			}
		})
	}
	_, _, js := natstest.Start(t)
	if _, err := audit.EnsureStream(context.Background(), js, audit.Config{MaxBytes: -2}, 1); err == nil || !strings.Contains(err.Error(), "max_bytes -2") {
		t.Errorf("max_bytes -2: %v, want an error naming it", err)
	}
	if _, err := js.Stream(context.Background(), audit.Stream); err == nil {
		t.Error("a stream was created for max_bytes -2")
	}
}
