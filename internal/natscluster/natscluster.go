// Package natscluster runs a real multi-node NATS JetStream cluster on
// loopback for tests: each node is a separate nats-server OS process, built
// from the nats-server module version pinned in go.mod, with its own store
// directory, config file and log file under the test's temp dir.
//
// Use it where the embedded single server of internal/natstest is not enough:
// replicated (R3) streams and KV buckets, leader elections, a client that
// reconnects when its server dies.
//
//	c := natscluster.Start(t, 3)
//	nc, _ := nats.Connect(c.URLs(), nats.MaxReconnects(-1))
//	...
//	c.Kill(0)    // SIGKILL node n1
//	c.Restart(0) // same store dir and ports; waits until it has caught up
//
// No port is a fixed number: client and monitoring ports are chosen by the
// kernel and read back from the ports file nats-server writes
// (--ports_file_dir); cluster ports, which every node's routes must name up
// front, are picked free just before the start, which is retried on a bind
// failure. A restarted node reuses all its ports.
//
// Nodes that outlive the test binary (a panic on `go test -timeout`, a
// SIGKILL of the test) are not reaped: no cleanup runs then.
package natscluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	serverModule = "github.com/nats-io/nats-server/v2"
	// ClusterName is the NATS cluster name of every cluster [Start] runs.
	ClusterName = "a2ad-test"
	// ReadyTimeout bounds how long [Start] and [Cluster.Restart] wait for
	// JetStream to be usable.
	ReadyTimeout = 60 * time.Second
	// logTail is how many bytes of each node's log a failed test prints.
	logTail = 8 << 10
)

var (
	buildMu   sync.Mutex
	builtPath string
)

// BuildServer returns the path of a nats-server binary built from the
// version of github.com/nats-io/nats-server/v2 that go.mod pins. It runs `go
// list -m` and, unless the binary is cached, `go build` from the module root
// (found with `go env GOMOD` from the working directory), so the `go` command
// must be on PATH.
//
// The binary is cached across test packages and runs in
// os.UserCacheDir()/a2ad-test/nats-server-<version>/nats-server (keyed by
// the module version; a `replace` of the module is not supported). It is
// built into a temp file in that directory and renamed into place, so test
// packages building concurrently never run a half-written binary. The first
// build compiles nats-server and its dependencies: up to a minute or two on a
// cold Go build cache, a few seconds on a warm one, nothing once cached.
//
// Any error is fatal to the test (t.Fatal).
func BuildServer(t testing.TB) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtPath != "" {
		return builtPath
	}
	p, err := buildServer()
	if err != nil {
		t.Fatalf("natscluster: build nats-server: %v", err)
	}
	builtPath = p
	return p
}

