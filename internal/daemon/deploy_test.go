package daemon_test

// Tests of deploy/: the example configuration documents every option a2ad
// has and still runs; the systemd unit starts, reloads and stops the real
// binary as systemd would; the Kubernetes manifests agree with a2ad (its
// flags, its configuration, the paths it serves) and with the NATS
// configuration of deploy/nats-cluster.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/testcert"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"go.yaml.in/yaml/v3"
)

const deployDir = "../../deploy"

// deployGuard bounds every wait of these tests: it only keeps a broken
// build from hanging, nothing is measured against it.
const deployGuard = 2 * time.Minute

// ---------------------------------------------------------------------------
// deploy/a2ad.yaml: every option, documented

// configKeyPaths returns the key path of every option of type t as
// LoadConfig decodes it with go.yaml.in/yaml/v3: "a.b" for field b of the
// struct in option a, "a[].b" for field b of the structs in list a. Fields of
// an inline struct belong to the struct that embeds it. Maps, scalars,
// lists of scalars and types that decode themselves are leaves.
func configKeyPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue // yaml ignores it
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			if ft.Kind() == reflect.Struct {
				out = append(out, configKeyPaths(ft, prefix)...)
			}
			continue // an inline map takes any key: nothing to list
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name) // yaml's default key
		}
		path := prefix + name
		out = append(out, path)
		elem := ft
		list := ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array
		if list {
			for elem = ft.Elem(); elem.Kind() == reflect.Pointer; elem = elem.Elem() {
			}
		}
		if elem.Kind() != reflect.Struct || decodesItself(elem) {
			continue
		}
		if list {
			out = append(out, configKeyPaths(elem, path+"[].")...)
		} else {
			out = append(out, configKeyPaths(elem, path+".")...)
		}
	}
	return out
}

var (
	yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(yamlUnmarshaler) || p.Implements(textUnmarshaler)
}

// A line of a configuration file, for uncommentOptions.
type lineKind int

const (
	lineBlank lineKind = iota
	lineActive
	lineCommentedOption // `# key: value` (an option shown but not active)
	lineProse           // any other comment
)

// commentedOption is a comment holding an option: `# key: value`, `# key:`
// or `# - key: value`, keys lower-case (prose starts upper-case or has no
// colon right after its first word).
var commentedOption = regexp.MustCompile(`^(\s*)# ?(\s*(?:- )?[a-z0-9_]+:(?:\s.*)?)$`)

// uncommentOptions turns every commented-out option of a configuration
// file into an active line at the indentation the comment shows (the text
// after "# "), line for line, and says what each line was.
func uncommentOptions(src string) (string, []lineKind) {
	lines := strings.Split(src, "\n")
	kinds := make([]lineKind, len(lines))
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "":
			kinds[i] = lineBlank
		case !strings.HasPrefix(trimmed, "#"):
			kinds[i] = lineActive
		default:
			if m := commentedOption.FindStringSubmatch(l); m != nil {
				lines[i] = m[1] + m[2]
				kinds[i] = lineCommentedOption
			} else {
				kinds[i] = lineProse
			}
		}
	}
	return strings.Join(lines, "\n"), kinds
}

// keyNodes maps the key path of every mapping key in n (as
// configKeyPaths spells them) to its key and value nodes, first occurrence.
func keyNodes(n *yaml.Node, path string, out map[string][2]*yaml.Node) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			keyNodes(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if _, ok := out[p]; !ok {
				out[p] = [2]*yaml.Node{k, v}
			}
			keyNodes(v, p, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			keyNodes(c, path+"[]", out)
		}
	}
}

