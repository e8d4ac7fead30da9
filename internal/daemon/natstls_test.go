package daemon_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startNATSTLS starts a2ad (stdio mode: no HTTP) with the embedded server on
// a free loopback port and tls as its nats_tls block.
func startNATSTLS(t *testing.T, tls daemon.NATSTLSConfig) *daemon.Daemon {
	t.Helper()
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", NATSTLS: tls,
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}}}, quiet(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func agentCredential(t *testing.T, d *daemon.Daemon) string {
	t.Helper()
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

func serialOf(t *testing.T, certFile string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// plainConnect speaks the NATS protocol in plain text with a valid
// credential, as an agent without TLS would, and returns everything the
// server sent after its INFO until it closed the connection.
func plainConnect(t *testing.T, hostPort, cred string) (info, after string) {
	t.Helper()
	c, err := net.Dial("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	info, _ = r.ReadString('\n')
	if _, err := c.Write([]byte(`CONNECT {"auth_token":"` + cred + `","verbose":false}` + "\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("the server neither answered nor closed the plain-text connection: %v", err)
	}
	return info, string(rest)
}

// With nats_tls.cert_file the embedded server takes agents over TLS only
// (TLS 1.2 at least): an agent with the CA gets in, a plain-text client
// is cut off even with a valid credential, an agent without the CA fails
// verification. A reload on SIGHUP presents the new certificate to new
// connections and keeps the open ones; a broken file changes nothing.
func TestEmbeddedNATSRequiresTLS(t *testing.T) {
	ca := natstest.NewCA(t, "nats")
	certFile, keyFile := ca.Server(t, "a2ad-nats")
	d := startNATSTLS(t, daemon.NATSTLSConfig{CertFile: certFile, KeyFile: keyFile})
	if !strings.HasPrefix(d.NATSURL, "tls://127.0.0.1:") {
		t.Fatalf("agents' URL %q, want tls://127.0.0.1:…", d.NATSURL)
	}
	hostPort := strings.TrimPrefix(d.NATSURL, "tls://")
	cred := agentCredential(t, d)

	agent, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions("fraud-review", cred), nats.RootCAs(ca.File), nats.MaxReconnects(0))...)
	if err != nil {
		t.Fatalf("agent with the CA: %v", err)
	}
	defer agent.Close()
	st, err := agent.TLSConnectionState()
	if err != nil || st.Version < tls.VersionTLS12 || st.PeerCertificates[0].Subject.CommonName != "a2ad-nats" {
		t.Fatalf("agent's TLS state: %v, version %x", err, st.Version)
	}

	info, after := plainConnect(t, hostPort, cred)
	if !strings.Contains(info, `"tls_required":true`) {
		t.Errorf("INFO %q does not say tls_required", info)
	}
	if strings.Contains(after, "PONG") || strings.Contains(after, "+OK") {
		t.Errorf("a plain-text CONNECT was answered %q, want the connection closed", after)
	}

	_, err = nats.Connect("nats://"+hostPort, append(refagent.ConnectOptions("fraud-review", cred), nats.MaxReconnects(0))...)
	var verify *tls.CertificateVerificationError
	if !errors.Is(err, nats.ErrTLS) || !errors.As(err, &verify) {
		t.Errorf("agent without the CA: %v, want a TLS verification error", err)
	}

	// TLS 1.1 is refused.
	c, err := net.Dial("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(c).ReadString('\n') // INFO, in plain text as NATS does
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.File)
	pool.AppendCertsFromPEM(pem)
	old := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err := old.Handshake(); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 handshake: %v, want a protocol version refusal", err)
	}
	c.Close()

	// Reload: a renewed certificate in the same files.
	before := serialOf(t, certFile)
	ca.Server(t, "a2ad-nats")
	renewed := serialOf(t, certFile)
	leaf, err := d.ReloadNATSCertificate()
	if err != nil || leaf.SerialNumber.Cmp(renewed) != 0 || renewed.Cmp(before) == 0 {
		t.Fatalf("reload: %v (serial %v, want %v)", err, leaf, renewed)
	}
	seen := func() *big.Int {
		nc, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions("fraud-review", cred), nats.RootCAs(ca.File), nats.MaxReconnects(0))...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		st, _ := nc.TLSConnectionState()
		return st.PeerCertificates[0].SerialNumber
	}
	if got := seen(); got.Cmp(renewed) != 0 {
		t.Errorf("a new connection after the reload sees serial %x, want the renewed %x", got, renewed)
	}
	if err := agent.FlushTimeout(5 * time.Second); err != nil || !agent.IsConnected() {
		t.Errorf("the agent's connection from before the reload: %v", err)
	}
	if st, _ := agent.TLSConnectionState(); st.PeerCertificates[0].SerialNumber.Cmp(before) != 0 {
		t.Error("the open connection changed certificate")
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReloadNATSCertificate(); err == nil || !strings.HasPrefix(err.Error(), "config: nats_tls.cert_file "+certFile+" and key_file "+keyFile+": ") {
		t.Errorf("reload of a broken key: %v, want an error naming nats_tls.cert_file and key_file", err)
	}
	if got := seen(); got.Cmp(renewed) != 0 {
		t.Errorf("after a refused reload a new connection sees serial %x, want still %x", got, renewed)
	}
}

// nats_tls.allow_non_tls lets a plain-text agent in beside TLS ones (on
// loopback; outside it only with insecure: true).
func TestAllowNonTLSLetsPlainAgentsIn(t *testing.T) {
	ca := natstest.NewCA(t, "nats")
	certFile, keyFile := ca.Server(t, "a2ad-nats")
	d := startNATSTLS(t, daemon.NATSTLSConfig{CertFile: certFile, KeyFile: keyFile, AllowNonTLS: true})
	cred := agentCredential(t, d)
	hostPort := strings.TrimPrefix(d.NATSURL, "tls://")
	plain, err := nats.Connect("nats://"+hostPort, append(refagent.ConnectOptions("fraud-review", cred), nats.MaxReconnects(0))...)
	if err != nil {
		t.Fatalf("plain-text agent with allow_non_tls: %v", err)
	}
	defer plain.Close()
	if _, err := plain.TLSConnectionState(); err == nil {
		t.Error("the plain-text agent's connection is TLS")
	}
	secure, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions("fraud-review", cred), nats.RootCAs(ca.File), nats.MaxReconnects(0))...)
	if err != nil {
		t.Fatalf("TLS agent beside it: %v", err)
	}
	secure.Close()
}