func buildServer() (string, error) {
	gomod, err := goOutput("", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module (go env GOMOD is empty)")
	}
	root := filepath.Dir(gomod)
	version, err := goOutput(root, "list", "-m", "-f", "{{.Version}}", serverModule)
	if err != nil {
		return "", err
	}
	if version == "" {
		return "", fmt.Errorf("go list reports no version of %s (replaced by a directory?)", serverModule)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "a2ad-test", "nats-server-"+version)
	bin := filepath.Join(dir, "nats-server")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "nats-server-*.tmp")
	if err != nil {
		return "", err
	}
	tmpPath := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpPath) // a no-op after the rename
	if _, err := goOutput(root, "build", "-o", tmpPath, serverModule); err != nil {
		return "", err
	}
	if err := os.Chmod(tmpPath, 0o755); err != nil {
		return "", err
	}
	// Atomic on one file system; a concurrent builder renames an identical
	// binary over it, which is harmless.
	if err := os.Rename(tmpPath, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// goOutput runs the go command in dir and returns its trimmed stdout.
func goOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Cluster is a running cluster of nats-server processes. Its methods must be
// called from the test's goroutine (they call t.Fatal); they are not safe for
// concurrent use.
type Cluster struct {
	t     testing.TB
	bin   string
	nodes []*node
	// clientOpts are the options of waitReady's client (a CA for nodes
	// that require TLS).
	clientOpts []nats.Option
}

type node struct {
	name    string // server_name: n1, n2, ...
	dir     string // conf, log and ports files
	store   string // JetStream store_dir
	logPath string
	conf    string // config file path

	// Real URLs, read back from the ports file at the first start
	// (clusterURL is set before it, from the pre-picked cluster port; it
	// stays empty on a one-node cluster).
	clientURL, clusterURL, monitorURL string

	// restartConf is the config text a restart writes: the same ports and
	// store dir; empty means "rebuild it from the URLs".
	restartConf string

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// ports is the JSON of nats-server's ports file.
type ports struct {
	Nats       []string `json:"nats"`
	Cluster    []string `json:"cluster"`
	Monitoring []string `json:"monitoring"`
}

// Start builds nats-server (see [BuildServer]) and starts an n-node JetStream
// cluster (n >= 2; 3 for replicated streams that survive one node; n = 1
// runs a standalone JetStream server) named [ClusterName], with server names n1..nN, each node in its own process with
// its own store dir under t.TempDir(), JetStream limits of 64 MiB memory and
// 1 GiB file store, all on 127.0.0.1.
//
// Client and monitoring ports are chosen by the kernel (port -1) and read
// back from nats-server's ports file. Cluster (route) ports must be known up
// front, because every node routes to all nodes (a JetStream cluster needs
// configured routes, and with all of them listed the meta group expects all
// n peers): they are picked by listening on 127.0.0.1:0 and closing. If a
// node then fails to start (e.g. another process took its port), every node
// is killed and the whole start is retried with new ports, up to 3 times.
//
// It returns once every node reports healthy (/healthz) and a client on all
// URLs can read the account info and create (then delete) a stream with
// min(n, 3) replicas; after [ReadyTimeout] it fails the test naming the node
// logs. Each node's stdout and stderr go to <dir>/nK/nats-server.log; if the
// test has failed, the end of every log is printed with t.Log at cleanup.
// Cleanup kills every node.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natscluster: Start(%d): need at least one node", n)
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c, err := tryStart(t, n)
		if err == nil {
			c.waitReady()
			return c
		}
		if attempt == attempts {
			t.Fatalf("natscluster: start attempt %d of %d: %v", attempt, attempts, err)
		}
		t.Logf("natscluster: start attempt %d: %v; retrying with other ports", attempt, err)
	}
}

// tryStart starts the n processes; on an error it kills the ones started.
func tryStart(t testing.TB, n int) (*Cluster, error) {
	t.Helper()
	c := newCluster(t, n)
	if n > 1 {
		routePorts, err := freePorts(n)
		if err != nil {
			t.Fatalf("natscluster: %v", err)
		}
		for i, nd := range c.nodes {
			nd.clusterURL = fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i])
		}
	}
	for _, nd := range c.nodes {
		if err := c.launch(nd, c.conf(nd, "127.0.0.1:-1", "127.0.0.1:-1")); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (listened on together, then closed); another process may take one before
// nats-server binds it.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ps []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	return ps, nil
}

// newCluster builds the binary, lays out the node directories and registers
// the cleanup; it starts nothing.
func newCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: BuildServer(t)}
	base := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		dir := filepath.Join(base, name)
		nd := &node{
			name:    name,
			dir:     dir,
			store:   filepath.Join(dir, "store"),
			logPath: filepath.Join(dir, "nats-server.log"),
			conf:    filepath.Join(dir, "nats-server.conf"),
		}
		if err := os.MkdirAll(nd.store, 0o700); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, nd)
	}
	// Registered after t.TempDir, so it runs before the dir is removed.
	t.Cleanup(c.cleanup)
	return c
}

// conf is nd's config: client (listen) and monitoring addresses as given,
// its cluster port from nd.clusterURL and routes to every node (nats-server
// ignores the route to itself). A one-node cluster is a standalone server:
// a clustered JetStream needs at least two peers.
func (c *Cluster) conf(nd *node, listen, monitor string) string {
	var routes []string
	for _, o := range c.nodes {
		routes = append(routes, strconv.Quote(o.clusterURL))
	}
	cluster := fmt.Sprintf(`cluster {
  name: %q
  listen: %q
  routes: [%s]
}
`, ClusterName, hostPort(nd.clusterURL), strings.Join(routes, ", "))
	if len(c.nodes) == 1 {
		cluster = ""
	}
	return fmt.Sprintf(`# Written by internal/natscluster.
server_name: %s
listen: %q
http: %q
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 4GB
}
%s`, nd.name, listen, monitor, nd.store, cluster)
}