// undocumentedOptions checks src, a configuration file for the options of
// type t: uncommented (uncommentOptions), it must decode strictly into t,
// and hold every key path of t, each on a line with a trailing comment or
// right below a prose comment. It returns what is wrong, one line each.
func undocumentedOptions(t reflect.Type, src []byte) ([]string, error) {
	doc, kinds := uncommentOptions(string(src))
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(reflect.New(t).Interface()); err != nil {
		return nil, fmt.Errorf("with every `# key: value` line uncommented the file must still be a valid configuration"+
			" (a prose comment whose first word is lower-case and followed by a colon counts as an option: reword it): %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		return nil, err
	}
	nodes := map[string][2]*yaml.Node{}
	keyNodes(&root, "", nodes)
	var problems []string
	for _, p := range configKeyPaths(t, "") {
		kv, ok := nodes[p]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: missing; add it (as `# key: value` if it is not active by default) with a comment saying what it does, its unit and its default", p))
			continue
		}
		k, v := kv[0], kv[1]
		line := k.Line - 1 // index into kinds
		if k.LineComment != "" || v.LineComment != "" || (line > 0 && kinds[line-1] == lineProse) {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s (line %d): no comment; put one right above it or at the end of its line", p, k.Line))
	}
	return problems, nil
}

// deploy/a2ad.yaml shows every option of daemon.Config, recursively (auth,
// principal, each agent's fields, evidence, artifact policy, and whatever
// section is added next), active or as a `# key: value` comment, each
// with a comment. A new option that is not documented there fails this
// test.
func TestDeployExampleConfigDocumentsEveryOption(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(deployDir, "a2ad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := undocumentedOptions(reflect.TypeFor[daemon.Config](), src)
	if err != nil {
		t.Fatalf("deploy/a2ad.yaml: %v", err)
	}
	for _, p := range problems {
		t.Errorf("deploy/a2ad.yaml: %s", p)
	}

	// The check sees options it has never heard of, nested ones too.
	type withNewSection struct {
		daemon.Config `yaml:",inline"`
		New           struct {
			Level string `yaml:"level"`
		} `yaml:"undocumented_section"`
	}
	more, err := undocumentedOptions(reflect.TypeFor[withNewSection](), src)
	if err != nil {
		t.Fatal(err)
	}
	var flagged []string
	for _, p := range more {
		if !slices.Contains(problems, p) {
			flagged = append(flagged, strings.SplitN(p, ":", 2)[0])
		}
	}
	if !slices.Equal(flagged, []string{"undocumented_section", "undocumented_section.level"}) {
		t.Errorf("an undocumented section: flagged %q", flagged)
	}
	for _, p := range []string{"agents[].id", "agents[].card_url", "agents[].artifacts.max_depth", "auth.jwks_url", "principal.scopes"} {
		if !slices.Contains(configKeyPaths(reflect.TypeFor[daemon.Config](), ""), p) {
			t.Errorf("configKeyPaths misses %s", p)
		}
	}
}

// deploy/a2ad.yaml loads strictly, and what it activates is the quick
// start's set-up: embedded NATS on loopback, the development key, the
// reference agent trusted on first use with its evidence schema and
// allowlist, strict artifact defaults.
func TestDeployExampleConfigLoads(t *testing.T) {
	c, err := daemon.LoadConfig(filepath.Join(deployDir, "a2ad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "./a2ad-data" || c.HTTPAddr != "127.0.0.1:8080" || c.NATSListen != "127.0.0.1:4222" || c.NATSURL != "" {
		t.Errorf("addresses: data_dir %q http_addr %q nats_listen %q nats_url %q", c.DataDir, c.HTTPAddr, c.NATSListen, c.NATSURL)
	}
	if c.Replicas != 1 || c.SchemasDir != "" || c.MaxDeadlineSeconds != 86400 ||
		c.JetStreamMaxMemory != 256<<20 || c.JetStreamMaxStore != 4<<30 {
		t.Errorf("limits: %+v", c)
	}
	if !reflect.DeepEqual(c.Auth, mcpedge.AuthConfig{}) {
		t.Errorf("auth %+v: the example must run on the development key", c.Auth)
	}
	if c.Principal.Subject != "local" || c.Principal.Tenant != "default" || !slices.Equal(c.Principal.Scopes, []string{"a2a:read", "a2a:delegate"}) {
		t.Errorf("principal %+v", c.Principal)
	}
	if len(c.Agents) != 2 {
		t.Fatalf("agents %+v", c.Agents)
	}
	// The reference agent over HTTP, its card fetched from loopback.
	if h := c.Agents[1]; h.ID != "fraud-review-http" || h.CardURL != "http://127.0.0.1:9100" || !h.TrustOnFirstUse ||
		!slices.Equal(h.Tenants, []string{"default"}) || h.EvidenceSchemas["assess_refund_risk"] != "refund_evidence" {
		t.Errorf("HTTP agent %+v", h.AgentConfig)
	}
	a := c.Agents[0]
	if a.ID != "fraud-review" || !slices.Equal(a.Tenants, []string{"default"}) || !a.TrustOnFirstUse ||
		a.ApprovedFingerprint != "" || a.CardURL != "" || len(a.SigningKeys) != 0 || a.RequireSignature {
		t.Errorf("agent %+v", a.AgentConfig)
	}
	if a.EvidenceSchemas["assess_refund_risk"] != "refund_evidence" || len(a.EvidenceKeys["assess_refund_risk"]) != 7 {
		t.Errorf("agent evidence: schemas %v keys %v", a.EvidenceSchemas, a.EvidenceKeys)
	}
	if !reflect.DeepEqual(a.Artifacts, artifact.Policy{}) {
		t.Errorf("artifact policy %+v: the example keeps the strict defaults", a.Artifacts)
	}
}

// startExample starts a2ad in-process with deploy/a2ad.yaml, on a temp data
// dir and free ports.
func startExample(t *testing.T) *daemon.Daemon {
	t.Helper()
	cfg, err := daemon.LoadConfig(filepath.Join(deployDir, "a2ad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.HTTPAddr, cfg.NATSListen = t.TempDir(), "127.0.0.1:0", "127.0.0.1:-1"
	d, err := daemon.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatalf("a2ad with deploy/a2ad.yaml: %v", err)
	}
	t.Cleanup(d.Stop)
	return d
}

// getUntil GETs u until it answers want (or the guard ends) and returns the
// last status and body.
func getUntil(t *testing.T, u string, want int) (int, string) {
	t.Helper()
	end := time.Now().Add(deployGuard)
	for {
		code, body := 0, ""
		resp, err := http.Get(u)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		}
		if code == want || time.Now().After(end) {
			return code, body
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// a2ad runs with deploy/a2ad.yaml (its paths and ports moved to temp ones):
// it is live, becomes ready, and reloads its schemas as on SIGHUP.
func TestDeployExampleConfigServes(t *testing.T) {
	d := startExample(t)
	if code, body := getUntil(t, d.HTTPURL+"/healthz", http.StatusOK); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := getUntil(t, d.HTTPURL+"/readyz", http.StatusOK); code != http.StatusOK || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if _, err := d.ReloadSchemas(); err != nil {
		t.Errorf("schema reload (SIGHUP): %v", err)
	}
}

// ---------------------------------------------------------------------------
// The real CLI

// buildA2AD builds cmd/a2ad into a temp dir and returns the binary's path.
func buildA2AD(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "a2ad")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/a2ad/a2ad/cmd/a2ad").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/a2ad: %v\n%s", err, out)
	}
	return bin
}

// serveFlags returns the flags `a2ad serve --help` lists.
func serveFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("a2ad serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["config"] {
		t.Fatalf("a2ad serve --help lists no --config:\n%s", out)
	}
	return flags
}

// checkServeArgs checks that argv runs `a2ad serve` with flags the real CLI
// has, and returns the flags' values.
func checkServeArgs(t *testing.T, what string, argv []string, flags map[string]bool) map[string]string {
	t.Helper()
	if len(argv) < 2 || filepath.Base(argv[0]) != "a2ad" || argv[1] != "serve" {
		t.Fatalf("%s: %q does not run `a2ad serve`", what, argv)
	}
	vals := map[string]string{}
	for i := 2; i < len(argv); i++ {
		name, ok := strings.CutPrefix(argv[i], "--")
		if !ok {
			t.Errorf("%s: %q is not a flag", what, argv[i])
			continue
		}
		name, val, hasVal := strings.Cut(name, "=")
		if !flags[name] {
			t.Errorf("%s: `a2ad serve` has no flag --%s", what, name)
		}
		if !hasVal && name != "stdio" && i+1 < len(argv) {
			i++
			val = argv[i]
		}
		vals[name] = val
	}
	return vals
}

// ---------------------------------------------------------------------------
// deploy/systemd/a2ad.service

// unitFile is a parsed systemd unit: section → key → values in order.
type unitFile map[string]map[string][]string

func parseUnit(src string) (unitFile, error) {
	u := unitFile{}
	section := ""
	for n, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[' && l[len(l)-1] == ']':
			section = l[1 : len(l)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		case section == "":
			return nil, fmt.Errorf("line %d: outside a section", n+1)
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || strings.HasSuffix(l, `\`) {
				return nil, fmt.Errorf("line %d: not key=value: %q", n+1, l)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	return u, nil
}

// get returns the last value of key (systemd's rule for single-valued keys).
func (u unitFile) get(section, key string) (string, bool) {
	vs := u[section][key]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// The systemd unit: its settings, and the real binary run as systemd runs
// it: ExecStart (with temp paths and free ports appended as flags) serves,
// ExecReload's command reloads the host schemas, SIGTERM stops it with
// exit status 0 (so Restart=on-failure leaves it stopped).
func TestDeploySystemdUnit(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(deployDir, "systemd", "a2ad.service"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(string(src))
	if err != nil {
		t.Fatalf("a2ad.service: %v", err)
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Errorf("a2ad.service: no [%s]", s)
		}
	}
	want := map[string]string{
		"Type": "simple", "Restart": "on-failure", "StateDirectory": "a2ad", "ConfigurationDirectory": "a2ad",
		"WorkingDirectory": "/var/lib/a2ad", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
	}
	for k, v := range want {
		if got, ok := u.get("Service", k); !ok || got != v {
			t.Errorf("a2ad.service: %s=%q, want %q", k, got, v)
		}
	}
	if user, _ := u.get("Service", "User"); user == "" || user == "root" {
		t.Errorf("a2ad.service: User=%q, want an unprivileged user", user)
	}
	if fams, _ := u.get("Service", "RestrictAddressFamilies"); !allIn([]string{"AF_INET", "AF_INET6", "AF_UNIX"}, strings.Fields(fams)) {
		t.Errorf("a2ad.service: RestrictAddressFamilies=%q", fams)
	}
	if !slices.Contains(u["Service"]["SystemCallFilter"], "@system-service") {
		t.Errorf("a2ad.service: SystemCallFilter %q lacks @system-service", u["Service"]["SystemCallFilter"])
	}
	if n, _ := u.get("Service", "LimitNOFILE"); n == "" {
		t.Error("a2ad.service: no LimitNOFILE")
	}
	// Longer than a2ad's stop: HTTP shutdown and audit flush (5 s each),
	// then closing NATS.
	if s, _ := u.get("Service", "TimeoutStopSec"); secondsOf(s) < 15 {
		t.Errorf("a2ad.service: TimeoutStopSec=%q, want at least 15 s", s)
	}
	if w, _ := u.get("Install", "WantedBy"); w != "multi-user.target" {
		t.Errorf("a2ad.service: WantedBy=%q", w)
	}
	reload, _ := u.get("Service", "ExecReload")
	reloadArgv := strings.Fields(reload)
	if len(reloadArgv) != 3 || filepath.Base(reloadArgv[0]) != "kill" || reloadArgv[1] != "-HUP" || reloadArgv[2] != "$MAINPID" {
		t.Errorf("a2ad.service: ExecReload=%q, want kill -HUP $MAINPID (a2ad reloads its host schemas on SIGHUP)", reload)
	}
	start, _ := u.get("Service", "ExecStart")
	argv := strings.Fields(start)
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		t.Fatalf("a2ad.service: ExecStart=%q, want an absolute path", start)
	}
	bin := buildA2AD(t)
	vals := checkServeArgs(t, "a2ad.service ExecStart", argv, serveFlags(t, bin))
	if cfg := vals["config"]; filepath.Dir(cfg) != "/etc/a2ad" {
		t.Errorf("a2ad.service: --config %q, want a file in the ConfigurationDirectory /etc/a2ad", cfg)
	}

	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		// With the binary at hand: verify checks that ExecStart exists.
		unit := filepath.Join(t.TempDir(), "a2ad.service")
		_ = os.WriteFile(unit, bytes.ReplaceAll(src, []byte(argv[0]), []byte(bin)), 0o644)
		if out, err := exec.Command(sa, "verify", unit).CombinedOutput(); err != nil && bytes.Contains(out, []byte("a2ad.service")) {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}

	// Run it as systemd would, with /etc/a2ad and /var/lib/a2ad in temp dirs.
	etc, state := t.TempDir(), t.TempDir()
	example, _ := os.ReadFile(filepath.Join(deployDir, "a2ad.yaml"))
	_ = os.WriteFile(filepath.Join(etc, filepath.Base(vals["config"])), example, 0o644)
	args := slices.Clone(argv[1:])
	for i, a := range args {
		if rel, err := filepath.Rel("/etc/a2ad", a); err == nil && !strings.HasPrefix(rel, "..") {
			args[i] = filepath.Join(etc, rel)
		}
	}
	// The certificate files ExecStart names, for the loopback addresses
	// the test listens on; each listener then speaks TLS only.
	ca := testcert.NewCA(t, "systemd test CA")
	pair := ca.Server(t)
	for _, flag := range []string{"tls-cert", "tls-key", "nats-tls-cert", "nats-tls-key"} {
		f, ok := vals[flag]
		if !ok {
			t.Errorf("a2ad.service: ExecStart has no --%s: both listeners carry credentials", flag)
			continue
		}
		if filepath.Dir(filepath.Dir(f)) != "/etc/a2ad" && filepath.Dir(f) != "/etc/a2ad" {
			t.Errorf("a2ad.service: --%s %q, want a file under the ConfigurationDirectory /etc/a2ad", flag, f)
		}
		here := filepath.Join(etc, strings.TrimPrefix(f, "/etc/a2ad/"))
		_ = os.MkdirAll(filepath.Dir(here), 0o755)
		body := pair.CertPEM
		if strings.HasSuffix(flag, "-key") {
			body = pair.KeyPEM
		}
		if err := os.WriteFile(here, body, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	args = append(args, "--data-dir", state, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	cmd := exec.Command(bin, args...)
	cmd.Dir = state
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)      // cmd.Wait's result
	waited := make(chan struct{})      // closed once cmd.Wait returned
	lines := make(chan string)         // a2ad's log, line by line
	stopReading := make(chan struct{}) // the test no longer reads lines
	go func() {
		defer close(waited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stopReading:
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		close(stopReading)
		_ = cmd.Process.Kill() // os.ErrProcessDone once it has exited
		select {
		case <-waited:
		case <-time.After(deployGuard):
		}
	})
	var logged []string
	await := func(msg string) string {
		t.Helper()
		guard := time.After(deployGuard)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("a2ad ended before logging %q:\n%s", msg, strings.Join(logged, "\n"))
				}
				logged = append(logged, l)
				if strings.Contains(l, msg) {
					return l
				}
			case <-guard:
				t.Fatalf("a2ad did not log %q:\n%s", msg, strings.Join(logged, "\n"))
			}
		}
	}
	serving := await("a2ad serving")
	m := regexp.MustCompile(`"?mcp"?[=:]"?(https://[^\s"]+)/mcp`).FindStringSubmatch(serving) // text or JSON log
	if m == nil {
		t.Fatalf("no https MCP URL in %q", serving)
	}
	if !strings.Contains(serving, "nats=tls://") {
		t.Errorf("agents are not given a tls:// NATS URL: %q", serving)
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := trusting.Get(m[1] + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz over HTTPS: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	reloadCmd := strings.ReplaceAll(reload, "$MAINPID", strconv.Itoa(cmd.Process.Pid))
	if rc := strings.Fields(reloadCmd); fileExists(rc[0]) {
		if out, err := exec.Command(rc[0], rc[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("ExecReload %q: %v %s", reloadCmd, err, out)
		}
	} else if err := cmd.Process.Signal(syscall.SIGHUP); err != nil { // no kill(1) here
		t.Fatal(err)
	}
	await("host schemas reloaded")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil { // systemd's default KillSignal
		t.Fatal(err)
	}
	await("a2ad stopping")
	guard := time.After(deployGuard)
	for {
		select {
		case _, ok := <-lines: // the rest of the log
			if !ok {
				lines = nil
			}
		case err := <-exited:
			if err != nil {
				t.Errorf("a2ad on SIGTERM: %v, want exit status 0:\n%s", err, strings.Join(logged, "\n"))
			}
			return
		case <-guard:
			t.Fatal("a2ad did not exit on SIGTERM")
		}
	}
}

func allIn(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// secondsOf parses a systemd time span of the forms used here: "30", "30s",
// "2min"; anything else is 0.
func secondsOf(s string) int {
	for suffix, mult := range map[string]int{"min": 60, "s": 1} {
		if n, err := strconv.Atoi(strings.TrimSuffix(s, suffix)); err == nil && strings.HasSuffix(s, suffix) {
			return n * mult
		}
	}
	n, _ := strconv.Atoi(s)
	return n
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ---------------------------------------------------------------------------
// deploy/kubernetes

// k8sObject is the part of a Kubernetes object these tests read.
type k8sObject struct {
	File       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		// Deployment, StatefulSet
		Replicas    *int   `yaml:"replicas"`
		ServiceName string `yaml:"serviceName"`
		Template    struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
		// Service
		ClusterIP                string `yaml:"clusterIP"`
		PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
		// cert-manager Certificate
		SecretName string   `yaml:"secretName"`
		DNSNames   []string `yaml:"dnsNames"`
		Ports      []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type podSpec struct {
	SecurityContext struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	Containers []k8sContainer `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		EmptyDir any `yaml:"emptyDir"`
		Secret   *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe    *k8sProbe           `yaml:"startupProbe"`
	LivenessProbe   *k8sProbe           `yaml:"livenessProbe"`
	ReadinessProbe  *k8sProbe           `yaml:"readinessProbe"`
	SecurityContext *k8sSecurityContext `yaml:"securityContext"`
	Resources       struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type k8sSecurityContext struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path   string `yaml:"path"`
		Port   any    `yaml:"port"`
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

// secretOf is the Secret mounted at the directory of file in c (pod's
// volumes), or "".
func secretOf(pod podSpec, c k8sContainer, file string) string {
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		if mp, ok := c.mount(v.Name); ok && filepath.Dir(file) == mp {
			return v.Secret.SecretName
		}
	}
	return ""
}

// certificateSecrets are the Secrets cert-manager Certificates of objs
// fill, with the DNS names each certificate names.
func certificateSecrets(objs []k8sObject) map[string][]string {
	out := map[string][]string{}
	for _, o := range objs {
		if o.Kind == "Certificate" && o.Spec.SecretName != "" {
			out[o.Spec.SecretName] = o.Spec.DNSNames
		}
	}
	return out
}

// port resolves a port given by number or by name among c's ports.
func (c k8sContainer) port(p any) int {
	switch p := p.(type) {
	case int:
		return p
	case string:
		for _, cp := range c.Ports {
			if cp.Name == p {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// env returns the value of environment variable name with Kubernetes'
// $(VAR) references expanded; a secret's value is "<secret>/<key>" and a
// field's "<fieldPath>" with placeholders given by ref.
func (c k8sContainer) env(name string, ref func(kind, a, b string) string) (string, bool) {
	vals := map[string]string{}
	found := false
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v = ref("secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v = ref("field", e.ValueFrom.FieldRef.FieldPath, "")
		default:
			v = expandK8s(v, vals)
		}
		vals[e.Name] = v
		if e.Name == name {
			found = true
			break
		}
	}
	return vals[name], found
}

// argv is the container's command line with $(VAR) references expanded
// from its environment (secrets as secretPlaceholder).
func (c k8sContainer) argv(t *testing.T, what string) []string {
	t.Helper()
	var argv []string
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		argv = append(argv, k8sVarRef.ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := c.env(ref[2:len(ref)-1], secretPlaceholder)
			if !ok {
				t.Errorf("%s: %s references an unset variable", what, a)
			}
			return v
		}))
	}
	return argv
}

// natsUserOK reports whether u is user with the password NATS has for it.
func natsUserOK(u *url.Userinfo, user string, passwords map[string]string) bool {
	pw, ok := u.Password()
	want, known := passwords[user]
	return ok && known && u.Username() == user && pw == want
}

// secretsCreated reads the `kubectl create secret generic NAME
// --from-literal=KEY=… --from-file=KEY=…` commands of a README: Secret
// name → keys.
// readmeSecrets is secretsCreated of deploy/kubernetes/README.md.
func readmeSecrets(t *testing.T) map[string][]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return secretsCreated(string(readme))
}

func secretsCreated(readme string) map[string][]string {
	out := map[string][]string{}
	cmds := regexp.MustCompile(`create secret generic ([a-z0-9-]+)((?:\\\n|[^\n])*)`).FindAllStringSubmatch(readme, -1)
	for _, m := range cmds {
		for _, k := range regexp.MustCompile(`--from-(?:literal|file)=([A-Za-z0-9._-]+)=`).FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], k[1])
		}
	}
	return out
}

