package natstest

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/nats-io/nats-server/v2/server"
)

// CA is a certificate authority made at test time (internal/testcert)
// that writes what it issues as PEM files into a test's temporary
// directory, as nats-server and a2ad's config take them.
type CA struct {
	// File is the CA certificate's PEM file (what nats.RootCAs, a NATS
	// server's ca_file or a2ad's nats_tls.ca_file take).
	File string
	ca   *testcert.CA
	dir  string
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{ca: testcert.NewCA(t, name), dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	if err := os.WriteFile(ca.File, ca.ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Server issues a server certificate with common name name for 127.0.0.1,
// ::1 and localhost (and hosts), and returns its certificate and key files.
func (ca *CA) Server(t testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	return ca.ca.Issue(t, name, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, append([]string{"127.0.0.1", "::1", "localhost"}, hosts...)...).WriteFiles(t, ca.dir, name)
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.ca.Issue(t, name, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}).WriteFiles(t, ca.dir, name)
}

// StartTLS starts a nats-server with JetStream on a free loopback port that
// requires TLS with a client certificate issued by ca (verify: true), with
// its own certificate from ca; no users. Shut down at test end.
func StartTLS(t testing.TB, ca *CA) *server.Server {
	t.Helper()
	certFile, keyFile := ca.Server(t, "nats-server")
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: certFile, KeyFile: keyFile, CaFile: ca.File, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: embedded.DefaultMaxStore, NoSigs: true, NoLog: true,
		TLSConfig: tc, TLSVerify: true, TLSTimeout: 2})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server with TLS not ready within 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}
