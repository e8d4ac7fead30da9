package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
)

// The liveness keys are checked before anything starts: durations, the
// timeout no longer than the period.
func TestLivenessConfigIsChecked(t *testing.T) {
	for _, c := range []struct {
		l    daemon.LivenessConfig
		want string
	}{
		{daemon.LivenessConfig{Period: audit.Duration(time.Second), Timeout: audit.Duration(2 * time.Second)},
			"config: liveness.period 1s, liveness.timeout 2s: want durations such as 5s and 2s (the defaults), the timeout no longer than the period"},
		{daemon.LivenessConfig{Period: audit.Duration(-time.Second)},
			"config: liveness.period -1s, liveness.timeout 0s: want durations such as 5s and 2s (the defaults), the timeout no longer than the period"},
	} {
		_, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), Liveness: c.l}, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		if err == nil || err.Error() != c.want {
			t.Errorf("Start with %+v: %v; want %q", c.l, err, c.want)
		}
	}
}
