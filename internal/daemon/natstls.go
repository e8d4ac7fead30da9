package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/nats-io/nats.go"
)

// NATSTLSConfig is TLS on NATS (the nats_tls block): the embedded
// server's certificate, with which agents connect over TLS, and how a2ad
// verifies an external NATS server (nats_url) and proves itself to it.
// Files are PEM. TLS 1.2 is the minimum either way.
type NATSTLSConfig struct {
	// CertFile and KeyFile are the embedded server's certificate chain
	// and private key; set, every agent must connect over TLS (tls://
	// URLs, nats.go: nats.RootCAs with the CA that issued it) unless
	// AllowNonTLS. Reloaded on SIGHUP: new connections get the new one,
	// open ones keep theirs. Flags --nats-tls-cert, --nats-tls-key. Only
	// for the embedded server (an error with nats_url).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// AllowNonTLS lets agents connect in plain text beside TLS ones (for
	// moving agents to TLS one by one); outside loopback only with
	// insecure: true, since their credentials would cross the network
	// readable. Default false: a certificate means TLS is required.
	AllowNonTLS bool `yaml:"allow_non_tls"`
	// CAFile verifies the external NATS server's certificate (nats_url)
	// instead of the system's roots; set, a2ad connects only over TLS,
	// whatever the URLs' scheme. Flag --nats-ca.
	CAFile string `yaml:"ca_file"`
	// ClientCertFile and ClientKeyFile are the certificate a2ad presents
	// to an external NATS server that verifies clients (verify: true);
	// read again at each reconnection, so a renewed file is used without
	// a restart. Flags --nats-client-cert, --nats-client-key.
	ClientCertFile string `yaml:"client_cert_file"`
	ClientKeyFile  string `yaml:"client_key_file"`
}

// NATSLimits bound each connection to the embedded server, and how many
// it holds (the nats_limits block; docs/operations.md, NATS TLS and
// limits). They hold a2ad's own in-process connection too. Zero fields
// take [embedded.DefaultLimits]; the per-agent sums are agent_limits'.
type NATSLimits struct {
	// MaxConnections is the most client connections at once; beyond, a new
	// one is refused ("maximum connections exceeded"), open ones are
	// unharmed. Default 4096.
	MaxConnections int `yaml:"max_connections"`
	// MaxSubscriptionsPerConnection is the most subscriptions one
	// connection may hold; a SUB beyond is refused ("maximum
	// subscriptions exceeded"). a2ad's own connection holds one per
	// configured agent (its events consumer) and a few more (4 with one
	// agent, 203 with 200, measured), so at least the number of agents +
	// 32, and at least 64. Default 1024, or the number of agents + 256 if
	// that is more.
	MaxSubscriptionsPerConnection int `yaml:"max_subscriptions_per_connection"`
	// MaxPendingBytes is what the server buffers for one connection that
	// reads too slowly; beyond it, or a write stuck longer than
	// WriteDeadlineSeconds, the connection is closed as a slow consumer.
	// At least 16777216 (16 MiB). Default 67108864 (64 MiB).
	MaxPendingBytes      int64 `yaml:"max_pending_bytes"`
	WriteDeadlineSeconds int   `yaml:"write_deadline_seconds"`
	// AuthTimeoutSeconds is how long a new connection has for its TLS
	// handshake and CONNECT (its credential). Default 5.
	AuthTimeoutSeconds int `yaml:"auth_timeout_seconds"`
	// PingIntervalSeconds and MaxPingsOut: a connection that leaves
	// max_pings_out pings unanswered is closed. Default 120 and 2.
	PingIntervalSeconds int `yaml:"ping_interval_seconds"`
	MaxPingsOut         int `yaml:"max_pings_out"`
}

// ownSubscriptions is the most subscriptions a2ad's own connection holds
// beside one per configured agent, with room to spare.
const ownSubscriptions = 32

// serverLimits returns l as the embedded server's limits, defaults filled,
// for a2ad with agents configured agents.
func (l NATSLimits) serverLimits(agents int) embedded.Limits {
	if l.MaxSubscriptionsPerConnection == 0 {
		l.MaxSubscriptionsPerConnection = max(embedded.DefaultLimits.MaxSubscriptions, agents+256)
	}
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	return embedded.Limits{MaxConnections: l.MaxConnections, MaxSubscriptions: l.MaxSubscriptionsPerConnection,
		MaxPendingBytes: l.MaxPendingBytes, WriteDeadline: sec(l.WriteDeadlineSeconds), AuthTimeout: sec(l.AuthTimeoutSeconds),
		PingInterval: sec(l.PingIntervalSeconds), MaxPingsOut: l.MaxPingsOut}.Or(embedded.DefaultLimits)
}