// hostPort strips the scheme of a URL such as nats://127.0.0.1:4222.
func hostPort(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		return u[i+3:]
	}
	return u
}

// launch writes conf, starts nd's process and waits for its ports file; at
// the first start it records nd's URLs from it. An error leaves nd stopped.
func (c *Cluster) launch(nd *node, conf string) error {
	if err := os.WriteFile(nd.conf, []byte(conf), 0o600); err != nil {
		return err
	}
	portsDir := filepath.Join(nd.dir, "ports")
	// A killed server leaves its ports file behind; start from an empty dir.
	if err := os.RemoveAll(portsDir); err != nil {
		return err
	}
	if err := os.MkdirAll(portsDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== natscluster: starting %s at %s\n", nd.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "-c", nd.conf, "--ports_file_dir", portsDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("start %s: %w", nd.name, err)
	}
	nd.cmd, nd.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(nd.done)

	p, err := readPorts(portsDir, nd.done, 20*time.Second)
	if err == nil && nd.clientURL == "" {
		if len(p.Nats) == 0 || len(p.Monitoring) == 0 {
			err = fmt.Errorf("ports file without client or monitoring URL: %+v", p)
		} else {
			nd.clientURL, nd.monitorURL = p.Nats[0], p.Monitoring[0]
			if len(p.Cluster) > 0 {
				nd.clusterURL = p.Cluster[0]
			}
		}
	}
	if err != nil {
		if nd.running() {
			_ = c.kill(nd)
		}
		return fmt.Errorf("%s: %w\n%s", nd.name, err, c.tail(nd))
	}
	return nil
}

// readPorts waits for the one *.ports file nats-server writes into dir once
// its listeners are up. It fails early if the process exits.
func readPorts(dir string, exited <-chan struct{}, timeout time.Duration) (ports, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		files, _ := filepath.Glob(filepath.Join(dir, "*.ports"))
		if len(files) == 1 {
			var p ports
			b, err := os.ReadFile(files[0])
			// The file is written non-atomically: retry a partial read.
			if err == nil {
				if err = json.Unmarshal(b, &p); err == nil {
					return p, nil
				}
			}
			last = err
		}
		select {
		case <-exited:
			return ports{}, errors.New("nats-server exited during startup")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return ports{}, fmt.Errorf("no ports file in %s after %v (last error: %v)", dir, timeout, last)
		}
	}
}

// waitReady waits until every running node is healthy and JetStream serves
// a replicated stream, or fails the test after ReadyTimeout.
func (c *Cluster) waitReady() {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for _, nd := range c.nodes {
		if err := waitHealthy(ctx, nd); err != nil {
			c.fatalNotReady(err)
		}
	}
	nc, err := nats.Connect(c.URLs(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, c.clientOpts...)...)
	if err != nil {
		c.fatalNotReady(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.fatalNotReady(err)
	}
	replicas := min(len(c.nodes), 3)
	name := fmt.Sprintf("NATSCLUSTER_READY_%d", time.Now().UnixNano())
	err = retry(ctx, func(ctx context.Context) error {
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("account info: %w", err)
		}
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{"natscluster.ready." + name}, Replicas: replicas, Storage: jetstream.MemoryStorage,
		}); err != nil {
			return fmt.Errorf("create R%d stream: %w", replicas, err)
		}
		if err := js.DeleteStream(ctx, name); err != nil {
			return fmt.Errorf("delete R%d stream: %w", replicas, err)
		}
		return nil
	})
	if err != nil {
		c.fatalNotReady(err)
	}
}

func (c *Cluster) fatalNotReady(err error) {
	c.t.Helper()
	var logs []string
	for _, nd := range c.nodes {
		logs = append(logs, nd.logPath)
	}
	c.t.Fatalf("natscluster: cluster not ready for JetStream within %v: %v\nnode logs: %s", ReadyTimeout, err, strings.Join(logs, ", "))
}

