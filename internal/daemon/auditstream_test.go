package daemon_test

import (
	"context"
	"github.com/a2ad/a2ad/internal/testlog"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// auditStreamInfo reads A2AD_AUDIT as nc's user sees it.
func auditStreamInfo(t *testing.T, nc *nats.Conn) *jetstream.StreamInfo {
	t.Helper()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// On the embedded server a2ad's configuration is the audit stream's, though
// a2ad's own user may not update it: a changed audit.max_age or max_bytes
// between two starts of one data dir is applied at the second start (by the
// one-shot audit admin), records kept, and nothing is warned.
func TestEmbeddedAuditStreamFollowsTheConfiguration(t *testing.T) {
	dir := t.TempDir()
	start := func(cfg audit.Config) (*daemon.Daemon, *testlog.Buffer) {
		t.Helper()
		var logged testlog.Buffer
		d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dir, NATSListen: "127.0.0.1:-1", Audit: cfg},
			slog.New(slog.NewTextHandler(&logged, nil)), false)
		if err != nil {
			t.Fatal(err)
		}
		return d, &logged
	}
	d, _ := start(audit.Config{})
	info := auditStreamInfo(t, operatorConn(t, d))
	if info.Config.MaxAge != audit.DefaultMaxAge || info.Config.MaxBytes != audit.DefaultMaxBytes {
		t.Errorf("first start: max_age %s, max_bytes %d; want the defaults %s, %d", info.Config.MaxAge, info.Config.MaxBytes, audit.DefaultMaxAge, audit.DefaultMaxBytes)
	}
	d.Audit.Append(audit.Record{Kind: audit.KindAgentApproved, AgentID: "fraud-review", Actor: audit.Actor{Type: audit.ActorOperator, Subject: "ops"}})
	waitFor(t, "the record to be stored", func() bool { return d.Audit.Written() == 1 })
	d.Stop()

	d, logged := start(audit.Config{MaxAge: audit.Duration(720 * time.Hour), MaxBytes: 64 << 20})
	defer d.Stop()
	info = auditStreamInfo(t, operatorConn(t, d))
	if info.Config.MaxAge != 720*time.Hour || info.Config.MaxBytes != 64<<20 || !info.Config.DenyDelete || !info.Config.DenyPurge {
		t.Errorf("second start: max_age %s, max_bytes %d, deny delete %v, purge %v; want 720h, %d, true, true",
			info.Config.MaxAge, info.Config.MaxBytes, info.Config.DenyDelete, info.Config.DenyPurge, 64<<20)
	}
	if info.State.Msgs != 1 {
		t.Errorf("%d records after the restart, want the 1 written before", info.State.Msgs)
	}
	log := logged.String()
	if !strings.Contains(log, `changed="max_age 2160h → 720h, max_bytes 1073741824 → 67108864"`) || strings.Contains(log, "level=WARN") {
		t.Errorf("log of the second start:\n%s", log)
	}
}

// On an external NATS set up with deploy/nats-cluster/accounts.conf a2ad
// may not change the audit stream: with another audit.max_age at its next
// start it runs with the stream as it is and warns once, saying what
// differs and the command that applies it.
func TestExternalAuditStreamIsKeptAndTheDifferenceWarned(t *testing.T) {
	hostPort := startAccountsConf(t)
	url := "nats://a2ad:a2ad-secret@" + hostPort
	start := func(cfg audit.Config) (*daemon.Daemon, *testlog.Buffer) {
		t.Helper()
		var logged testlog.Buffer
		d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: url, DataDir: t.TempDir(), Audit: cfg},
			slog.New(slog.NewTextHandler(&logged, nil)), false)
		if err != nil {
			t.Fatal(err)
		}
		return d, &logged
	}
	d, logged := start(audit.Config{})
	if strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("warnings at the first start, which created the stream:\n%s", logged)
	}
	d.Audit.Append(audit.Record{Kind: audit.KindAgentApproved, AgentID: "fraud-review", Actor: audit.Actor{Type: audit.ActorOperator, Subject: "ops"}})
	waitFor(t, "the record to be stored", func() bool { return d.Audit.Written() == 1 })
	d.Stop()

	d, logged = start(audit.Config{MaxAge: audit.Duration(time.Hour), MaxBytes: -1})
	defer d.Stop()
	d.Audit.Append(audit.Record{Kind: audit.KindAgentApproved, AgentID: "fraud-review", Actor: audit.Actor{Type: audit.ActorOperator, Subject: "ops"}})
	waitFor(t, "a record to be stored after the restart", func() bool { return d.Audit.Written() == 1 })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	info := auditStreamInfo(t, nc)
	if info.Config.MaxAge != audit.DefaultMaxAge || info.Config.MaxBytes != audit.DefaultMaxBytes || info.State.Msgs != 2 {
		t.Errorf("the stream: max_age %s, max_bytes %d, %d records; want it unchanged, %s, %d, with 2 records",
			info.Config.MaxAge, info.Config.MaxBytes, info.State.Msgs, audit.DefaultMaxAge, audit.DefaultMaxBytes)
	}
	log := logged.String()
	for _, want := range []string{
		`settings="max_age=2160h (configured 1h), max_bytes=1073741824 (configured -1)"`,
		`command="nats stream edit A2AD_AUDIT --max-age=1h --max-bytes=-1"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the warning lacks %s:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, log)
	}
}