var k8sVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandK8s expands $(VAR) from vars as the kubelet does (unknown ones stay).
func expandK8s(s string, vars map[string]string) string {
	return k8sVarRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := vars[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

func (c k8sContainer) mount(volume string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath, true
		}
	}
	return "", false
}

// loadManifests parses every document of every *.yaml in deploy/kubernetes.
func loadManifests(t *testing.T) (objs []k8sObject, kustomization []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/kubernetes: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for n := 1; ; n++ {
			var doc yaml.Node
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, n, err)
			}
			var o k8sObject
			if err := doc.Decode(&o); err != nil {
				t.Fatalf("%s document %d: %v", f, n, err)
			}
			o.File = filepath.Base(f)
			if o.Kind == "Kustomization" {
				var k struct {
					Resources []string `yaml:"resources"`
				}
				_ = doc.Decode(&k)
				kustomization = k.Resources
				continue
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s document %d: apiVersion %q kind %q metadata.name %q", o.File, n, o.APIVersion, o.Kind, o.Metadata.Name)
			}
			objs = append(objs, o)
		}
	}
	return objs, kustomization
}

func findObject(t *testing.T, objs []k8sObject, kind, name string) k8sObject {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("deploy/kubernetes: no %s %s", kind, name)
	return k8sObject{}
}