// check refuses limits a2ad could not run under with agents configured
// agents, naming the key.
func (l NATSLimits) check(agents int) error {
	if need := max(64, agents+ownSubscriptions); l.MaxSubscriptionsPerConnection != 0 && l.MaxSubscriptionsPerConnection < need {
		return fmt.Errorf("config: nats_limits.max_subscriptions_per_connection %d: want at least %d (a2ad's own connection holds one per configured agent, %d, and a few more), or 0 for the default",
			l.MaxSubscriptionsPerConnection, need, agents)
	}
	switch {
	case l.MaxConnections < 0 || (l.MaxConnections > 0 && l.MaxConnections < 2):
		return fmt.Errorf("config: nats_limits.max_connections %d: want at least 2 (a2ad's own connection and one agent's), or 0 for the default", l.MaxConnections)
	case l.MaxPendingBytes < 0 || (l.MaxPendingBytes > 0 && l.MaxPendingBytes < 16<<20):
		return fmt.Errorf("config: nats_limits.max_pending_bytes %d: want at least 16777216 (16 MiB), or 0 for the default", l.MaxPendingBytes)
	case l.WriteDeadlineSeconds < 0:
		return fmt.Errorf("config: nats_limits.write_deadline_seconds %d: want 1 or more, or 0 for the default", l.WriteDeadlineSeconds)
	case l.AuthTimeoutSeconds < 0:
		return fmt.Errorf("config: nats_limits.auth_timeout_seconds %d: want 1 or more, or 0 for the default", l.AuthTimeoutSeconds)
	case l.PingIntervalSeconds < 0:
		return fmt.Errorf("config: nats_limits.ping_interval_seconds %d: want 1 or more, or 0 for the default", l.PingIntervalSeconds)
	case l.MaxPingsOut < 0:
		return fmt.Errorf("config: nats_limits.max_pings_out %d: want 1 or more, or 0 for the default", l.MaxPingsOut)
	}
	return nil
}

// ErrNATSPlainText is the start error of a NATS listener or connection
// outside loopback without TLS and without insecure: true; its message
// says how to set up either.
var ErrNATSPlainText = errors.New("config: NATS in plain text outside loopback")

// checkNATSTLS refuses a nats_tls block that does not fit the set-up
// (embedded server or nats_url), files that do not load, and plain text
// outside loopback without insecure: true ([ErrNATSPlainText]). With
// insecure: true it returns what is in plain text outside loopback
// instead ("" if nothing), for a warning.
func checkNATSTLS(c Config) (plainText string, err error) {
	err = c.checkNATSTLS(func(what string, refusal error) error {
		if c.Insecure {
			plainText = what
			return nil
		}
		return refusal
	})
	return plainText, err
}

