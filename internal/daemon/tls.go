package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// httpTLS is the HTTP listener's TLS: the configuration of new handshakes,
// read from [TLSConfig]'s files at Start and again by [Daemon.ReloadTLS].
// Connections keep the certificate they were opened with.
type httpTLS struct {
	files   TLSConfig
	current atomic.Pointer[tls.Config]
	leaf    atomic.Pointer[x509.Certificate] // current's
}

// newHTTPTLS reads files; the error names the file and key at fault.
func newHTTPTLS(files TLSConfig) (*httpTLS, *x509.Certificate, error) {
	h := &httpTLS{files: files}
	cfg, leaf, err := files.load(time.Now())
	if err != nil {
		return nil, nil, err
	}
	h.current.Store(cfg)
	h.leaf.Store(leaf)
	return h, leaf, nil
}

// expiry is the NotAfter of the certificate served, in Unix seconds (the
// metric a2ad_http_tls_certificate_expiry_timestamp_seconds).
func (h *httpTLS) expiry() float64 { return float64(h.leaf.Load().NotAfter.Unix()) }

// serverConfig is the http.Server's TLSConfig: every handshake takes the
// configuration last loaded.
func (h *httpTLS) serverConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return h.current.Load(), nil
	}}
}

// load reads the certificate chain, its private key and the client CAs
// into the configuration of a handshake: TLS 1.2 or later (RFC 8446, RFC
// 5246), HTTP/2 or HTTP/1.1 (ALPN, RFC 7301), and with client_ca_file a
// client certificate verified when one is given (the admin API requires
// one: [requireClientCertificate]). A certificate that has expired is an
// error.
func (c TLSConfig) load(now time.Time) (*tls.Config, *x509.Certificate, error) {
	certPEM, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("config: tls.cert_file: %w", err)
	}
	keyPEM, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("config: tls.key_file: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("config: tls.cert_file %s and tls.key_file %s: want a PEM certificate (chain) and its PEM private key (%v)", c.CertFile, c.KeyFile, err)
	}
	leaf := pair.Leaf
	if now.After(leaf.NotAfter) {
		return nil, nil, fmt.Errorf("config: tls.cert_file %s: the certificate expired at %s", c.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1"}}
	if c.ClientCAFile != "" {
		b, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("config: tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("config: tls.client_ca_file %s: want PEM CA certificates; it holds none", c.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return cfg, leaf, nil
}

// check refuses a TLS configuration that names some files and not others.
func (c TLSConfig) check() error {
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return errors.New("config: tls.cert_file and tls.key_file go together (--tls-cert, --tls-key): set both, or neither for plain text on loopback")
	case c.ClientCAFile != "" && c.CertFile == "":
		return errors.New("config: tls.client_ca_file needs tls.cert_file and tls.key_file: client certificates are asked for only over TLS")
	}
	return nil
}

// ErrNoTLS is [Daemon.ReloadTLS]'s error when the HTTP listener has no TLS.
var ErrNoTLS = errors.New("the HTTP listener has no TLS (tls.cert_file)")

// ReloadTLS reads the HTTP listener's certificate, key and client CA files
// again (SIGHUP: certificate rotation): new handshakes use them, open
// connections keep theirs. It returns the new certificate. If a file
// cannot be read, the key does not match the certificate or the
// certificate has expired, nothing changes and the error says why;
// ErrNoTLS without TLS.
func (d *Daemon) ReloadTLS() (*x509.Certificate, error) {
	if d.tls == nil {
		return nil, ErrNoTLS
	}
	cfg, leaf, err := d.tls.files.load(time.Now())
	if err != nil {
		return nil, err
	}
	d.tls.current.Store(cfg)
	d.tls.leaf.Store(leaf)
	return leaf, nil
}

// CertificateLogAttrs describe a certificate for the log: subject, DNS and
// IP subject alternative names, serial (hex) and expiry. Never key material.
func CertificateLogAttrs(c *x509.Certificate) []any {
	sans := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		sans = append(sans, ip.String())
	}
	return []any{"subject", c.Subject.String(), "sans", strings.Join(sans, ","), "serial", c.SerialNumber.Text(16),
		"not_after", c.NotAfter.UTC().Format(time.RFC3339)}
}

// checkPlainHTTP refuses plain-text HTTP on an address other than loopback
// (bearer tokens would cross the network readable), unless cfg.Insecure;
// then it warns once. The address is loopback when its host is a loopback
// IP or a name every address of which is loopback; an empty host or an
// unspecified IP (0.0.0.0, ::) is every interface.
func checkPlainHTTP(ctx context.Context, cfg Config, log *slog.Logger) error {
	// public_url is where hosts send their tokens (the audience, the
	// metadata, every 401 challenge name it): an http:// one off loopback
	// tells them to send tokens in plain text, whatever a2ad listens on.
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Scheme == "http" {
		ip := net.ParseIP(u.Hostname())
		if h := u.Hostname(); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			if !cfg.Insecure {
				return fmt.Errorf("config: public_url %s is http:// outside loopback: hosts would send their bearer tokens to it in plain text; "+
					"make it https:// (a2ad's tls, or the proxy in front of it), or set insecure: true if the network is secured otherwise", cfg.PublicURL)
			}
			log.Warn("public_url is http:// outside loopback (insecure: true): hosts send their bearer tokens to it in plain text", "public_url", cfg.PublicURL)
		}
	}
	if cfg.TLS.CertFile != "" {
		return nil
	}
	loopback, err := loopbackAddr(ctx, cfg.HTTPAddr)
	if err != nil {
		return err
	}
	switch {
	case loopback:
		return nil
	case cfg.Insecure:
		log.Warn("HTTP listener in plain text on an address other than loopback (insecure: true): bearer tokens cross the network readable unless it is secured otherwise",
			"http_addr", cfg.HTTPAddr)
		return nil
	}
	return fmt.Errorf("config: http_addr %s is not loopback and has no TLS: bearer tokens would cross the network in plain text; "+
		"set tls.cert_file and tls.key_file (--tls-cert, --tls-key), or insecure: true if the network is secured otherwise", cfg.HTTPAddr)
}