// Outside loopback a2ad refuses plain-text NATS, on the embedded server
// and to an external one, with an error that names both ways out; with
// insecure: true it starts. A nats_tls block that does not fit the
// set-up is refused with the key it names.
func TestNATSConfigurationRefusals(t *testing.T) {
	ca := natstest.NewCA(t, "nats")
	certFile, keyFile := ca.Server(t, "a2ad-nats")
	// Measured before: an expired certificate was served, at start and
	// after a reload, and every agent's handshake failed.
	expired := testcert.NewCA(t, "nats").ServerUntil(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	expiredCert, expiredKey := expired.WriteFiles(t, t.TempDir(), "expired")
	for _, tc := range []struct {
		name      string
		cfg       daemon.Config
		plainText bool
		want      string
	}{
		{"expired certificate", daemon.Config{NATSTLS: daemon.NATSTLSConfig{CertFile: expiredCert, KeyFile: expiredKey}}, false,
			"config: nats_tls.cert_file " + expiredCert + ": the certificate is valid from 2026-01-02T02:04:05Z to 2026-01-02T03:04:05Z, not now"},
		{"embedded on every address", daemon.Config{NATSListen: "0.0.0.0:4222"}, true,
			"config: NATS in plain text outside loopback: nats_listen 0.0.0.0:4222 would take agents' credentials in plain text; set nats_tls.cert_file and nats_tls.key_file (flags --nats-tls-cert FILE --nats-tls-key FILE) for TLS, or insecure: true if the network is secured otherwise"},
		{"embedded on a host's address", daemon.Config{NATSListen: "192.0.2.10:4222"}, true, "nats_listen 192.0.2.10:4222 would take"},
		{"allow_non_tls outside loopback", daemon.Config{NATSListen: ":4222", NATSTLS: daemon.NATSTLSConfig{CertFile: certFile, KeyFile: keyFile, AllowNonTLS: true}}, true,
			"config: NATS in plain text outside loopback: nats_tls.allow_non_tls on nats_listen :4222 would take agents' credentials in plain text; remove it, or set insecure: true"},
		{"external nats:// to another host", daemon.Config{NATSURL: "nats://a2ad:secret@nats.example.com:4222"}, true,
			"config: NATS in plain text outside loopback: nats_url nats://a2ad:xxxxx@nats.example.com:4222 would send a2ad's NATS credentials in plain text; use tls:// URLs (with nats_tls.ca_file, flag --nats-ca FILE, unless the system's roots verify the server), or insecure: true"},
		{"one remote URL in a list", daemon.Config{NATSURL: "nats://127.0.0.1:4222,nats://10.0.0.2:4222"}, true, "nats_url nats://10.0.0.2:4222 would send"},
		{"cert without key", daemon.Config{NATSTLS: daemon.NATSTLSConfig{CertFile: certFile}}, false,
			"config: nats_tls.cert_file and nats_tls.key_file go together (flags --nats-tls-cert, --nats-tls-key): set both or neither"},
		{"unreadable certificate", daemon.Config{NATSTLS: daemon.NATSTLSConfig{CertFile: keyFile, KeyFile: keyFile}}, false,
			"config: nats_tls.cert_file " + keyFile + " and key_file " + keyFile + ": tls: "},
		{"ca_file on the embedded server", daemon.Config{NATSTLS: daemon.NATSTLSConfig{CAFile: ca.File}}, false,
			"config: nats_tls.ca_file verifies an external NATS server (nats_url)"},
		{"server certificate with nats_url", daemon.Config{NATSURL: "tls://127.0.0.1:4222", NATSTLS: daemon.NATSTLSConfig{CertFile: certFile, KeyFile: keyFile}}, false,
			"config: nats_tls.cert_file is the embedded server's certificate, and nats_url embeds none"},
		{"ca_file that is no certificate", daemon.Config{NATSURL: "tls://127.0.0.1:4222", NATSTLS: daemon.NATSTLSConfig{CAFile: keyFile}}, false,
			"config: nats_tls.ca_file " + keyFile + ": no PEM certificate in it"},
		{"too few subscriptions per connection", daemon.Config{NATSLimits: daemon.NATSLimits{MaxSubscriptionsPerConnection: 16}}, false,
			"config: nats_limits.max_subscriptions_per_connection 16: want at least 64 (a2ad's own connection holds one per configured agent, 0, and a few more)"},
		{"fewer subscriptions per connection than agents", daemon.Config{NATSLimits: daemon.NATSLimits{MaxSubscriptionsPerConnection: 100}, Agents: manyAgents(80)}, false,
			"config: nats_limits.max_subscriptions_per_connection 100: want at least 112 (a2ad's own connection holds one per configured agent, 80, and a few more)"},
		{"max_pending_bytes too small", daemon.Config{NATSLimits: daemon.NATSLimits{MaxPendingBytes: 1 << 20}}, false,
			"config: nats_limits.max_pending_bytes 1048576: want at least 16777216"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			d, err := daemon.Start(context.Background(), tc.cfg, quiet(), false)
			if err == nil {
				d.Stop()
				t.Fatal("started")
			}
			if errors.Is(err, daemon.ErrNATSPlainText) != tc.plainText || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q (ErrNATSPlainText: %v), want %q", err, errors.Is(err, daemon.ErrNATSPlainText), tc.want)
			}
		})
	}
	t.Run("insecure: true", func(t *testing.T) {
		d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "0.0.0.0:-1", Insecure: true}, quiet(), false)
		if err != nil {
			t.Fatalf("with insecure: true: %v", err)
		}
		d.Stop()
	})
}

