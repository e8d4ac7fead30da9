package natscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// The first run on a machine builds nats-server from the module cache (up to
// a minute or two on a cold Go build cache, on 2 cores); later runs reuse
// the cached binary, and each test takes some seconds.

const writeRetry = 20 * time.Second // covers a stream-leader election

// TestKVSurvivesNodeKill writes an R3 KV bucket on a three-node cluster,
// SIGKILLs the node that both leads the bucket's stream and serves the
// client (so a leader election and a client reconnect both happen), keeps
// writing, reads everything back, restarts the node and checks it catches
// up.
func TestKVSurvivesNodeKill(t *testing.T) {
	start := time.Now()
	c := Start(t, 3)
	t.Logf("cluster ready in %v: %s", time.Since(start).Round(time.Millisecond), c.URLs())
	if c.N() != 3 {
		t.Fatalf("N() = %d, want 3", c.N())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const bucket, stream = "natscluster_test", "KV_natscluster_test"
	setup, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(setup.Close)
	setupJS, err := jetstream.New(setup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setupJS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	leader := streamLeader(ctx, t, setupJS, stream)
	victim := c.Index(leader)
	if victim < 0 {
		t.Fatalf("stream leader %q is not a node", leader)
	}

	// The client knows all nodes but connects to the leader first.
	urls := []string{c.URL(victim)}
	for i := range c.N() {
		if i != victim {
			urls = append(urls, c.URL(i))
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}

	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	value := func(i int) string { return fmt.Sprintf("value-%03d-%d", i, i*7919) }
	put := func(i int) {
		t.Helper()
		err := retryFor(ctx, writeRetry, func(ctx context.Context) error {
			_, err := kv.Put(ctx, key(i), []byte(value(i)))
			return err
		})
		if err != nil {
			t.Fatalf("put %s: %v (for %v)", key(i), err, writeRetry)
		}
	}
	for i := range 50 {
		put(i)
	}

	if got := nc.ConnectedServerName(); got != c.Name(victim) {
		t.Fatalf("client connected to %q, want %s", got, c.Name(victim))
	}
	if nc.ConnectedUrl() != c.URL(victim) {
		t.Fatalf("ConnectedUrl %s, want URL(%d) = %s", nc.ConnectedUrl(), victim, c.URL(victim))
	}
	if l := streamLeader(ctx, t, js, stream); l != c.Name(victim) {
		t.Logf("stream leader moved from %s to %s before the kill", c.Name(victim), l)
	}
	killed := time.Now()
	c.Kill(victim)
	for i := 50; i < 100; i++ {
		put(i)
	}
	t.Logf("killed %s (stream leader, the client's server); the 50 writes after it took %v (new leader %s)",
		c.Name(victim), time.Since(killed).Round(time.Millisecond), streamLeader(ctx, t, js, stream))
	if got := nc.ConnectedServerName(); got == c.Name(victim) || got == "" {
		t.Fatalf("client on %q after %s was killed", got, c.Name(victim))
	}
	checkAll(ctx, t, kv, 100, key, value)

	restarted := time.Now()
	c.Restart(victim)
	// The restarted node is back in the stream's peer set and current.
	err = retryFor(ctx, 30*time.Second, func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		cl := s.CachedInfo().Cluster
		if cl == nil || cl.Leader == "" {
			return errors.New("no stream leader")
		}
		if len(cl.Replicas) != 2 {
			return fmt.Errorf("leader %s has %d replicas, want 2", cl.Leader, len(cl.Replicas))
		}
		for _, r := range cl.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("replica %s: current=%v offline=%v", r.Name, r.Current, r.Offline)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s did not rejoin the stream: %v", c.Name(victim), err)
	}
	t.Logf("%s restarted and current in %v", c.Name(victim), time.Since(restarted).Round(time.Millisecond))

	// Read everything through the restarted node alone.
	nc2, err := nats.Connect(c.URL(victim))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	if got := nc2.ConnectedServerName(); got != c.Name(victim) {
		t.Fatalf("connected to %q, want %s", got, c.Name(victim))
	}
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	kv2, err := js2.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	checkAll(ctx, t, kv2, 100, key, value)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// streamLeader returns the server name of the stream's leader, waiting
// (up to 20 s) for one to be elected.
func streamLeader(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	var leader string
	err := retryFor(ctx, writeRetry, func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		if cl := s.CachedInfo().Cluster; cl != nil && cl.Leader != "" {
			leader = cl.Leader
			return nil
		}
		return errors.New("no leader")
	})
	if err != nil {
		t.Fatalf("stream %s leader: %v", stream, err)
	}
	return leader
}

// checkAll reads keys 0..n-1 and requires their exact values. Gets are
// retried: a KV bucket allows direct gets, which any replica may answer, and
// a replica may briefly lag the leader (a lagging key reads as not found).
func checkAll(ctx context.Context, t *testing.T, kv jetstream.KeyValue, n int, key, value func(int) string) {
	t.Helper()
	for i := range n {
		var got string
		err := retryFor(ctx, writeRetry, func(ctx context.Context) error {
			e, err := kv.Get(ctx, key(i))
			if err != nil {
				return err
			}
			got = string(e.Value())
			return nil
		})
		if err != nil {
			t.Fatalf("get %s: %v", key(i), err)
		}
		if got != value(i) {
			t.Fatalf("get %s = %q, want %q", key(i), got, value(i))
		}
	}
}

// retryFor retries f (2 s per attempt) for up to d.
func retryFor(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return retry(ctx, f)
}

// TestDeployConfigsStartACluster checks the shipped deploy/nats-cluster
// configs: nats-server -t accepts them unmodified, and, with their fixed
// ports replaced by free ones and their store dirs by temp dirs, the three
// form a cluster that serves an R3 stream.
func TestDeployConfigsStartACluster(t *testing.T) {
	bin := BuildServer(t)
	var confs []string
	for i := 1; i <= 3; i++ {
		path, err := filepath.Abs(filepath.Join("..", "..", "deploy", "nats-cluster", fmt.Sprintf("n%d.conf", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-t", "-c", path)
		cmd.Dir = t.TempDir() // in case the check ever touched relative paths
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nats-server -t -c %s: %v\n%s", path, err, out)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, string(b))
	}

	// The shipped ports: clients, routes, monitoring of n1, n2, n3.
	shipped := []int{4222, 4223, 4224, 6222, 6223, 6224, 8222, 8223, 8224}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		free, err := freePorts(len(shipped))
		if err != nil {
			t.Fatal(err)
		}
		c := newCluster(t, 3)
		var launchErr error
		for i, nd := range c.nodes {
			conf := rewriteConf(t, confs[i], shipped, free, nd.store)
			nd.restartConf = conf
			if launchErr = c.launch(nd, conf); launchErr != nil {
				break
			}
		}
		if launchErr != nil {
			// Most likely a pre-picked port was taken before nats-server
			// bound it: start over with other ports.
			c.stop()
			if attempt == attempts {
				t.Fatalf("attempt %d: %v", attempt, launchErr)
			}
			t.Logf("attempt %d: %v; retrying with other ports", attempt, launchErr)
			continue
		}
		c.waitReady()
		for i, nd := range c.nodes {
			if want := "nats://127.0.0.1:" + strconv.Itoa(free[i]); nd.clientURL != want {
				t.Errorf("%s client URL %s, want %s", nd.name, nd.clientURL, want)
			}
		}
		return
	}
}

var storeDirRE = regexp.MustCompile(`(?m)^(\s*store_dir:\s*).*$`)

// rewriteConf replaces every 127.0.0.1:<from[i]> by 127.0.0.1:<to[i]> and the
// store_dir value by store; each must occur.
func rewriteConf(t *testing.T, conf string, from, to []int, store string) string {
	t.Helper()
	if n := len(storeDirRE.FindAllString(conf, -1)); n != 1 {
		t.Fatalf("%d store_dir lines, want 1", n)
	}
	conf = storeDirRE.ReplaceAllLiteralString(conf, "  store_dir: "+strconv.Quote(store))
	var pairs []string
	for i := range from {
		pairs = append(pairs, "127.0.0.1:"+strconv.Itoa(from[i]), "127.0.0.1:"+strconv.Itoa(to[i]))
	}
	// One pass, so a new port never gets rewritten again.
	out := strings.NewReplacer(pairs...).Replace(conf)
	for _, p := range from[3:6] {
		if !strings.Contains(conf, "nats://127.0.0.1:"+strconv.Itoa(p)) {
			t.Fatalf("conf has no route to port %d:\n%s", p, conf)
		}
	}
	// No fixed port may be left for the test to bind.
	allowed := map[string]bool{}
	for _, p := range to {
		allowed[strconv.Itoa(p)] = true
	}
	for _, m := range loopbackPortRE.FindAllStringSubmatch(out, -1) {
		if !allowed[m[1]] {
			t.Fatalf("conf uses port %s, which the test does not know how to replace:\n%s", m[1], conf)
		}
	}
	if !strings.Contains(out, "\nlisten: 127.0.0.1:") || !strings.Contains(out, "\nhttp: 127.0.0.1:") {
		t.Fatalf("conf has no loopback listen or http line:\n%s", conf)
	}
	return out
}

var loopbackPortRE = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// TestDeployConfigsWithTLS runs the shipped configs with their TLS
// includes (tls.conf for clients, route-tls.conf for the routes) in
// place, certificates made here as README.md says (a CA, one node
// certificate for serverAuth and clientAuth): the routes form a cluster
// over TLS, a client with the CA works, a plain-text one is refused.
func TestDeployConfigsWithTLS(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "nats-cluster")
	ca := testcert.NewCA(t, "nats-cluster test CA")
	node := ca.Peer(t, "127.0.0.1", "localhost")
	tlsDir := t.TempDir()
	for name, body := range map[string][]byte{"ca.crt": ca.PEM, "node.crt": node.CertPEM, "node.key": node.KeyPEM} {
		if err := os.WriteFile(filepath.Join(tlsDir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The includes, inline, with ./tls/ where the files are.
	inline := func(file string) string {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(b), "./tls/", tlsDir+"/")
	}
	var confs []string
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.conf", i)))
		if err != nil {
			t.Fatal(err)
		}
		conf := string(b)
		for line, file := range map[string]string{"  # include ./route-tls.conf\n": "route-tls.conf", "# include ./tls.conf\n": "tls.conf"} {
			if !strings.Contains(conf, line) {
				t.Fatalf("n%d.conf has no line %q", i, line)
			}
			conf = strings.Replace(conf, line, inline(file)+"\n", 1)
		}
		confs = append(confs, conf)
	}
	shipped := []int{4222, 4223, 4224, 6222, 6223, 6224, 8222, 8223, 8224}
	free, err := freePorts(len(shipped))
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3)
	c.clientOpts = []nats.Option{nats.RootCAs(filepath.Join(tlsDir, "ca.crt"))}
	for i, nd := range c.nodes {
		if err := c.launch(nd, rewriteConf(t, confs[i], shipped, free, nd.store)); err != nil {
			t.Fatal(err)
		}
	}
	c.waitReady() // an R3 stream over routes that are TLS only
	for _, nd := range c.nodes {
		routez, err := os.ReadFile(nd.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(routez), "TLS required for client connections") {
			t.Errorf("%s: the log does not say client TLS is required:\n%s", nd.name, routez)
		}
	}
	nc, err := nats.Connect(c.nodes[0].clientURL, nats.RootCAs(filepath.Join(tlsDir, "ca.crt")))
	if err != nil {
		t.Fatalf("client with the CA: %v", err)
	}
	st, err := nc.TLSConnectionState()
	nc.Close()
	if err != nil || st.PeerCertificates[0].SerialNumber.Cmp(node.Cert.SerialNumber) != 0 {
		t.Errorf("client TLS state %v, want the node certificate", err)
	}
	if nc, err := nats.Connect(c.nodes[0].clientURL, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client without the CA connected")
	}
}

// TestDeployConfigsWithAuthCallout runs the shipped configs with
// auth-callout.conf included and a2ad, on node 1, as the callout service
// with its system account user (system_url listing every node, as the
// docs say): an agent on node 3 connects with its a2ad credential alone
// (the authorization request crosses the routes), a forged credential is
// refused on node 2, and — after the node that holds a2ad's system
// connection is killed (measured before: with system_url naming one node,
// that node down left revoked connections open for good) — revoking the
// agent's credentials through a2ad closes its live connections on the
// nodes left within seconds, after which it is refused at connect.
func TestDeployConfigsWithAuthCallout(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "nats-cluster")
	callout, err := os.ReadFile(filepath.Join(dir, "auth-callout.conf"))
	if err != nil {
		t.Fatal(err)
	}
	issuer, _ := nkeys.CreateAccount()
	seed, _ := issuer.Seed()
	pub, _ := issuer.PublicKey()
	seedFile := filepath.Join(t.TempDir(), "issuer.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	// nats-server reads them from its environment, which it inherits.
	t.Setenv("A2AD_NATS_PASSWORD", "a2ad-secret")
	t.Setenv("A2AD_SYSTEM_NATS_PASSWORD", "system-secret")
	t.Setenv("SYS_NATS_PASSWORD", "sys-secret")
	t.Setenv("A2AD_CALLOUT_ISSUER", pub)
	var confs []string
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.conf", i)))
		if err != nil {
			t.Fatal(err)
		}
		line := "# include ./auth-callout.conf\n"
		if !strings.Contains(string(b), line) {
			t.Fatalf("n%d.conf has no line %q", i, line)
		}
		confs = append(confs, strings.Replace(string(b), line, string(callout)+"\n", 1))
	}
	shipped := []int{4222, 4223, 4224, 6222, 6223, 6224, 8222, 8223, 8224}
	free, err := freePorts(len(shipped))
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3)
	c.clientOpts = []nats.Option{nats.UserInfo("a2ad", "a2ad-secret")}
	for i, nd := range c.nodes {
		if err := c.launch(nd, rewriteConf(t, confs[i], shipped, free, nd.store)); err != nil {
			t.Fatal(err)
		}
	}
	c.waitReady()
	urls := func(user string) string {
		var us []string
		for i := range c.N() {
			us = append(us, "nats://"+user+"@"+strings.TrimPrefix(c.URL(i), "nats://"))
		}
		return strings.Join(us, ",")
	}
	d, err := daemon.Start(context.Background(), daemon.Config{NATSURL: urls("a2ad:a2ad-secret"), DataDir: t.TempDir(), Replicas: 3,
		NATSAuthCallout: daemon.NATSAuthCalloutConfig{IssuerSeedFile: seedFile, SystemURL: urls("a2ad-system:system-secret")}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	cred, _, err := d.AgentKeys.Mint("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	lost := make([]chan struct{}, c.N()) // closed when the agent's connection to node i is lost
	for i := range c.N() {
		lost[i] = make(chan struct{})
		var once sync.Once
		agent, err := nats.Connect(c.URL(i), nats.Token(cred), nats.CustomInboxPrefix("_INBOX_fraud-review"), nats.MaxReconnects(0),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}), // the closing violation is expected
			nats.DisconnectErrHandler(func(*nats.Conn, error) { once.Do(func() { close(lost[i]) }) }))
		if err != nil {
			t.Fatalf("agent on node %d with its a2ad credential: %v", i+1, err)
		}
		defer agent.Close()
	}
	if nc, err := nats.Connect(c.URL(1), nats.Token("forged"), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("forged credential on node 2: %v, want an authorization violation", err)
	}
	// Kill the node of a2ad's system connection.
	system := -1
	for i := range c.N() {
		var z struct {
			Conns []struct {
				User string `json:"authorized_user"`
			} `json:"connections"`
		}
		if err := getJSON(c.nodes[i].monitorURL+"/connz?acc=SYS&auth=1", &z); err != nil {
			t.Fatal(err)
		}
		for _, cn := range z.Conns {
			if cn.User == "a2ad-system" {
				system = i
			}
		}
	}
	if system < 0 {
		t.Fatal("no node has a2ad's system connection")
	}
	// CI's failing layout, made certain: the revocations bucket's leader
	// (and with it the watcher's consumer) on the node killed too, so
	// a2ad's own watcher stalls until missed heartbeats and a new leader.
	moveStreamLeader(t, c, "KV_"+daemon.RevocationsBucket, c.Name(system))
	c.Kill(system)
	<-lost[system]
	// The write waits out the election of streams whose leader was on the
	// node killed (Revoke retries it); from then on the cut-off is a2ad's.
	asked := time.Now()
	if _, err := d.Revoke(context.Background(), "fraud-review", ""); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for i := range c.N() {
		if i == system {
			continue
		}
		select {
		case <-lost[i]:
			t.Logf("agent's connection on node %d closed %s after the revocation was stored (%s after it was asked for; node %d, a2ad's system connection's, down)",
				i+1, time.Since(revoked).Round(time.Millisecond), time.Since(asked).Round(time.Millisecond), system+1)
		case <-time.After(5*time.Second - time.Since(revoked)):
			t.Fatalf("the revoked agent's connection on node %d still open 5 s after the revocation was stored", i+1)
		}
	}
	survivor := (system + 1) % c.N()
	if nc, err := nats.Connect(c.URL(survivor), nats.Token(cred), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("revoked credential on node %d: %v, want an authorization violation", survivor+1, err)
	}
}

// moveStreamLeader makes the server named to the leader of stream (a
// stepdown with a preferred placement, nats-server 2.11+), as user a2ad.
func moveStreamLeader(t *testing.T, c *Cluster, stream, to string) {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.UserInfo("a2ad", "a2ad-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := []byte(`{"placement":{"preferred":"` + to + `"}}`)
	for streamLeader(ctx, t, js, stream) != to {
		if _, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req); err != nil {
			t.Fatalf("moving the leader of %s to %s: %v", stream, to, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