// retry calls f (each call with a 2 s timeout) until it succeeds or ctx ends,
// and returns the last error.
func retry(ctx context.Context, f func(context.Context) error) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return last
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitHealthy polls nd's /healthz until it answers 200: the server is up and,
// JetStream being clustered, current with the meta leader and its streams.
func waitHealthy(ctx context.Context, nd *node) error {
	return retry(ctx, func(ctx context.Context) error {
		select {
		case <-nd.done:
			return fmt.Errorf("%s is not running", nd.name)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, nd.monitorURL+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("%s healthz: %w", nd.name, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s healthz: %s %s", nd.name, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	})
}

// N returns the number of nodes.
func (c *Cluster) N() int { return len(c.nodes) }

// URL returns node i's client URL (nats://127.0.0.1:port); i is 0-based, so
// node i has server name n<i+1>. It panics if i is out of range.
func (c *Cluster) URL(i int) string { return c.nodes[i].clientURL }

// URLs returns the client URLs of all nodes, comma-separated, as
// nats.Connect accepts them. Killed nodes are included.
func (c *Cluster) URLs() string {
	var us []string
	for _, nd := range c.nodes {
		us = append(us, nd.clientURL)
	}
	return strings.Join(us, ",")
}

// Name returns node i's server name (n<i+1>), as nats.Conn.ConnectedServerName
// reports it.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index returns the index of the node whose server name is name, or -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// LogPath returns the path of node i's log file (stdout and stderr of every
// start of the node, appended).
func (c *Cluster) LogPath(i int) string { return c.nodes[i].logPath }

// Kill sends SIGKILL to node i's process and waits (up to 10 s) for it to
// exit; no graceful shutdown, so its store is left as a crash leaves it. It
// fails the test if the node is not running.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	nd := c.nodes[i]
	if !nd.running() {
		c.t.Fatalf("natscluster: Kill(%d): %s is not running", i, nd.name)
	}
	if err := c.kill(nd); err != nil {
		c.t.Fatalf("natscluster: Kill(%d): %v", i, err)
	}
}

func (c *Cluster) kill(nd *node) error {
	if err := nd.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", nd.name, err)
	}
	select {
	case <-nd.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit 10 s after SIGKILL", nd.name, nd.cmd.Process.Pid)
	}
}

func (nd *node) running() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// Restart starts node i again, after [Cluster.Kill] or a crash, with the
// same server name, store dir and client, cluster and monitoring ports, and
// routes to every node. It returns once the node answers /healthz (it is
// current with the meta leader and has caught up its streams) and a client
// connected to it alone can read the account info; after [ReadyTimeout] it
// fails the test. It also fails the test if the node is running or its port
// has been taken meanwhile (nats-server then exits; see its log).
func (c *Cluster) Restart(i int) {
	t := c.t
	t.Helper()
	nd := c.nodes[i]
	if nd.running() {
		t.Fatalf("natscluster: Restart(%d): %s is still running; Kill it first", i, nd.name)
	}
	conf := nd.restartConf
	if conf == "" {
		conf = c.conf(nd, hostPort(nd.clientURL), hostPort(nd.monitorURL))
	}
	if err := c.launch(nd, conf); err != nil {
		t.Fatalf("natscluster: Restart(%d): %v", i, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if err := waitHealthy(ctx, nd); err != nil {
		t.Fatalf("natscluster: Restart(%d): %v\n%s", i, err, c.tail(nd))
	}
	nc, err := nats.Connect(nd.clientURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("natscluster: Restart(%d): connect: %v", i, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		t.Fatalf("natscluster: Restart(%d): JetStream via %s: %v\n%s", i, nd.name, err, c.tail(nd))
	}
}

// stop kills every running node.
func (c *Cluster) stop() {
	for _, nd := range c.nodes {
		if nd.running() {
			if err := c.kill(nd); err != nil {
				c.t.Error(err)
			}
		}
	}
}

func (c *Cluster) cleanup() {
	c.stop()
	if c.t.Failed() {
		for _, nd := range c.nodes {
			c.t.Log(c.tail(nd))
		}
	}
}

// tail returns the last logTail bytes of nd's log, with a header.
func (c *Cluster) tail(nd *node) string {
	b, err := os.ReadFile(nd.logPath)
	if err != nil {
		return fmt.Sprintf("--- %s log %s: %v", nd.name, nd.logPath, err)
	}
	if len(b) > logTail {
		b = b[len(b)-logTail:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return fmt.Sprintf("--- %s log (%s, last %d bytes):\n%s", nd.name, nd.logPath, len(b), b)
}