// checkNATSTLS is [checkNATSTLS]; plain decides on plain text outside
// loopback (what is in plain text, and the refusal).
func (c Config) checkNATSTLS(plain func(what string, refusal error) error) error {
	t := c.NATSTLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("config: nats_tls.cert_file and nats_tls.key_file go together (flags --nats-tls-cert, --nats-tls-key): set both or neither")
	}
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		return errors.New("config: nats_tls.client_cert_file and nats_tls.client_key_file go together (flags --nats-client-cert, --nats-client-key): set both or neither")
	}
	if c.NATSURL == "" {
		switch {
		case t.CAFile != "":
			return errors.New("config: nats_tls.ca_file verifies an external NATS server (nats_url); the embedded server needs none (its own certificate is nats_tls.cert_file)")
		case t.ClientCertFile != "":
			return errors.New("config: nats_tls.client_cert_file is a2ad's certificate for an external NATS server (nats_url); the embedded server's own is nats_tls.cert_file")
		case t.AllowNonTLS && t.CertFile == "":
			return errors.New("config: nats_tls.allow_non_tls needs nats_tls.cert_file and key_file: without them the embedded server speaks plain text only")
		}
		if t.CertFile != "" {
			if _, err := loadNATSCertificate(t.CertFile, t.KeyFile); err != nil {
				return err
			}
		}
		if loopback(hostOf(c.NATSListen)) {
			return nil
		}
		if t.CertFile == "" {
			return plain("nats_listen "+c.NATSListen, fmt.Errorf("%w: nats_listen %s would take agents' credentials in plain text; set nats_tls.cert_file and nats_tls.key_file (flags --nats-tls-cert FILE --nats-tls-key FILE) for TLS, "+
				"or insecure: true if the network is secured otherwise", ErrNATSPlainText, c.NATSListen))
		}
		if t.AllowNonTLS {
			return plain("nats_listen "+c.NATSListen+" with nats_tls.allow_non_tls", fmt.Errorf("%w: nats_tls.allow_non_tls on nats_listen %s would take agents' credentials in plain text; remove it, or set insecure: true if the network is secured otherwise",
				ErrNATSPlainText, c.NATSListen))
		}
		return nil
	}
	switch {
	case t.CertFile != "":
		return errors.New("config: nats_tls.cert_file is the embedded server's certificate, and nats_url embeds none; a2ad's own certificate for nats_url is nats_tls.client_cert_file")
	case t.AllowNonTLS:
		return errors.New("config: nats_tls.allow_non_tls is the embedded server's, and nats_url embeds none")
	}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return fmt.Errorf("config: nats_tls.ca_file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return fmt.Errorf("config: nats_tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.ClientCertFile != "" {
		if _, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile); err != nil {
			return fmt.Errorf("config: nats_tls.client_cert_file %s and client_key_file %s: %w", t.ClientCertFile, t.ClientKeyFile, err)
		}
	}
	if t.CAFile != "" || t.ClientCertFile != "" {
		return nil // nats.go then connects over TLS only
	}
	if err := checkPlainNATSURLs("nats_url", c.NATSURL, plain); err != nil {
		return err
	}
	if c.NATSAuthCallout.SystemURL != "" {
		return checkPlainNATSURLs("nats_auth_callout.system_url", c.NATSAuthCallout.SystemURL, plain)
	}
	return nil
}

// checkPlainNATSURLs refuses (through plain) the NATS URLs of key that
// would cross a network in plain text: without nats_tls.ca_file or a
// client certificate, nats.go speaks TLS only to a tls:// URL list.
func checkPlainNATSURLs(key, urls string, plain func(what string, refusal error) error) error {
	for _, raw := range strings.Split(urls, ",") {
		u := strings.TrimSpace(raw)
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		p, err := url.Parse(u)
		if err != nil {
			return plain(key, fmt.Errorf("config: %s %s: not a URL", key, RedactURLs(raw)))
		}
		if p.Scheme == "tls" {
			return nil // nats.go then connects over TLS only, to every URL
		}
		if !loopback(p.Hostname()) {
			return plain(key+" "+RedactURLs(raw), fmt.Errorf("%w: %s %s would send a2ad's NATS credentials in plain text; use tls:// URLs (with nats_tls.ca_file, flag --nats-ca FILE, unless the system's roots verify the server), "+
				"or insecure: true if the network is secured otherwise", ErrNATSPlainText, key, RedactURLs(raw)))
		}
	}
	return nil
}

// hostOf is the host of a host:port ("" if there is none: every address).
func hostOf(hostPort string) string {
	h, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return hostPort
	}
	return h
}

// loopback reports whether host is "localhost" or a loopback IP; "" and
// 0.0.0.0 are every address, so not.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// natsCertificate is the embedded server's certificate, swapped whole on
// a reload: each TLS handshake takes the one current then.
type natsCertificate struct {
	certFile, keyFile string
	current           atomic.Pointer[tls.Certificate]
}

