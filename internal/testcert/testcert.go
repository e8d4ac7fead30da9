// Package testcert makes X.509 certificates at test time (crypto/x509): a
// certificate authority, server certificates for loopback and client
// certificates it issues, as PEM files a2ad and its clients are configured
// with. ECDSA P-256 keys; every certificate has a random 128-bit serial.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is Cert, PEM-encoded: what a ca_file holds.
	PEM []byte
}

// Pair is a certificate and its private key.
type Pair struct {
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the certificate and its PKCS #8 key, PEM-encoded.
	CertPEM, KeyPEM []byte
	// TLS is the pair for a tls.Config (Certificates, or a client's
	// GetClientCertificate).
	TLS tls.Certificate
}

// NewCA returns a self-signed CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name, Organization: []string{"a2ad tests"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a certificate pool holding only the CA: a client's RootCAs or a
// server's ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes the CA certificate (PEM) into dir and returns its path.
func (ca *CA) WriteFile(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Server issues a server certificate (extended key usage serverAuth) for
// hosts, IP addresses or DNS names; none means 127.0.0.1, ::1 and
// localhost.
func (ca *CA) Server(t testing.TB, hosts ...string) Pair {
	t.Helper()
	return ca.ServerUntil(t, time.Now().Add(24*time.Hour), hosts...)
}

// ServerUntil is Server with a certificate valid until notAfter (in the
// past for an expired one), from an hour before now or notAfter.
func (ca *CA) ServerUntil(t testing.TB, notAfter time.Time, hosts ...string) Pair {
	t.Helper()
	return ca.issue(t, ca.hostTemplate(t, notAfter, hosts))
}

// Peer issues a certificate for hosts (as Server) that serves and also
// proves its holder as a client (extended key usages serverAuth and
// clientAuth): what NATS cluster nodes present to each other on their
// routes, and what cert-manager's "server auth, client auth" issues.
func (ca *CA) Peer(t testing.TB, hosts ...string) Pair {
	t.Helper()
	tmpl := ca.hostTemplate(t, time.Now().Add(24*time.Hour), hosts)
	tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	return ca.issue(t, tmpl)
}

// Issue issues a certificate with subject common name cn, the extended
// key usages given and hosts (IPs and DNS names) as subject alternative
// names, valid for a day.
func (ca *CA) Issue(t testing.TB, cn string, usages []x509.ExtKeyUsage, hosts ...string) Pair {
	t.Helper()
	tmpl := ca.template(t, cn, usages[0])
	tmpl.Subject = pkix.Name{CommonName: cn} // "CN=<cn>", as a server's log and Connz show it
	tmpl.ExtKeyUsage = usages
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(t, tmpl)
}

// hostTemplate is a serverAuth certificate's template for hosts (IPs and
// DNS names; loopback's by default), valid until notAfter.
func (ca *CA) hostTemplate(t testing.TB, notAfter time.Time, hosts []string) *x509.Certificate {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "::1", "localhost"}
	}
	tmpl := ca.template(t, hosts[0], x509.ExtKeyUsageServerAuth)
	tmpl.NotAfter = notAfter
	if tmpl.NotBefore.After(notAfter) {
		tmpl.NotBefore = notAfter.Add(-time.Hour)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return tmpl
}

// Client issues a client certificate (extended key usage clientAuth) whose
// subject common name is name.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return ca.issue(t, ca.template(t, name, x509.ExtKeyUsageClientAuth))
}

func (ca *CA) template(t testing.TB, cn string, usage x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn, Organization: []string{"a2ad tests"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
}

func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) Pair {
	t.Helper()
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
	if p.TLS, err = tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteFiles writes the certificate and key (mode 0600) into dir as
// name.pem and name-key.pem and returns their paths.
func (p Pair) WriteFiles(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, p.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
