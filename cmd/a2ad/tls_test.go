package main

import (
	"context"
	"crypto/tls"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// A host delegates over HTTPS with the go-sdk client against the real
// binary serving --tls-cert/--tls-key; the operator's CLI reaches the
// admin API with --ca and its client certificate (--tls-client-ca); a
// certificate rotated on disk is served after SIGHUP to new connections
// while the host's session goes on.
func TestHostOverHTTPS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "a2ad test CA")
	caFile := ca.WriteFile(t, dir)
	first := ca.Server(t)
	certFile, keyFile := first.WriteFiles(t, dir, "server")
	operators := testcert.NewCA(t, "operators CA")
	opsCA := filepath.Join(dir, "operators-ca.pem")
	if err := os.WriteFile(opsCA, operators.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	opCert, opKey := operators.Client(t, "ops").WriteFiles(t, dir, "ops")

	d := startDaemon(t, nil, "--config", configFile(t, ""), "--data-dir", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:-1",
		"--http-addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", opsCA)
	if !strings.HasPrefix(d.HTTP, "https://127.0.0.1:") {
		t.Fatalf("a2ad serving mcp=%s/mcp, want an https URL", d.HTTP)
	}
	if want := "serial=" + first.Cert.SerialNumber.Text(16); !strings.Contains(d.log.String(), want) {
		t.Errorf("the start log does not name the certificate (%s):\n%s", want, d.log)
	}
	agentOn(t, d.NATS, credentialFor(t, d.NATS, d.DataDir), nil)

	trusting := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "https-host", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: d.HTTP + "/mcp",
			HTTPClient: &http.Client{Transport: mcpedge.BearerTransport(d.token(t, mcpedge.ScopeRead+" "+mcpedge.ScopeDelegate), trusting)}}, nil)
	if err != nil {
		t.Fatalf("go-sdk client over HTTPS: %v", err)
	}
	t.Cleanup(func() { _ = session.Close() })
	h := &host{t: t, session: session}
	out, err := h.delegateWhenAgentKnown(delegateArgs("C-7", 1999, "", 10))
	if err != nil || out.ErrText != "" {
		t.Fatalf("delegate over HTTPS: %v %s", err, out.ErrText)
	}
	if out = h.waitFinal(out.TaskID, 30*time.Second); out.State != "completed" {
		t.Fatalf("task %s ended %s (%s), want completed", out.TaskID, out.State, out.Reason)
	}

	// The operator's CLI: the server from the data dir (https), the CA,
	// the client certificate.
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"tasks", "get", "--data-dir", d.DataDir}, args...)...).CombinedOutput()
		return string(out), err
	}
	if got, err := cli(out.TaskID, "--ca", caFile, "--cert", opCert, "--key", opKey); err != nil || !strings.Contains(got, "State:     completed") {
		t.Errorf("a2ad tasks get over HTTPS with --ca, --cert, --key: %v\n%s", err, got)
	}
	if got, _ := cli(out.TaskID, "--cert", opCert, "--key", opKey); !strings.Contains(got, "its TLS certificate is not signed by a CA this CLI trusts: pass --ca FILE (or A2AD_CA_FILE)") {
		t.Errorf("a2ad tasks get without --ca:\n%s", got)
	}
	if got, _ := cli(out.TaskID, "--ca", caFile); !strings.Contains(got, "client_certificate_required: the admin API needs a client certificate") {
		t.Errorf("a2ad tasks get without a client certificate:\n%s", got)
	}

	// The watch stream over HTTPS, with the client certificate.
	watch := exec.Command(bin, "tasks", "watch", "--data-dir", d.DataDir, "--ca", caFile, "--cert", opCert, "--key", opKey)
	stderr, err := watch.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := stderr.Read(b)
		line <- string(b[:n])
	}()
	select {
	case got := <-line:
		if want := "watching task changes at " + d.HTTP; !strings.HasPrefix(got, want) {
			t.Errorf("a2ad tasks watch over HTTPS: %q, want %q", got, want)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("a2ad tasks watch over HTTPS said nothing")
	}
	_ = watch.Process.Kill()
	_ = watch.Wait()

	// Rotation: new files, SIGHUP; new handshakes get the new
	// certificate, the host's session goes on.
	second := ca.Server(t)
	second.WriteFiles(t, dir, "server")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload in the log", func() bool {
		return strings.Contains(d.log.String(), `msg="TLS certificate reloaded; new connections use it"`) &&
			strings.Contains(d.log.String(), "serial="+second.Cert.SerialNumber.Text(16))
	})
	conn, err := tls.Dial("tcp", strings.TrimPrefix(d.HTTP, "https://"), &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("after SIGHUP a new connection gets serial %x, want %x", got, second.Cert.SerialNumber)
	}
	conn.Close()
	if got := h.mustCall("task_get", map[string]any{"task_id": out.TaskID}); got.State != "completed" {
		t.Errorf("task_get on the session opened before the reload: %s", got.State)
	}
	// A key that does not fit: logged, the certificate in force stays.
	if err := os.WriteFile(keyFile, first.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the refused reload in the log", func() bool {
		return strings.Contains(d.log.String(), `msg="TLS certificate not reloaded; the previous one stays in force" err="config: tls.cert_file `+certFile+" and tls.key_file "+keyFile)
	})
	conn, err = tls.Dial("tcp", strings.TrimPrefix(d.HTTP, "https://"), &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("after a refused reload a new connection gets serial %x, want %x still", got, second.Cert.SerialNumber)
	}
	conn.Close()
}

