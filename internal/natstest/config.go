package natstest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// StartConfig runs a NATS server in this process from a configuration as
// nats-server reads it: main (which may `include` the files given, each
// written beside it under its name) with a loopback listener on a free
// port and JetStream in a temp dir added in front. Variables ($NAME) come
// from the environment, as nats-server takes them. It returns the server's
// host:port; the server is shut down at test end.
func StartConfig(t testing.TB, main string, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := "listen: 127.0.0.1:-1\njetstream { store_dir: \"" + filepath.Join(dir, "js") + "\" }\n" + main
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server config: %v", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return strings.TrimPrefix(ns.ClientURL(), "nats://")
}

// StartAuthCallout runs a NATS server with deploy/nats-cluster/auth-callout.conf
// as shipped, the environment it names set for the test (passwords
// a2ad-secret for a2ad, system-secret for a2ad-system, sys-secret for sys,
// and a new issuer key's public key). It returns the server's host:port and
// the file holding the issuer's seed, for a2ad's
// nats_auth_callout.issuer_seed_file.
func StartAuthCallout(t *testing.T) (hostPort, issuerSeedFile string) {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	issuerSeedFile = filepath.Join(t.TempDir(), "callout-issuer.nk")
	if err := os.WriteFile(issuerSeedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, here, _, _ := runtime.Caller(0)
	conf, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "deploy", "nats-cluster", "auth-callout.conf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("A2AD_NATS_PASSWORD", "a2ad-secret")
	t.Setenv("A2AD_SYSTEM_NATS_PASSWORD", "system-secret")
	t.Setenv("SYS_NATS_PASSWORD", "sys-secret")
	t.Setenv("A2AD_CALLOUT_ISSUER", pub)
	return StartConfig(t, "include ./auth-callout.conf\n", map[string][]byte{"auth-callout.conf": conf}), issuerSeedFile
}
