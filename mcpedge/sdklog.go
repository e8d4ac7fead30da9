package mcpedge

import (
	"context"
	"log/slog"
	"strings"
)

// sdkLogger is log for the go-sdk, with one warning it logs made a debug
// line: a notification (tools/list_changed when an agent is approved, say)
// that a session could not take because it has no stream open to receive
// it (no GET stream, or it closed). That is how a host that does not
// listen works, not a fault an operator can act on; go-sdk v1.8.0 logs it
// at WARN for every such session, each time the tool list changes.
func sdkLogger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return nil
	}
	return slog.New(quietUndelivered{log.Handler()})
}

type quietUndelivered struct{ slog.Handler }

// undeliveredNotification reports whether r is the go-sdk's warning that
// a notification found no stream to go to.
func undeliveredNotification(r slog.Record) bool {
	return r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "calling notifications/") &&
		strings.Contains(r.Message, "undelivered message")
}

func (h quietUndelivered) Handle(ctx context.Context, r slog.Record) error {
	if undeliveredNotification(r) {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r = r.Clone()
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietUndelivered) WithAttrs(as []slog.Attr) slog.Handler {
	return quietUndelivered{h.Handler.WithAttrs(as)}
}

func (h quietUndelivered) WithGroup(name string) slog.Handler {
	return quietUndelivered{h.Handler.WithGroup(name)}
}