// containerSecure checks the hardening every container here must have.
func containerSecure(t *testing.T, what string, pod podSpec, c k8sContainer) {
	t.Helper()
	sc := c.SecurityContext
	nonRoot := pod.SecurityContext.RunAsNonRoot || (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
	if sc == nil || !nonRoot || !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		!slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("%s: securityContext %s (pod runAsNonRoot %v): want non-root, read-only root, no privilege escalation, drop ALL", what, describeSC(sc), pod.SecurityContext.RunAsNonRoot)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("%s: resources %+v: want cpu and memory requests and a memory limit", what, c.Resources)
	}
}

func describeSC(sc *k8sSecurityContext) string {
	if sc == nil {
		return "none"
	}
	return fmt.Sprintf("runAsNonRoot %v allowPrivilegeEscalation %v readOnlyRootFilesystem %v drop %q",
		deref(sc.RunAsNonRoot), deref(sc.AllowPrivilegeEscalation), sc.ReadOnlyRootFilesystem, sc.Capabilities.Drop)
}

// The Kubernetes manifests: every document is an object in namespace a2ad;
// a2ad's Deployment runs `a2ad serve` with flags the CLI has, on the
// ConfigMap's configuration (which loads strictly), with the NATS password
// from the Secret, probes on paths a real a2ad answers on its HTTP port;
// the NATS StatefulSet's configuration (parsed by the nats-server module
// go.mod pins) has JetStream and routes to its three pods, and the users,
// permissions and auth callout of deploy/nats-cluster/auth-callout.conf;
// a2ad is that callout, and agents connect without a NATS user.
func TestDeployKubernetesManifests(t *testing.T) {
	objs, kustomization := loadManifests(t)
	const ns = "a2ad"
	for _, o := range objs {
		if o.Kind == "Namespace" {
			if o.Metadata.Name != ns {
				t.Errorf("%s: namespace %s", o.File, o.Metadata.Name)
			}
		} else if o.Metadata.Namespace != ns {
			t.Errorf("%s: %s %s in namespace %q, want %q", o.File, o.Kind, o.Metadata.Name, o.Metadata.Namespace, ns)
		}
	}
	for _, r := range kustomization {
		if !fileExists(filepath.Join(deployDir, "kubernetes", r)) {
			t.Errorf("kustomization.yaml names %s, which does not exist", r)
		}
	}
	for _, r := range []string{"namespace.yaml", "nats.yaml", "a2ad.yaml"} {
		if !slices.Contains(kustomization, r) {
			t.Errorf("kustomization.yaml resources %q lack %s", kustomization, r)
		}
	}

	// The NATS cluster.
	sts := findObject(t, objs, "StatefulSet", "nats")
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet nats: replicas %v, want 3", sts.Spec.Replicas)
	}
	headless := findObject(t, objs, "Service", sts.Spec.ServiceName)
	if headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q publishNotReadyAddresses %v; the routes need a headless service that publishes pods before they are ready",
			headless.Metadata.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	natsPod := sts.Spec.Template.Spec
	if len(natsPod.Containers) != 1 {
		t.Fatalf("StatefulSet nats: %d containers", len(natsPod.Containers))
	}
	nc := natsPod.Containers[0]
	containerSecure(t, "StatefulSet nats", natsPod, nc)
	// The certificates cert-manager would write, made here for the names
	// the Certificate of each mounted Secret asks for: the server parses
	// its TLS blocks with them, as in the pod.
	certs := certificateSecrets(objs)
	ca := testcert.NewCA(t, "deploy test CA")
	tlsDirs := map[string]string{} // mount path in the pod → the files here
	natsSecret, natsTLS := "", testcert.Pair{}
	for _, v := range natsPod.Volumes {
		if v.Secret == nil {
			continue
		}
		mp, _ := nc.mount(v.Name)
		names, ok := certs[v.Secret.SecretName]
		if !ok {
			t.Errorf("StatefulSet nats: Secret %s is filled by no Certificate of certificates.yaml", v.Secret.SecretName)
			continue
		}
		natsSecret, natsTLS = v.Secret.SecretName, ca.Peer(t, names...)
		dir := t.TempDir()
		cert, key := natsTLS.WriteFiles(t, dir, "x")
		for from, to := range map[string]string{cert: "tls.crt", key: "tls.key"} {
			if err := os.Rename(from, filepath.Join(dir, to)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.PEM, 0o600); err != nil {
			t.Fatal(err)
		}
		tlsDirs[mp] = dir
	}
	natsConfMount := ""
	var natsOpts *server.Options
	for _, v := range natsPod.Volumes {
		if v.ConfigMap != nil {
			natsConfMount, _ = nc.mount(v.Name)
			natsCM := findObject(t, objs, "ConfigMap", v.ConfigMap.Name)
			dir := t.TempDir()
			for k, body := range natsCM.Data {
				for mp, here := range tlsDirs {
					body = strings.ReplaceAll(body, mp+"/", here+"/")
				}
				_ = os.WriteFile(filepath.Join(dir, k), []byte(body), 0o600)
			}
			natsOpts = checkNATSConf(t, sts, headless, nc, natsConfMount, dir)
		}
	}
	if natsConfMount == "" || natsOpts == nil {
		t.Fatal("StatefulSet nats: no ConfigMap volume")
	}
	// TLS for clients, required of all; TLS on the routes, verified both
	// ways, for certificates naming every route's host.
	if natsOpts.TLSConfig == nil || natsOpts.AllowNonTLS {
		t.Errorf("nats.conf: client TLS %v, allow_non_tls %v; agents' passwords and credentials must not cross the network readable", natsOpts.TLSConfig != nil, natsOpts.AllowNonTLS)
	}
	if natsOpts.Cluster.TLSConfig == nil || natsOpts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("nats.conf: cluster TLS %+v, want the routes verified both ways (verify: true)", natsOpts.Cluster.TLSConfig != nil)
	}
	for _, r := range natsOpts.Routes {
		if err := natsTLS.Cert.VerifyHostname(r.Hostname()); err != nil {
			t.Errorf("the Certificate of Secret %s does not name route host %s: %v", natsSecret, r.Hostname(), err)
		}
	}
	natsPassword := map[string]string{} // NATS user → password, secrets as placeholders
	for _, u := range natsOpts.Users {
		natsPassword[u.Username] = u.Password
	}
	client := findObject(t, objs, "Service", "nats")
	if len(client.Spec.Ports) != 1 || nc.port(client.Spec.Ports[0].TargetPort) != 4222 || client.Spec.ClusterIP == "None" {
		t.Errorf("Service nats: %+v, want one port to the client port 4222", client.Spec)
	}

	// a2ad.
	dep := findObject(t, objs, "Deployment", "a2ad")
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("Deployment a2ad: replicas %v, want 2 or more", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment a2ad: %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	containerSecure(t, "Deployment a2ad", pod, c)
	argv := c.argv(t, "Deployment a2ad")
	bin := buildA2AD(t)
	vals := checkServeArgs(t, "Deployment a2ad", argv, serveFlags(t, bin))

	// Its configuration: the ConfigMap mounted where --config points.
	var cfgFile string
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		mp, _ := c.mount(v.Name)
		cm := findObject(t, objs, "ConfigMap", v.ConfigMap.Name)
		for k, body := range cm.Data {
			if filepath.Join(mp, k) == vals["config"] {
				cfgFile = filepath.Join(t.TempDir(), k)
				_ = os.WriteFile(cfgFile, []byte(body), 0o600)
			}
		}
	}
	if cfgFile == "" {
		t.Fatalf("Deployment a2ad: --config %q is no key of a mounted ConfigMap", vals["config"])
	}
	cfg, err := daemon.LoadConfig(cfgFile)
	if err != nil {
		t.Fatalf("a2ad's ConfigMap: %v", err)
	}
	if cfg.Replicas != *sts.Spec.Replicas {
		t.Errorf("a2ad's ConfigMap: replicas %d, want %d (one per NATS node)", cfg.Replicas, *sts.Spec.Replicas)
	}
	if cfg.Auth.Issuer == "" || cfg.Auth.Audience == "" || cfg.Auth.JWKSURL == "" {
		t.Errorf("a2ad's ConfigMap: auth %+v; several instances need one key source, never their development keys", cfg.Auth)
	}
	host, port, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil || (host != "0.0.0.0" && host != "" && host != "::") {
		t.Errorf("a2ad's ConfigMap: http_addr %q must listen on all of the pod's addresses", cfg.HTTPAddr)
	}
	httpPort, _ := strconv.Atoi(port)
	if httpPort == 0 || c.port("http") != httpPort {
		t.Errorf("a2ad's ConfigMap: http_addr port %d, the container's port http %d", httpPort, c.port("http"))
	}
	// HTTPS, from a cert-manager Secret naming the Service; the probes
	// and Prometheus speak HTTPS.
	for _, f := range []string{cfg.TLS.CertFile, cfg.TLS.KeyFile} {
		if sec := secretOf(pod, c, f); f == "" || certs[sec] == nil {
			t.Errorf("a2ad's ConfigMap: tls file %q is not in a mounted Secret a Certificate fills (%q)", f, sec)
		}
	}
	if svc := fmt.Sprintf("a2ad.%s.svc.cluster.local", ns); !slices.Contains(certs[secretOf(pod, c, cfg.TLS.CertFile)], svc) {
		t.Errorf("a2ad's certificate names %q, not the Service %s", certs[secretOf(pod, c, cfg.TLS.CertFile)], svc)
	}
	for what, p := range map[string]*k8sProbe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != "HTTPS" {
			t.Errorf("Deployment a2ad: %s probe is not HTTPS", what)
		}
	}
	if sec := secretOf(pod, c, cfg.NATSTLS.CAFile); sec != natsSecret {
		t.Errorf("a2ad's ConfigMap: nats_tls.ca_file %q is in Secret %q, want the NATS nodes' %q", cfg.NATSTLS.CAFile, sec, natsSecret)
	}
	if mp, ok := mountOfEmptyDir(pod, c, cfg.DataDir); !ok {
		t.Errorf("a2ad's ConfigMap: data_dir %q is not a writable volume of the pod (%s)", cfg.DataDir, mp)
	}
	// The NATS URL: the ConfigMap's without a password; the environment's
	// A2AD_NATS_URL (never a command-line flag, which the node's process
	// list shows) with a2ad's user and the password from the Secret, both
	// at the client Service.
	if _, onCommandLine := vals["nats-url"]; onCommandLine {
		t.Errorf("Deployment a2ad: --nats-url on the command line shows its password in the node's process list; use A2AD_NATS_URL")
	}
	envURL, _ := c.env("A2AD_NATS_URL", secretPlaceholder)
	cmURL, err1 := url.Parse(cfg.NATSURL)
	flagURL, err2 := url.Parse(envURL)
	wantHost := fmt.Sprintf("%s.%s.svc.cluster.local:%d", client.Metadata.Name, ns, client.Spec.Ports[0].Port)
	if err1 != nil || cmURL.Host != wantHost || cmURL.User != nil || cmURL.Scheme != "tls" {
		t.Errorf("a2ad's ConfigMap: nats_url %q, want tls://%s without credentials", cfg.NATSURL, wantHost)
	}
	if err2 != nil || flagURL.Host != wantHost || flagURL.User == nil || flagURL.Scheme != "tls" || !natsUserOK(flagURL.User, "a2ad", natsPassword) {
		t.Errorf("Deployment a2ad: A2AD_NATS_URL %q, want user a2ad with the password NATS has for it (%s), host %s", envURL, natsPassword["a2ad"], wantHost)
	}

	// a2ad is the cluster's auth callout: the issuer's seed from a Secret
	// README.md creates, the system account user's URL from the
	// environment, with the password NATS has for it.
	if opts := natsOpts.AuthCallout; opts == nil || cfg.NATSAuthCallout.Account != "" && cfg.NATSAuthCallout.Account != opts.Account ||
		cfg.NATSAuthCallout.Account == "" && opts.Account != daemon.DefaultCalloutAccount || !slices.Contains(opts.AuthUsers, "a2ad") {
		t.Errorf("nats.conf auth_callout %+v: want a2ad's account %q and its user a2ad among auth_users", opts, cmp.Or(cfg.NATSAuthCallout.Account, daemon.DefaultCalloutAccount))
	}
	seedSecret := secretOf(pod, c, cfg.NATSAuthCallout.IssuerSeedFile)
	if cfg.NATSAuthCallout.IssuerSeedFile == "" || seedSecret == "" || !slices.Contains(readmeSecrets(t)[seedSecret], filepath.Base(cfg.NATSAuthCallout.IssuerSeedFile)) {
		t.Errorf("a2ad's ConfigMap: nats_auth_callout.issuer_seed_file %q is not a key of a mounted Secret README.md creates (%q)", cfg.NATSAuthCallout.IssuerSeedFile, seedSecret)
	}
	sysURL, _ := c.env("A2AD_NATS_SYSTEM_URL", secretPlaceholder)
	if u, err := url.Parse(sysURL); err != nil || u.Host != wantHost || u.Scheme != "tls" || u.User == nil || u.User.Username() == "a2ad" ||
		!natsUserOK(u.User, u.User.Username(), natsPassword) || !slices.Contains(natsOpts.AuthCallout.AuthUsers, u.User.Username()) {
		t.Errorf("Deployment a2ad: A2AD_NATS_SYSTEM_URL %q, want tls:// with a system account user among auth_users and its password, host %s", sysURL, wantHost)
	}

	// The optional reference agent: no NATS user, its credential from a
	// Secret, at the same Service.
	for _, o := range objs {
		if o.Kind != "Deployment" || o.Metadata.Name == "a2ad" {
			continue
		}
		what := "Deployment " + o.Metadata.Name
		ac := o.Spec.Template.Spec.Containers
		if len(ac) != 1 {
			t.Errorf("%s: %d containers", what, len(ac))
			continue
		}
		containerSecure(t, what, o.Spec.Template.Spec, ac[0])
		env, _ := ac[0].env("NATS_URL", secretPlaceholder)
		u, err := url.Parse(env)
		if err != nil || u.Host != wantHost || u.Scheme != "tls" || u.User != nil {
			t.Errorf("%s: NATS_URL %q, want tls:// without a NATS user (the auth callout takes its credential), host %s", what, env, wantHost)
		}
		if cred, _ := ac[0].env("A2AD_AGENT_CREDENTIAL", secretPlaceholder); !strings.HasPrefix(cred, "secret-") {
			t.Errorf("%s: A2AD_AGENT_CREDENTIAL %q, want it from a Secret", what, cred)
		}
		if caFile, _ := ac[0].env("A2AD_NATS_CA", secretPlaceholder); secretOf(o.Spec.Template.Spec, ac[0], caFile) != natsSecret {
			t.Errorf("%s: A2AD_NATS_CA %q is not the ca.crt of the NATS nodes' Secret %s", what, caFile, natsSecret)
		}
	}

	// No secret on any command line: the node's process list shows it.
	for _, o := range objs {
		for _, ct := range o.Spec.Template.Spec.Containers {
			for _, a := range ct.argv(t, o.Kind+" "+o.Metadata.Name) {
				if strings.Contains(a, "secret-") {
					t.Errorf("%s %s: a secret on the command line: %q", o.Kind, o.Metadata.Name, a)
				}
			}
		}
	}

	// Every Secret the manifests read is one README.md tells how to create,
	// with the keys they read.
	readme, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	created := secretsCreated(string(readme))
	for _, o := range objs {
		for _, ct := range o.Spec.Template.Spec.Containers {
			for _, e := range ct.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if !slices.Contains(created[ref.Name], ref.Key) {
					t.Errorf("%s %s: env %s reads key %q of Secret %q, which README.md does not create (it creates %v)",
						o.Kind, o.Metadata.Name, e.Name, ref.Key, ref.Name, created)
				}
			}
		}
	}

	// Probes: paths a real a2ad serves, on its HTTP port.
	probes := map[string]*k8sProbe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	wantPath := map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"}
	d := startExample(t)
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			if kind != "startup" {
				t.Errorf("Deployment a2ad: no HTTP %s probe", kind)
			}
			continue
		}
		if c.port(p.HTTPGet.Port) != httpPort {
			t.Errorf("Deployment a2ad: %s probe on port %v, a2ad listens on %d", kind, p.HTTPGet.Port, httpPort)
		}
		if p.HTTPGet.Path != wantPath[kind] {
			t.Errorf("Deployment a2ad: %s probe path %q, want %q", kind, p.HTTPGet.Path, wantPath[kind])
		}
		if code, body := getUntil(t, d.HTTPURL+p.HTTPGet.Path, http.StatusOK); code != http.StatusOK {
			t.Errorf("Deployment a2ad: %s probe %s: a2ad answers %d %s", kind, p.HTTPGet.Path, code, body)
		}
	}
	svc := findObject(t, objs, "Service", "a2ad")
	if len(svc.Spec.Ports) != 1 || c.port(svc.Spec.Ports[0].TargetPort) != httpPort {
		t.Errorf("Service a2ad: ports %+v, want one to a2ad's HTTP port %d", svc.Spec.Ports, httpPort)
	}
}