// a2ad on an external NATS that requires TLS and verifies clients: with
// nats_tls.ca_file and a client certificate it connects (the server sees
// a2ad's certificate); with another CA, or without a client certificate,
// it does not start, and says which setting to look at.
func TestExternalNATSOverTLS(t *testing.T) {
	ca := natstest.NewCA(t, "nats")
	s := natstest.StartTLS(t, ca)
	url := s.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Fatalf("server URL %q", url)
	}
	clientCert, clientKey := ca.Client(t, "a2ad")
	start := func(tls daemon.NATSTLSConfig) (*daemon.Daemon, error) {
		return daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSURL: url, NATSTLS: tls}, quiet(), false)
	}

	d, err := start(daemon.NATSTLSConfig{CAFile: ca.File, ClientCertFile: clientCert, ClientKeyFile: clientKey})
	if err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	cz, err := s.Connz(&server.ConnzOptions{Username: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cz.Conns {
		if c.Name == "a2ad" {
			found = true
			if c.TLSVersion == "" || len(c.TLSPeerCerts) == 0 || c.TLSPeerCerts[0].Subject != "CN=a2ad" {
				t.Errorf("a2ad's connection: TLS %q, peer certificates %+v; want TLS with CN=a2ad", c.TLSVersion, c.TLSPeerCerts)
			}
		}
	}
	if !found {
		t.Error("no connection named a2ad on the server")
	}
	d.Stop()

	other := natstest.NewCA(t, "other")
	_, err = start(daemon.NATSTLSConfig{CAFile: other.File, ClientCertFile: clientCert, ClientKeyFile: clientKey})
	if want := "NATS at " + url + ": the NATS server's certificate does not verify with nats_tls.ca_file " + other.File + ": nats: tls"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("with another CA: %v, want %q…", err, want)
	}

	strangerCert, strangerKey := other.Client(t, "a2ad")
	_, err = start(daemon.NATSTLSConfig{CAFile: ca.File, ClientCertFile: strangerCert, ClientKeyFile: strangerKey})
	if want := "NATS at " + url + ": the NATS server refused a2ad's TLS handshake; check that nats_tls.client_cert_file " + strangerCert + " is issued by a CA the server trusts: nats: tls"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("with a client certificate of another CA: %v, want %q…", err, want)
	}

	_, err = start(daemon.NATSTLSConfig{CAFile: ca.File})
	if want := "NATS at " + url + ": the NATS server refused a2ad's TLS handshake; a2ad presented no client certificate (set nats_tls.client_cert_file and client_key_file"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("without a client certificate: %v, want %q…", err, want)
	}
}