func loadNATSCertificate(certFile, keyFile string) (*natsCertificate, error) {
	c := &natsCertificate{certFile: certFile, keyFile: keyFile}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload reads the files again; on an error the current one stays.
func (c *natsCertificate) reload() (*x509.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("config: nats_tls.cert_file %s and key_file %s: %w", c.certFile, c.keyFile, err)
	}
	// An expired certificate (or one not valid yet) would fail every
	// agent's handshake: refused, as on the HTTP listener.
	if now := time.Now(); now.After(cert.Leaf.NotAfter) || now.Before(cert.Leaf.NotBefore) {
		return nil, fmt.Errorf("config: nats_tls.cert_file %s: the certificate is valid from %s to %s, not now", c.certFile,
			cert.Leaf.NotBefore.UTC().Format(time.RFC3339), cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.current.Store(&cert)
	return cert.Leaf, nil
}

// serverConfig is the embedded server's TLS configuration.
func (c *natsCertificate) serverConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.current.Load(), nil }}
}

// clientOptions are a2ad's TLS options for an external NATS server: the
// CA that verifies it and a2ad's client certificate. nats.go reads both
// files again at each connection.
func (t NATSTLSConfig) clientOptions(natsURL string) []nats.Option {
	var o []nats.Option
	if t.CAFile == "" && t.ClientCertFile == "" && !strings.Contains(natsURL, "tls://") {
		// Plain text: the servers a node advertises (its cluster's
		// connect_urls) could be anywhere, and nats.go would send them
		// a2ad's user and password readable. Only the configured URLs,
		// which checkNATSTLS held to loopback (or insecure).
		o = append(o, nats.IgnoreDiscoveredServers())
	}
	if t.CAFile != "" {
		o = append(o, nats.RootCAs(t.CAFile))
	}
	if t.ClientCertFile != "" {
		o = append(o, nats.ClientCert(t.ClientCertFile, t.ClientKeyFile))
	}
	return o
}

// natsTLSFailure explains, in a2ad's words first, a TLS handshake with an
// external NATS server that failed: one that more waiting would not mend.
// nil if err is no such failure.
func natsTLSFailure(t NATSTLSConfig, err error) error {
	if errors.Is(err, nats.ErrSecureConnWanted) {
		return fmt.Errorf("the NATS server offers no TLS, and a2ad connects over TLS only (tls:// URLs, nats_tls.ca_file or client_cert_file set): %w", err)
	}
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		by := "the system's roots (set nats_tls.ca_file, flag --nats-ca, to the CA that issued it)"
		if t.CAFile != "" {
			by = "nats_tls.ca_file " + t.CAFile
		}
		return fmt.Errorf("the NATS server's certificate does not verify with %s: %w", by, err)
	}
	var alert tls.AlertError
	if !errors.Is(err, nats.ErrTLS) && !errors.As(err, &alert) {
		return nil
	}
	// A server that verifies clients (verify: true) closes the connection
	// at the handshake when it refuses their certificate: with TLS 1.3 the
	// client sees an alert or the connection closed right after it.
	mine := "a2ad presented no client certificate (set nats_tls.client_cert_file and client_key_file, flags --nats-client-cert, --nats-client-key)"
	if t.ClientCertFile != "" {
		mine = "check that nats_tls.client_cert_file " + t.ClientCertFile + " is issued by a CA the server trusts"
	}
	return fmt.Errorf("the NATS server refused a2ad's TLS handshake; %s: %w", mine, err)
}

// awaitNATS waits, up to a minute, for nc's first connection: a NATS
// cluster may still be starting. A failed TLS handshake ends the wait at
// once, with [natsTLSFailure]'s reason: more waiting would not mend a
// certificate. (nats.go reports failed handshakes only as LastError, in
// the pause between two attempts, hence the polling.) After a minute it
// returns nil and the bucket set-up says what is wrong.
func awaitNATS(ctx context.Context, nc *nats.Conn, t NATSTLSConfig) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !nc.IsConnected() {
		select {
		case <-tick.C:
			if f := natsTLSFailure(t, nc.LastError()); f != nil {
				return f
			}
			if errors.Is(nc.LastError(), nats.ErrAuthorization) {
				return errors.New("the NATS server refused the user and password of the URL (authorization violation)")
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return nil
		}
	}
	return nil
}

// ReloadNATSCertificate reads the embedded server's certificate files
// (nats_tls.cert_file, key_file) again, on SIGHUP: TLS handshakes from
// then on present it, connections already open keep theirs. It returns
// the new certificate, or nil and no error when none is configured; on
// an error the previous certificate stays in use.
func (d *Daemon) ReloadNATSCertificate() (*x509.Certificate, error) {
	if d.natsCert == nil {
		return nil, nil
	}
	return d.natsCert.reload()
}