// The admin CLI's TLS flags: errors name the flag at fault.
func TestAdminTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "a2ad test CA")
	caFile := ca.WriteFile(t, dir)
	cert, key := ca.Client(t, "ops").WriteFiles(t, dir, "ops")
	cfg, err := adminTLS(caFile, cert, key)
	if err != nil || cfg.MinVersion != tls.VersionTLS12 || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("adminTLS(ca, cert, key) = %+v, %v", cfg, err)
	}
	for _, c := range []struct{ ca, cert, key, want string }{
		{ca: dir + "/none.pem", want: "--ca: open " + dir + "/none.pem: no such file or directory"},
		{ca: key, want: "--ca " + key + ": want PEM CA certificates; it holds none"},
		{cert: cert, want: "--cert and --key go together (env A2AD_CLIENT_CERT, A2AD_CLIENT_KEY)"},
		{cert: cert, key: cert, want: "--cert " + cert + " and --key " + cert + ": want a PEM certificate and its PEM private key ("},
	} {
		if _, err := adminTLS(c.ca, c.cert, c.key); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("adminTLS(%q, %q, %q) = %v, want %s", c.ca, c.cert, c.key, err, c.want)
		}
	}
}

// Certificates renewed in place (cert-manager rewrites a mounted Secret,
// an ACME client its files) are served without a signal: a2ad looks at
// the files every certificate_check_seconds and reloads those of the HTTP
// listener and of the embedded NATS server when they changed.
func TestRenewedCertificateFilesAreServedWithoutSIGHUP(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "a2ad test CA")
	first := ca.Server(t)
	certFile, keyFile := first.WriteFiles(t, dir, "server")
	d := startDaemon(t, nil, "--config", configFile(t, "certificate_check_seconds: 1\n"), "--data-dir", filepath.Join(dir, "data"),
		"--nats-listen", "127.0.0.1:-1", "--http-addr", "127.0.0.1:0",
		"--tls-cert", certFile, "--tls-key", keyFile, "--nats-tls-cert", certFile, "--nats-tls-key", keyFile)
	served := func(addr string) *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	caFile := ca.WriteFile(t, dir)
	cred := credentialFor(t, d.NATS, d.DataDir, "--nats-ca", caFile)
	// nats-server speaks INFO before TLS: a plain TLS dial does not fit
	// it; an agent's connection shows the certificate.
	natsServed := func() *big.Int {
		t.Helper()
		nc, err := nats.Connect(d.NATS, nats.RootCAs(caFile), nats.Token(cred), nats.CustomInboxPrefix("_INBOX_fraud-review"))
		if err != nil {
			t.Fatalf("agent over NATS TLS: %v", err)
		}
		defer nc.Close()
		st, err := nc.TLSConnectionState()
		if err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].SerialNumber
	}
	httpAddr := strings.TrimPrefix(d.HTTP, "https://")
	if got := served(httpAddr); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("HTTP serves serial %x, want %x", got, first.Cert.SerialNumber)
	}
	if got := natsServed(); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("NATS serves serial %x, want %x", got, first.Cert.SerialNumber)
	}

	second := ca.Server(t)
	second.WriteFiles(t, dir, "server")
	waitUntil(t, "the renewed files reloaded", func() bool {
		return strings.Contains(d.log.String(), `msg="certificate files changed; reloading them"`) &&
			strings.Contains(d.log.String(), "serial="+second.Cert.SerialNumber.Text(16)) &&
			strings.Contains(d.log.String(), `msg="NATS certificate reloaded"`)
	})
	if got := served(httpAddr); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("after the renewal HTTP serves serial %x, want %x", got, second.Cert.SerialNumber)
	}
	if got := natsServed(); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("after the renewal NATS serves serial %x, want %x", got, second.Cert.SerialNumber)
	}
	if n := strings.Count(d.log.String(), `msg="certificate files changed; reloading them"`); n != 1 {
		t.Errorf("%d reloads for one renewal, want 1", n)
	}
}
