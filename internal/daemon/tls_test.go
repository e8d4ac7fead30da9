package daemon_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tlsDaemon is a2ad serving HTTPS with a certificate of ca, on an external
// NATS (no agent: these tests are about the listener).
type tlsDaemon struct {
	d                 *daemon.Daemon
	ca                *testcert.CA
	dir               string
	certFile, keyFile string
	log               *testlog.Buffer
}

func startTLS(t *testing.T, change func(*daemon.Config)) *tlsDaemon {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	td := &tlsDaemon{ca: testcert.NewCA(t, "a2ad test CA"), dir: t.TempDir(), log: &testlog.Buffer{}}
	td.certFile, td.keyFile = td.ca.Server(t).WriteFiles(t, td.dir, "server")
	cfg := daemon.Config{NATSURL: ns.ClientURL(), HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		TLS: daemon.TLSConfig{CertFile: td.certFile, KeyFile: td.keyFile}}
	if change != nil {
		change(&cfg)
	}
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(td.log, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	td.d = d
	return td
}

// client trusts only the test CA; cert, if given, is its client certificate.
func (td *tlsDaemon) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: td.ca.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
}

func (td *tlsDaemon) token(t *testing.T, scope string) string {
	t.Helper()
	tok, err := mcpedge.MintDevToken(td.d.Config.DataDir, td.d.Auth.Audience(), "test-host", "default", scope, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func get(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With TLS on, every URL a2ad names is https, and a host with the go-sdk
// client over HTTPS, trusting the CA, is served; TLS 1.2 is the least.
func TestHTTPSListener(t *testing.T) {
	td := startTLS(t, nil)
	if !strings.HasPrefix(td.d.HTTPURL, "https://127.0.0.1:") {
		t.Fatalf("HTTPURL = %s, want https://127.0.0.1:port", td.d.HTTPURL)
	}
	if got, want := td.d.Auth.Audience(), td.d.HTTPURL+"/mcp"; got != want {
		t.Errorf("default audience = %s, want %s", got, want)
	}
	aud, _ := os.ReadFile(filepath.Join(td.d.Config.DataDir, "auth", "audience"))
	if got := strings.TrimSpace(string(aud)); got != td.d.HTTPURL+"/mcp" {
		t.Errorf("audience file for `a2ad token mint` = %s, want %s/mcp", got, td.d.HTTPURL)
	}
	c := td.client(nil)
	status, body := get(t, c, td.d.HTTPURL+mcpedge.MetadataPath, "")
	var md struct{ Resource string }
	if err := json.Unmarshal([]byte(body), &md); status != 200 || err != nil || md.Resource != td.d.HTTPURL+"/mcp" {
		t.Errorf("protected resource metadata: %d %s, want resource %s/mcp", status, body, td.d.HTTPURL)
	}
	status, body = get(t, c, td.d.HTTPURL+"/mcp", "")
	if status != 401 {
		t.Errorf("GET /mcp without a token: %d %s, want 401", status, body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if status, body := get(t, c, td.d.HTTPURL+path, ""); status != 200 {
			t.Errorf("GET %s over HTTPS: %d %s, want 200", path, status, body)
		}
	}
	if status, _ := get(t, c, td.d.HTTPURL+"/v1/tasks", td.token(t, mcpedge.ScopeAdmin)); status != 200 {
		t.Errorf("GET /v1/tasks over HTTPS: %d, want 200", status)
	}

	hc := td.client(nil)
	hc.Transport = mcpedge.BearerTransport(td.token(t, "a2a:read a2a:delegate"), hc.Transport)
	session, err := mcp.NewClient(&mcp.Implementation{Name: "tls-host", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: td.d.HTTPURL + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("go-sdk client over HTTPS: %v", err)
	}
	defer session.Close()
	res, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("agents_list over HTTPS: %v %+v", err, res)
	}

	// Plain text to the TLS listener: Go's server answers 400, never the API.
	plainURL := "http://" + strings.TrimPrefix(td.d.HTTPURL, "https://")
	status, body = get(t, http.DefaultClient, plainURL+"/v1/tasks", td.token(t, mcpedge.ScopeAdmin))
	if status != 400 || strings.Contains(body, "tasks") {
		t.Errorf("plain http to the TLS listener: %d %q, want 400 and no answer of the API", status, body)
	}
	waitFor(t, "the failed handshake in a2ad's log", func() bool {
		return strings.Contains(td.log.String(), `msg="TLS handshake failed" remote=127.0.0.1:`) &&
			strings.Contains(td.log.String(), `reason="client sent an HTTP request to an HTTPS server"`)
	})
	// A client that cannot do TLS 1.2 is refused in the handshake.
	addr := strings.TrimPrefix(td.d.HTTPURL, "https://")
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: td.ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Errorf("a TLS 1.1 client completed a handshake; want it refused")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: td.ca.Pool(), MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("a TLS 1.2 client: %v", err)
	}
	if v := conn.ConnectionState().Version; v != tls.VersionTLS12 {
		t.Errorf("TLS 1.2 client negotiated %x", v)
	}
	conn.Close()
}

// SIGHUP's reload under load: no request fails, new handshakes get the new
// certificate, a connection opened before keeps working; a reload that
// fails keeps the certificate in force.
func TestTLSCertificateReloadUnderLoad(t *testing.T) {
	td := startTLS(t, nil)
	first := td.ca.ServerUntil(t, time.Now().Add(48*time.Hour).Truncate(time.Second)) // the rotated one; expires later
	old := serialSeen(t, td)
	if _, err := td.d.ReloadTLS(); err != nil { // the same files: nothing wrong with them
		t.Fatal(err)
	}
	kept := td.client(nil) // keep-alive: one connection for the whole test
	if status, _ := get(t, kept, td.d.HTTPURL+"/healthz", ""); status != 200 {
		t.Fatal(status)
	}

	var stop atomic.Bool
	var requests, failures atomic.Int64
	var mu sync.Mutex
	var firstFailure error
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := td.client(nil)
			c.Transport.(*http.Transport).DisableKeepAlives = true // a handshake per request
			for !stop.Load() {
				resp, err := c.Get(td.d.HTTPURL + "/healthz")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = errors.New(resp.Status)
					}
				}
				requests.Add(1)
				if err != nil {
					failures.Add(1)
					mu.Lock()
					firstFailure = cmpErr(firstFailure, err)
					mu.Unlock()
				}
			}
		}()
	}
	waitFor(t, "requests before the reload", func() bool { return requests.Load() >= 50 })
	// Rotate: new files written in place, then the reload.
	if err := os.WriteFile(td.certFile, first.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(td.keyFile, first.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := td.d.ReloadTLS()
	if err != nil {
		t.Fatal(err)
	}
	if leaf.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Errorf("ReloadTLS returned serial %x, want the new %x", leaf.SerialNumber, first.Cert.SerialNumber)
	}
	before := requests.Load()
	waitFor(t, "requests after the reload", func() bool { return requests.Load() >= before+50 })
	stop.Store(true)
	wg.Wait()
	if f := failures.Load(); f != 0 {
		t.Errorf("%d of %d requests failed during the reload; first: %v", f, requests.Load(), firstFailure)
	}
	if got := serialSeen(t, td); got != first.Cert.SerialNumber.Text(16) || got == old {
		t.Errorf("after the reload a new handshake sees serial %s, want the new certificate's %x (old %s)", got, first.Cert.SerialNumber, old)
	}
	if status, _ := get(t, kept, td.d.HTTPURL+"/healthz", ""); status != 200 {
		t.Errorf("the connection opened before the reload: %d", status)
	}
	got := metricLineWith(t, kept, td.d.HTTPURL, "a2ad_http_tls_certificate_expiry_timestamp_seconds")
	if v, err := strconv.ParseFloat(got, 64); err != nil || int64(v) != first.Cert.NotAfter.Unix() {
		t.Errorf("a2ad_http_tls_certificate_expiry_timestamp_seconds = %q, want %d (the new certificate's NotAfter)", got, first.Cert.NotAfter.Unix())
	}

	// A key that does not match, then an unreadable file: refused, and
	// the certificate in force stays.
	other := td.ca.Server(t)
	if err := os.WriteFile(td.keyFile, other.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := td.d.ReloadTLS(); err == nil || !strings.Contains(err.Error(), "config: tls.cert_file "+td.certFile+" and tls.key_file "+td.keyFile) {
		t.Errorf("reload with a key of another certificate: %v, want the error naming both files", err)
	}
	expired := td.ca.ServerUntil(t, time.Now().Add(-time.Minute))
	expired.WriteFiles(t, td.dir, "server")
	if _, err := td.d.ReloadTLS(); err == nil || !strings.HasPrefix(err.Error(), "config: tls.cert_file "+td.certFile+": the certificate expired at ") {
		t.Errorf("reload with an expired certificate: %v", err)
	}
	os.Remove(td.certFile)
	if _, err := td.d.ReloadTLS(); err == nil || !strings.HasPrefix(err.Error(), "config: tls.cert_file: open ") {
		t.Errorf("reload without the certificate file: %v", err)
	}
	if got := serialSeen(t, td); got != first.Cert.SerialNumber.Text(16) {
		t.Errorf("after failed reloads new handshakes see serial %s, want %x still", got, first.Cert.SerialNumber)
	}
	t.Logf("%d requests, each its own handshake, across the reload", requests.Load())
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// serialSeen is the serial (hex) of the certificate a new handshake gets.
func serialSeen(t *testing.T, td *tlsDaemon) string {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(td.d.HTTPURL, "https://"), &tls.Config{RootCAs: td.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// With tls.client_ca_file the admin API needs a client certificate of
// that CA besides its token; /mcp does not ask for one.
func TestAdminAPIRequiresClientCertificate(t *testing.T) {
	clients := testcert.NewCA(t, "operators CA")
	caFile := clients.WriteFile(t, t.TempDir())
	td := startTLS(t, func(c *daemon.Config) { c.TLS.ClientCAFile = caFile })
	admin := td.token(t, mcpedge.ScopeAdmin)

	status, body := get(t, td.client(nil), td.d.HTTPURL+"/v1/tasks", admin)
	if status != 403 || !strings.Contains(body, `"code":"client_certificate_required"`) {
		t.Errorf("/v1/ with a token, without a client certificate: %d %s, want 403 client_certificate_required", status, body)
	}
	operator := clients.Client(t, "ops")
	if status, body := get(t, td.client(&operator.TLS), td.d.HTTPURL+"/v1/tasks", admin); status != 200 {
		t.Errorf("/v1/ with token and client certificate: %d %s, want 200", status, body)
	}
	if status, _ := get(t, td.client(&operator.TLS), td.d.HTTPURL+"/v1/tasks", ""); status != 401 {
		t.Errorf("/v1/ with a client certificate and no token: %d, want 401", status)
	}
	// A certificate of another CA, sent anyway (crypto/tls sends none
	// the server's CA list does not name): the handshake fails.
	stranger := testcert.NewCA(t, "another CA").Client(t, "ops")
	pushy := td.client(nil)
	pushy.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &stranger.TLS, nil
	}
	if resp, err := pushy.Get(td.d.HTTPURL + "/v1/tasks"); err == nil {
		resp.Body.Close()
		t.Errorf("a client certificate of another CA: %s, want the handshake refused", resp.Status)
	}
	// Hosts on /mcp need no client certificate.
	status, body = originRequest(t, td.client(nil), td.d.HTTPURL, td.d.Config.DataDir, td.d.Auth.Audience(), "/mcp", "")
	if status != 200 {
		t.Errorf("/mcp without a client certificate: %d %s, want 200", status, body)
	}
	if got := metricLineWith(t, td.client(nil), td.d.HTTPURL, `a2ad_auth_failures_total{edge="http",reason="client_certificate_required"}`); got != "1" {
		t.Errorf("a2ad_auth_failures_total{reason=client_certificate_required} = %q, want 1", got)
	}
}

// Outside loopback a2ad does not serve tokens in plain text unless told
// insecure: true; the error says both ways out.
func TestPlainHTTPOutsideLoopbackIsRefused(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	startWith := func(cfg daemon.Config) (*testlog.Buffer, error) {
		cfg.NATSURL, cfg.DataDir = ns.ClientURL(), t.TempDir()
		log := &testlog.Buffer{}
		d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(log, nil)), true)
		if err == nil {
			d.Stop()
		}
		return log, err
	}
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		_, err := startWith(daemon.Config{HTTPAddr: addr})
		want := "config: http_addr " + addr + " is not loopback and has no TLS: bearer tokens would cross the network in plain text; " +
			"set tls.cert_file and tls.key_file (--tls-cert, --tls-key), or insecure: true if the network is secured otherwise"
		if err == nil || err.Error() != want {
			t.Errorf("http_addr %s without TLS: %v\nwant %s", addr, err, want)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		if _, err := startWith(daemon.Config{HTTPAddr: addr}); err != nil {
			t.Errorf("http_addr %s (loopback) in plain text: %v, want it served", addr, err)
		}
	}
	log, err := startWith(daemon.Config{HTTPAddr: "0.0.0.0:0", Insecure: true})
	if err != nil {
		t.Fatalf("insecure: true: %v", err)
	}
	if n := strings.Count(log.String(), "HTTP listener in plain text on an address other than loopback (insecure: true)"); n != 1 {
		t.Errorf("insecure: true logged the warning %d times, want once:\n%s", n, log)
	}
	ca := testcert.NewCA(t, "a2ad test CA")
	cert, key := ca.Server(t).WriteFiles(t, t.TempDir(), "server")
	log, err = startWith(daemon.Config{HTTPAddr: "0.0.0.0:0", TLS: daemon.TLSConfig{CertFile: cert, KeyFile: key}})
	if err != nil || strings.Contains(log.String(), "plain text") {
		t.Errorf("0.0.0.0 with TLS: %v\n%s", err, log)
	}
	// Without public_url the default audience names the wildcard address
	// (https://[::]:port/mcp), which no host can use: said at start.
	if !strings.Contains(log.String(), "public_url is not set and http_addr is every interface") {
		t.Errorf("0.0.0.0 without public_url: no warning that the default audience names the wildcard address:\n%s", log)
	}
	// Measured before: public_url http://a2ad.example.com started silently,
	// and the audience, the metadata and every 401 sent hosts' tokens there.
	for _, tls := range []daemon.TLSConfig{{}, {CertFile: cert, KeyFile: key}} {
		_, err = startWith(daemon.Config{HTTPAddr: "127.0.0.1:0", PublicURL: "http://a2ad.example.com", TLS: tls})
		if want := "config: public_url http://a2ad.example.com is http:// outside loopback: hosts would send their bearer tokens to it in plain text; " +
			"make it https:// (a2ad's tls, or the proxy in front of it), or set insecure: true if the network is secured otherwise"; err == nil || err.Error() != want {
			t.Errorf("public_url http://a2ad.example.com (TLS %v): %v\nwant %s", tls.CertFile != "", err, want)
		}
	}
	if _, err = startWith(daemon.Config{HTTPAddr: "127.0.0.1:0", PublicURL: "http://localhost:8080"}); err != nil {
		t.Errorf("public_url http://localhost:8080: %v, want it served", err)
	}
}

// A TLS or Origin setting a2ad cannot use stops the start with an error
// naming the key and what is wanted.
func TestHTTPSettingErrorsNameTheKey(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	ca := testcert.NewCA(t, "a2ad test CA")
	dir := t.TempDir()
	cert, key := ca.Server(t).WriteFiles(t, dir, "server")
	oldCert, oldKey := ca.ServerUntil(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)).WriteFiles(t, dir, "expired")
	startWith := func(cfg daemon.Config) error {
		cfg.NATSURL, cfg.DataDir = ns.ClientURL(), t.TempDir()
		d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
		if err == nil {
			d.Stop()
		}
		return err
	}
	for cfg, want := range map[*daemon.TLSConfig]string{
		{CertFile: cert}:                                  "config: tls.cert_file and tls.key_file go together",
		{ClientCAFile: cert}:                              "config: tls.client_ca_file needs tls.cert_file and tls.key_file",
		{CertFile: cert, KeyFile: cert}:                   "config: tls.cert_file " + cert + " and tls.key_file " + cert + ": want a PEM certificate (chain) and its PEM private key",
		{CertFile: cert, KeyFile: key, ClientCAFile: key}: "config: tls.client_ca_file " + key + ": want PEM CA certificates; it holds none",
		{CertFile: oldCert, KeyFile: oldKey}:              "config: tls.cert_file " + oldCert + ": the certificate expired at 2026-01-02T03:04:05Z",
		{CertFile: cert, KeyFile: dir + "/none.pem"}:      "config: tls.key_file: open " + dir + "/none.pem: no such file or directory",
	} {
		if err := startWith(daemon.Config{HTTPAddr: "127.0.0.1:0", TLS: *cfg}); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("tls %+v: %v, want %s…", *cfg, err, want)
		}
	}
	if err := startWith(daemon.Config{HTTPAddr: "127.0.0.1:0", HTTPAllowedOrigins: []string{"https://ok.example", "console.example.com"}}); err == nil ||
		err.Error() != `config: http_allowed_origins[1] "console.example.com": want an origin such as https://console.example.com (scheme, host, optional port)` {
		t.Errorf("a bad http_allowed_origins entry: %v", err)
	}
}

func metricLineWith(t *testing.T, c *http.Client, base, series string) string {
	t.Helper()
	_, body := get(t, c, base+"/metrics", "")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}
