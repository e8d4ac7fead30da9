package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/nats-io/nats-server/v2/server"
)

// As an operator runs it: a2ad with --nats-tls-cert/--nats-tls-key, the
// agent's credential minted over TLS with the CA, the reference agent
// binary with --nats-ca; a host's delegation completes. A renewed
// certificate is taken on SIGHUP while the agent stays connected, and the
// next delegation completes too.
func TestAgentOverNATSTLS(t *testing.T) {
	agentBin := fraudReviewAgent(t)
	ca := natstest.NewCA(t, "nats")
	certFile, keyFile := ca.Server(t, "a2ad-nats")
	dataDir := t.TempDir()
	d := startDaemon(t, nil, "--config", configFile(t, ""), "--data-dir", dataDir, "--http-addr", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:-1", "--nats-tls-cert", certFile, "--nats-tls-key", keyFile)
	if !strings.HasPrefix(d.NATS, "tls://127.0.0.1:") {
		t.Fatalf("a2ad reports agents' NATS at %q, want tls://127.0.0.1:…", d.NATS)
	}

	// Without the CA the operator's tool cannot verify the server.
	out, err := exec.Command(bin, "agents", "credential", "fraud-review", "--out", "-", "--nats-url", d.NATS, "--data-dir", dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "x509: certificate signed by unknown authority (give the CA that issued the server's certificate with --nats-ca FILE)") {
		t.Errorf("agents credential without --nats-ca: %v\n%s", err, out)
	}
	credFile := filepath.Join(t.TempDir(), "fraud-review.jwt")
	if err := os.WriteFile(credFile, []byte(credentialFor(t, d.NATS, dataDir, "--nats-ca", ca.File)), 0o600); err != nil {
		t.Fatal(err)
	}

	agentLog, _ := startAgentProcess(t, agentBin, "--nats-url", d.NATS, "--nats-ca", ca.File, "--credential-file", credFile)
	h := connectHost(t, d)
	first, err := h.delegateWhenAgentKnown(delegateArgs("C-7", 1999, "", 10))
	if err != nil || first.State != "completed" || first.Artifacts[0].Parts[0].Data["risk_level"] != "low" {
		t.Fatalf("delegation to the agent over TLS: %v %+v", err, first)
	}

	ca.Server(t, "a2ad-nats") // renewed in place, as cert-manager does
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pemBytes)
	renewed, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the certificate reload to be logged", func() bool {
		return strings.Contains(d.log.String(), `msg="NATS certificate reloaded" subject="CN=a2ad-nats" serial=`+renewed.SerialNumber.Text(16)+" ")
	})
	second := h.mustCall("delegate", delegateArgs("C-8", 2999, "", 10))
	if second.State != "completed" {
		t.Fatalf("delegation after the reload: %+v", second)
	}
	if strings.Contains(agentLog.String(), "disconnected") {
		t.Errorf("the agent was disconnected by the reload:\n%s", agentLog.String())
	}
}

// The real binary refuses plain-text NATS outside loopback, saying how
// to set up TLS or consent to plain text; with insecure: true it serves.
func TestServeRefusesPlainTextNATSOutsideLoopback(t *testing.T) {
	out, err := exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "0.0.0.0:-1").CombinedOutput()
	want := "config: NATS in plain text outside loopback: nats_listen 0.0.0.0:-1 would take agents' credentials in plain text; " +
		"set nats_tls.cert_file and nats_tls.key_file (flags --nats-tls-cert FILE --nats-tls-key FILE) for TLS, or insecure: true if the network is secured otherwise"
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), `msg="a2ad did not start" err="`+strings.ReplaceAll(want, `"`, `\"`)) {
		t.Fatalf("serve on 0.0.0.0 without TLS: %v, want exit 1 with %q\n%s", err, want, out)
	}
	out, err = exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-url", "nats://a2ad:secret@192.0.2.1:4222").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nats_url nats://a2ad:xxxxx@192.0.2.1:4222 would send a2ad's NATS credentials in plain text; use tls:// URLs") || strings.Contains(string(out), "secret") {
		t.Fatalf("serve with a remote nats:// URL: %v\n%s", err, out)
	}
	d := startDaemon(t, nil, "--config", configFile(t, "insecure: true\n"), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "0.0.0.0:-1")
	if !strings.HasPrefix(d.NATS, "nats://0.0.0.0:") {
		t.Fatalf("with insecure: true a2ad reports NATS at %q", d.NATS)
	}
	if want := `level=WARN msg="NATS in plain text outside loopback, as insecure: true allows: agents' credentials and a2ad's NATS password cross the network readable" nats="nats_listen 0.0.0.0:-1"`; !strings.Contains(d.log.String(), want) {
		t.Errorf("with insecure: true the log lacks %s:\n%s", want, d.log.String())
	}
}

// a2ad and the reference agent on an external NATS that requires TLS and
// verifies clients, each with the CA and its own client certificate, as
// flags: the delegation completes, and the server saw both certificates.
func TestExternalNATSWithMutualTLS(t *testing.T) {
	agentBin := fraudReviewAgent(t)
	ca := natstest.NewCA(t, "nats")
	s := natstest.StartTLS(t, ca)
	a2adCert, a2adKey := ca.Client(t, "a2ad")
	agentCert, agentKey := ca.Client(t, "fraud-review")
	d := startDaemon(t, nil, "--config", configFile(t, ""), "--nats-url", s.ClientURL(), "--nats-ca", ca.File,
		"--nats-client-cert", a2adCert, "--nats-client-key", a2adKey, "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0")
	credFile := filepath.Join(t.TempDir(), "fraud-review.jwt")
	if err := os.WriteFile(credFile, []byte(credential(t, d, "fraud-review")), 0o600); err != nil {
		t.Fatal(err)
	}
	startAgentProcess(t, agentBin, "--nats-url", s.ClientURL(), "--nats-ca", ca.File, "--nats-client-cert", agentCert, "--nats-client-key", agentKey,
		"--credential-file", credFile)
	h := connectHost(t, d)
	got, err := h.delegateWhenAgentKnown(delegateArgs("C-7", 1999, "", 10))
	if err != nil || got.State != "completed" {
		t.Fatalf("delegation over mutual TLS: %v %+v", err, got)
	}
	cz, err := s.Connz(&server.ConnzOptions{Username: true})
	if err != nil {
		t.Fatal(err)
	}
	peers := map[string]string{}
	for _, c := range cz.Conns {
		if len(c.TLSPeerCerts) > 0 {
			peers[c.Name] = c.TLSPeerCerts[0].Subject
		}
	}
	if peers["a2ad"] != "CN=a2ad" || peers["fraud-review-agent/fraud-review"] != "CN=fraud-review" {
		t.Errorf("client certificates the server saw, by connection name: %v; want a2ad CN=a2ad, fraud-review-agent/fraud-review CN=fraud-review", peers)
	}
}

// startAgentProcess runs the fraud-review-agent binary with args until the
// test ends: its log, and a channel that receives its Wait's result
// (once; then it is closed).
func startAgentProcess(t *testing.T, agentBin string, args ...string) (*testlog.Buffer, <-chan error) {
	t.Helper()
	agent := exec.Command(agentBin, args...)
	agentLog := &testlog.Buffer{}
	agent.Stderr = agentLog
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait(); close(exited) }() // then closed: the cleanup never blocks
	t.Cleanup(func() {
		_ = agent.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog.String())
		}
	})
	return agentLog, exited
}
