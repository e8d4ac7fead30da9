package daemon

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// max_connections is checked against the open-file limit at start: a
// configured value that does not fit is refused saying what to do, the
// default is lowered to fit.
func TestMaxConnectionsFitTheOpenFileLimit(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := DefaultHTTPLimits
	if got, err := fitConnections(0, l, 1<<20, 0, log); err != nil || got.MaxConnections != 8192 {
		t.Errorf("default under a 1 Mi limit: %d %v, want 8192", got.MaxConnections, err)
	}
	if got, err := fitConnections(0, l, 4096, 0, log); err != nil || got.MaxConnections != 4096-1024 {
		t.Errorf("default under a 4096 limit: %d %v, want 3072", got.MaxConnections, err)
	}
	l.MaxConnections = 5000
	_, err := fitConnections(5000, l, 4096, 0, log)
	want := "config: http_limits.max_connections 5000: this process may open 4096 files (RLIMIT_NOFILE) and a2ad keeps 1024 of them for NATS and its store; want at most 3072, or raise the limit (ulimit -n, LimitNOFILE= in the systemd unit)"
	if err == nil || err.Error() != want {
		t.Errorf("5000 configured under a 4096 limit: %v, want %q", err, want)
	}
	if got, err := fitConnections(5000, l, 0, 0, log); err != nil || got.MaxConnections != 5000 {
		t.Errorf("with no known limit: %d %v, want 5000", got.MaxConnections, err)
	}
	// Measured before: under 9,300 files the HTTP default and the
	// reserve fit, the embedded server's 4,096 connections did not, and a
	// flood of both ran a2ad out of files ("accept4: too many open files").
	if got, err := fitConnections(0, DefaultHTTPLimits, 9300, 4096, log); err != nil || got.MaxConnections != 9300-1024-4096 {
		t.Errorf("default under 9,300 files with an embedded server of 4,096 connections: %d %v, want %d", got.MaxConnections, err, 9300-1024-4096)
	}
	_, err = fitConnections(5000, l, 9300, 4096, log)
	want = "config: http_limits.max_connections 5000: this process may open 9300 files (RLIMIT_NOFILE) and a2ad keeps 4096 of them for the embedded NATS server's connections (nats_limits.max_connections) and 1024 for its store; want at most 4180, or raise the limit (ulimit -n, LimitNOFILE= in the systemd unit)"
	if err == nil || err.Error() != want {
		t.Errorf("5000 configured under 9,300 files with the embedded server's 4,096: %v, want %q", err, want)
	}
}

func TestHTTPLimitsCheckNamesTheKey(t *testing.T) {
	for _, c := range []struct {
		l    HTTPLimits
		want string
	}{
		{HTTPLimits{MaxConnections: -1}, "http_limits.max_connections -1: want at least 1"},
		{HTTPLimits{ReadHeaderTimeoutSeconds: 20, ReadTimeoutSeconds: 5}, "http_limits.read_timeout_seconds 5: want at least read_header_timeout_seconds (20)"},
		{HTTPLimits{WriteTimeoutSeconds: -1}, "http_limits.write_timeout_seconds -1: want at least 1"},
		{HTTPLimits{MaxHeaderBytes: 100}, "http_limits.max_header_bytes 100: want at least 4096"},
		{HTTPLimits{MaxBodyBytes: 8 << 20}, "http_limits.max_body_bytes 8388608: want 1024 to 4194304"},
	} {
		err := Config{HTTPLimits: c.l}.checkLimits()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.l, err, c.want)
		}
	}
	if err := DefaultHTTPLimits.Check(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