// loopbackAddr reports whether a listen address (host:port) is on
// loopback only, resolving a host name (at most 5 s).
func loopbackAddr(ctx context.Context, hostport string) (bool, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false, fmt.Errorf("config: http_addr %q: want host:port, e.g. 127.0.0.1:8080", hostport)
	}
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return false, fmt.Errorf("config: http_addr %s: the host name %s does not resolve", hostport, host)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, nil
		}
	}
	return true, nil
}

// requireClientCertificate refuses, with 403 client_certificate_required,
// a request that came without a client certificate verified against
// tls.client_ca_file (the handshake verified it: [TLSConfig.load]).
func requireClientCertificate(refused func(reason string), h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			refused("client_certificate_required")
			writeHTTPError(w, http.StatusForbidden, "client_certificate_required",
				"the admin API needs a client certificate issued by a CA of tls.client_ca_file, in addition to its token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// httpErrorLog is the HTTP server's error log (http.Server.ErrorLog):
// failed TLS handshakes (a scanner, a client that speaks plain text or an
// old TLS, a client certificate that does not verify) go through the
// aggregator, so a stream of them makes a bounded number of lines.
type httpErrorLog struct{ a *aggregator }

func (w httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(msg, "http: TLS handshake error from "); ok {
		remote, reason, _ := strings.Cut(rest, ": ")
		w.a.logAttrs("http: tls handshake", slog.LevelInfo, "TLS handshake failed", "remote", remote, "reason", reason)
		return len(p), nil
	}
	w.a.logAttrs("http: server", slog.LevelWarn, "HTTP server error", "err", msg)
	return len(p), nil
}