// mountOfEmptyDir reports whether dir is (inside) an emptyDir mounted in c.
func mountOfEmptyDir(pod podSpec, c k8sContainer, dir string) (string, bool) {
	for _, v := range pod.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		if mp, ok := c.mount(v.Name); ok && (dir == mp || strings.HasPrefix(dir, mp+"/")) {
			return mp, true
		}
	}
	return "", false
}

// checkNATSConf parses the NATS ConfigMap's files in dir as nats-server
// does in pod 0, with the pod's environment (secrets as placeholders).
func checkNATSConf(t *testing.T, sts, headless k8sObject, c k8sContainer, confMount, dir string) *server.Options {
	t.Helper()
	confArg := ""
	argv := append(slices.Clone(c.Command), c.Args...)
	for i, a := range argv {
		if (a == "--config" || a == "-c") && i+1 < len(argv) {
			confArg = argv[i+1]
		}
	}
	if filepath.Dir(confArg) != confMount {
		t.Fatalf("StatefulSet nats: --config %q is not in the ConfigMap mount %s (command %q)", confArg, confMount, argv)
	}
	pod0 := sts.Metadata.Name + "-0"
	ref := func(kind, a, b string) string {
		if kind == "field" && a == "metadata.name" {
			return pod0
		}
		return secretPlaceholder(kind, a, b)
	}
	envs := map[string]string{}
	calloutIssuer, _ := nkeys.CreateAccount()
	for _, e := range c.Env {
		v, _ := c.env(e.Name, ref)
		if strings.HasSuffix(v, ".pub") && strings.HasPrefix(v, "secret-") {
			// A public nkey from a Secret: nats-server checks its form.
			v, _ = calloutIssuer.PublicKey()
		}
		envs[e.Name] = v
		t.Setenv(e.Name, v)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, filepath.Base(confArg)))
	if err != nil {
		t.Fatalf("nats-server config of StatefulSet nats: %v", err)
	}
	if opts.ServerName != pod0 {
		t.Errorf("server_name %q in pod %s: want the pod name (unique per node)", opts.ServerName, pod0)
	}
	if !opts.JetStream {
		t.Error("no jetstream")
	}
	storeOnVolume := false
	for _, vct := range sts.Spec.VolumeClaimTemplates {
		if mp, ok := c.mount(vct.Metadata.Name); ok && strings.HasPrefix(opts.StoreDir, mp+"/") {
			storeOnVolume = true
		}
	}
	if !storeOnVolume {
		t.Errorf("jetstream store_dir %q is not on a volumeClaimTemplate of the StatefulSet", opts.StoreDir)
	}
	if opts.Port != c.port("client") || opts.Cluster.Port != c.port("cluster") || opts.HTTPPort != c.port("monitor") {
		t.Errorf("ports: client %d cluster %d monitoring %d; the container's client %d cluster %d monitor %d",
			opts.Port, opts.Cluster.Port, opts.HTTPPort, c.port("client"), c.port("cluster"), c.port("monitor"))
	}
	if opts.Cluster.Name == "" {
		t.Error("no cluster name")
	}
	var routes []string
	for _, r := range opts.Routes {
		routes = append(routes, r.Host)
	}
	var want []string
	for i := range *sts.Spec.Replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local:%d", sts.Metadata.Name, i, headless.Metadata.Name, sts.Metadata.Namespace, c.port("cluster")))
	}
	if !slices.Equal(routes, want) {
		t.Errorf("cluster routes %q, want one to each pod: %q", routes, want)
	}
	for kind, p := range map[string]*k8sProbe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || c.port(p.HTTPGet.Port) != opts.HTTPPort || !strings.HasPrefix(p.HTTPGet.Path, "/healthz") {
			t.Errorf("%s probe: want /healthz on the monitoring port %d", kind, opts.HTTPPort)
		}
	}

	// The same users, permissions and auth callout as
	// deploy/nats-cluster/auth-callout.conf, which
	// TestAuthCalloutCutsOffRevokedCredentialsOnExternalNATS and
	// TestDeployConfigsWithAuthCallout run.
	ref2 := t.TempDir()
	callout, err := os.ReadFile(filepath.Join(deployDir, "nats-cluster", "auth-callout.conf"))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(ref2, "auth-callout.conf"), callout, 0o600)
	_ = os.WriteFile(filepath.Join(ref2, "nats.conf"), []byte("listen: 127.0.0.1:-1\ninclude ./auth-callout.conf\n"), 0o600)
	refOpts, err := server.ProcessConfigFile(filepath.Join(ref2, "nats.conf"))
	if err != nil {
		t.Fatalf("deploy/nats-cluster/auth-callout.conf with the StatefulSet's environment %v: %v", slices.Sorted(maps.Keys(envs)), err)
	}
	if got, want := usersOf(opts), usersOf(refOpts); !reflect.DeepEqual(got, want) {
		t.Errorf("users and permissions differ from deploy/nats-cluster/auth-callout.conf:\n got %s\nwant %s", got, want)
	}
	if opts.SystemAccount != refOpts.SystemAccount {
		t.Errorf("system_account %q, want %q", opts.SystemAccount, refOpts.SystemAccount)
	}
	if opts.AuthCallout == nil || !reflect.DeepEqual(*opts.AuthCallout, *refOpts.AuthCallout) {
		t.Errorf("auth_callout %+v, want %+v", opts.AuthCallout, refOpts.AuthCallout)
	}
	return opts
}

// secretPlaceholder stands for the value of key b of Secret a (kind
// "secret") in a container's environment.
func secretPlaceholder(kind, a, b string) string {
	if kind != "secret" {
		return "unresolved-" + kind + "-" + a
	}
	return "secret-" + a + "-" + b
}

// usersOf describes each user: account, password and permissions.
func usersOf(o *server.Options) map[string]string {
	out := map[string]string{}
	for _, u := range o.Users {
		acc := ""
		if u.Account != nil {
			acc = u.Account.Name
		}
		perms := "all"
		if p := u.Permissions; p != nil {
			perms = fmt.Sprintf("pub %+v sub %+v resp %+v", deref(p.Publish), deref(p.Subscribe), deref(p.Response))
		}
		out[u.Username] = fmt.Sprintf("account %s password %s %s", acc, u.Password, perms)
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