func manyAgents(n int) []daemon.AgentConfig {
	var agents []daemon.AgentConfig
	for i := range n {
		agents = append(agents, daemon.AgentConfig{AgentConfig: agentcard.AgentConfig{ID: fmt.Sprintf("agent-%d", i), Tenants: []string{"default"}}})
	}
	return agents
}

// 2,000 idle connections that never authenticate neither keep an agent
// out nor stay: an agent with its credential connects over TLS beside
// them, and the server closes every one of them after
// nats_limits.auth_timeout_seconds.
func TestIdleUnauthenticatedNATSConnectionsAreClosed(t *testing.T) {
	ca := natstest.NewCA(t, "nats")
	certFile, keyFile := ca.Server(t, "a2ad-nats")
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		NATSTLS: daemon.NATSTLSConfig{CertFile: certFile, KeyFile: keyFile}, NATSLimits: daemon.NATSLimits{AuthTimeoutSeconds: 1},
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}}}, quiet(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	hostPort := strings.TrimPrefix(d.NATSURL, "tls://")
	const idle = 2000
	conns := make([]net.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range idle {
		c, err := net.Dial("tcp", hostPort)
		if err != nil {
			t.Fatalf("idle connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	agent, err := nats.Connect(d.NATSURL, append(refagent.ConnectOptions("fraud-review", agentCredential(t, d)), nats.RootCAs(ca.File), nats.MaxReconnects(0))...)
	if err != nil {
		t.Fatalf("agent beside %d idle connections: %v", idle, err)
	}
	defer agent.Close()
	closed := make(chan bool, idle)
	// Before the default auth timeout (5 s): the configured second holds.
	until := time.Now().Add(4 * time.Second)
	for _, c := range conns {
		go func() {
			_ = c.SetReadDeadline(until)
			_, err := io.Copy(io.Discard, c) // INFO, the -ERR, then EOF
			var ne net.Error
			closed <- !(errors.As(err, &ne) && ne.Timeout())
		}()
	}
	n := 0
	for range idle {
		if <-closed {
			n++
		}
	}
	if n != idle {
		t.Fatalf("%d of %d idle unauthenticated connections closed by the server, want all", n, idle)
	}
	if err := agent.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("the agent's connection after the idle ones went: %v", err)
	}
}
