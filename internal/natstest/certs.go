package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/nats-io/nats-server/v2/server"
)

// CA is a certificate authority made at test time (crypto/x509, ECDSA
// P-256), valid for an hour: it issues server and client certificates
// into PEM files in a test's temporary directory.
type CA struct {
	// File is the CA certificate's PEM file (what nats.RootCAs, a NATS
	// server's ca_file or a2ad's nats_tls.ca_file take).
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost
// (and hosts), and returns its certificate and key files.
func (ca *CA) Server(t testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, append([]string{"127.0.0.1", "::1", "localhost"}, hosts...))
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth, nil)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, hosts []string) (string, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kb)
	return certFile, keyFile
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
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
