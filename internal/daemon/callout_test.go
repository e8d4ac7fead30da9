package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startCallout runs a NATS server with deploy/nats-cluster/auth-callout.conf
// and a2ad as its auth callout, without a system account user.
func startCallout(t *testing.T) (*daemon.Daemon, string) {
	t.Helper()
	hostPort, seedFile := natstest.StartAuthCallout(t)
	d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: "nats://a2ad:a2ad-secret@" + hostPort, DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0",
		NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: seedFile},
		Agents:          []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d, "nats://" + hostPort
}

// Measured before: with system_url naming a user outside the system
// account (a2ad's own), or a wrong password, a2ad started, said revoked
// credentials would be cut off, and then closed nothing (every KICK: no
// responders; or after a silent minute, "connection closed"). Now it
// refuses to start, saying why.
func TestAuthCalloutSystemURLMustBeAbleToClose(t *testing.T) {
	hostPort, seedFile := natstest.StartAuthCallout(t)
	for _, c := range []struct{ user, want string }{
		{"a2ad:a2ad-secret", "nats_auth_callout.system_url nats://a2ad:xxxxx@" + hostPort + ": cannot close connections ($SYS.REQ.SERVER.<id>.KICK has no responders): the user is not in the server's system account"},
		{"a2ad-system:guess", "nats_auth_callout.system_url nats://a2ad-system:xxxxx@" + hostPort + ": the NATS server refused the user and password of the URL (authorization violation)"},
	} {
		_, err := daemon.Start(context.Background(), daemon.Config{NATSURL: "nats://a2ad:a2ad-secret@" + hostPort, DataDir: t.TempDir(),
			NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: seedFile, SystemURL: "nats://" + c.user + "@" + hostPort}},
			slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		if err == nil || err.Error() != c.want {
			t.Errorf("system_url with %s: %v\nwant %s", c.user, err, c.want)
		}
	}
}

// Through the auth callout a connection lasts no longer than its
// credential, as on the embedded server: the user JWT a2ad issues expires
// with it and the server closes the connection then. Without a system
// account user a2ad cannot close live connections, so revoking every
// credential of an agent still quarantines it.
func TestAuthCalloutConnectionEndsWithItsCredential(t *testing.T) {
	s := &stack{}
	var natsURL string
	s.d, natsURL = startCallout(t)
	s.dataDir = s.d.Config.DataDir
	endsWithCredential(t, s.d, natsURL, "fraud-review")
	cred := mint(t, s.d, "fraud-review", time.Hour)
	anc, err := nats.Connect(natsURL, refagent.ConnectOptions("fraud-review", cred)...)
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	runFraudReview(t, s.d, anc, cred)
	if code, b := s.adminPost(t, "/v1/agents/fraud-review/revoke", `{}`); code != 200 || !strings.Contains(string(b), `"quarantined": true`) {
		t.Fatalf("revoke all without a system account user: %d %s, want quarantined", code, b)
	}
}

// nats_auth_callout is refused at start, by key and with what is wanted,
// when it cannot work: without nats_url, without the issuer seed, with a
// seed of another kind, with an account name the server cannot have, and
// with a plain-text system_url to another host.
func TestAuthCalloutConfigIsCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, kp func() (nkeys.KeyPair, error)) string {
		k, err := kp()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := k.Seed()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, append(seed, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	account, user, curve := write("account.nk", nkeys.CreateAccount), write("user.nk", nkeys.CreateUser), write("curve.nk", nkeys.CreateCurveKeys)
	ext := "nats://a2ad:pw@127.0.0.1:1"
	for _, c := range []struct {
		name string
		cfg  daemon.Config
		want string
	}{
		{"no nats_url", daemon.Config{NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: account}},
			"config: nats_auth_callout is for an external NATS server (nats_url); the embedded server checks agent credentials itself"},
		{"no issuer", daemon.Config{NATSURL: ext, NATSAuthCallout: daemon.NATSAuthCalloutConfig{SystemURL: ext}},
			"config: nats_auth_callout needs issuer_seed_file (the account seed whose public key is the NATS server's auth_callout.issuer)"},
		{"user seed as issuer", daemon.Config{NATSURL: ext, NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: user}},
			"config: nats_auth_callout.issuer_seed_file " + user + ": want an account seed (SA…, `nk -gen account`)"},
		{"missing issuer file", daemon.Config{NATSURL: ext, NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: filepath.Join(dir, "none")}},
			"config: nats_auth_callout.issuer_seed_file: open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{"account seed as xkey", daemon.Config{NATSURL: ext, NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: account, XKeySeedFile: account}},
			"config: nats_auth_callout.xkey_seed_file " + account + ": want a curve seed (SX…, `nk -gen curve`)"},
		{"wildcard account", daemon.Config{NATSURL: ext, NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: account, XKeySeedFile: curve, Account: "A2A.>"}},
			`config: nats_auth_callout.account "A2A.>": want an account name of the NATS server, without spaces, dots or wildcards`},
		{"plain-text system_url", daemon.Config{NATSURL: ext, NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: account, SystemURL: "nats://sys:pw@nats.example:4222"}},
			"config: NATS in plain text outside loopback: nats_auth_callout.system_url nats://sys:xxxxx@nats.example:4222 would send a2ad's NATS credentials in plain text; use tls:// URLs (with nats_tls.ca_file, flag --nats-ca FILE, unless the system's roots verify the server), or insecure: true if the network is secured otherwise"},
	} {
		c.cfg.DataDir = t.TempDir()
		_, err := daemon.Start(context.Background(), c.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
}
