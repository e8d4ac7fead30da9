package mcpedge

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The go-sdk's warning that a notification found no stream (a session
// without a GET stream, when the tool list changes) is a debug line; its
// other warnings stay warnings.
func TestSDKLoggerQuietsUndeliveredNotifications(t *testing.T) {
	const undelivered = "calling notifications/tools/list_changed: rejected by transport: undelivered message: stream not connected or already closed"
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out bytes.Buffer
		log := sdkLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level})))
		log.Warn(undelivered)
		log.Warn("calling notifications/tools/list_changed: context deadline exceeded")
		log.With("session", "s1").Warn(undelivered)
		got := out.String()
		lines := strings.Count(got, "\n")
		switch level {
		case slog.LevelInfo:
			if lines != 1 || !strings.Contains(got, "level=WARN") || !strings.Contains(got, "deadline exceeded") {
				t.Errorf("at info:\n%s\nwant only the deadline warning", got)
			}
		case slog.LevelDebug:
			if lines != 3 || strings.Count(got, "level=DEBUG") != 2 || !strings.Contains(got, "session=s1") {
				t.Errorf("at debug:\n%s\nwant the two undelivered ones as DEBUG (one with session=s1), the deadline one as WARN", got)
			}
		}
	}
}
