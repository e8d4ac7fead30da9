package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/console"
	"github.com/a2ad/a2ad/internal/testlog"
)

// exitOf runs the binary and returns stdout, stderr and the exit status.
func exitOf(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("%s %v: %v", name, args, err)
	return "", "", 0
}

// a2ad --version, a2ad version and version --json name the same build,
// and /healthz answers it as JSON.
func TestVersionFlagCommandAndHealthz(t *testing.T) {
	out, _, code := exitOf(t, nil, bin, "--version")
	m := regexp.MustCompile(`^a2ad (devel|v\S+|[0-9a-f]{12}(\+dirty)?) \((go\S+)\)\n$`).FindStringSubmatch(out)
	if code != 0 || m == nil || m[3] != runtime.Version() {
		t.Fatalf("a2ad --version: exit %d, %q; want a2ad VERSION (%s)", code, out, runtime.Version())
	}
	if out2, _, code := exitOf(t, nil, bin, "version"); code != 0 || out2 != out {
		t.Errorf("a2ad version: exit %d, %q; want %q", code, out2, out)
	}
	js, _, code := exitOf(t, nil, bin, "version", "--json")
	var v struct{ Version, Go string }
	if code != 0 || json.Unmarshal([]byte(js), &v) != nil || v.Version != m[1] || v.Go != runtime.Version() {
		t.Errorf("a2ad version --json: exit %d, %s; want version %q go %q", code, js, m[1], runtime.Version())
	}
	d := startDaemon(t, nil, "--config", writeConfig(t), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	resp, err := http.Get(d.HTTP + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"status":"ok","version":"` + m[1] + `"}` + "\n"; resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || string(body) != want {
		t.Errorf("/healthz: %d %q %q; want 200 application/json %q", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
	}
}

// Usage errors exit 2 with a pointer to --help, runtime errors 1; with
// --json, both are {"error":{"code","message"}} on stdout.
func TestExitCodesAndJSONErrors(t *testing.T) {
	empty := t.TempDir()
	for _, c := range []struct {
		args       []string
		status     int
		stderr     string // exact, without --json
		code, json string // with --json: code and message
	}{
		{[]string{"tasks", "bogus"}, 2, "Error: unknown command \"bogus\" for \"a2ad tasks\"\nRun 'a2ad tasks --help' for usage.\n", "usage", `unknown command "bogus" for "a2ad tasks"`},
		{[]string{"tasks", "get"}, 2, "Error: a2ad tasks get: accepts 1 arg(s), received 0\nRun 'a2ad tasks get --help' for usage.\n", "usage", "a2ad tasks get: accepts 1 arg(s), received 0"},
		{[]string{"tasks", "list", "--limit", "ten"}, 2, "Error: invalid value \"ten\" for --limit: want a whole number\nRun 'a2ad tasks list --help' for usage.\n", "usage", `invalid value "ten" for --limit: want a whole number`},
		{[]string{"tasks", "list", "--bogus"}, 2, "Error: unknown flag: --bogus\nRun 'a2ad tasks list --help' for usage.\n", "usage", "unknown flag: --bogus"},
		{[]string{"agents", "approve", "x"}, 2, "Error: required flag(s) \"fingerprint\" not set\nRun 'a2ad agents approve --help' for usage.\n", "usage", `required flag(s) "fingerprint" not set`},
		{[]string{"tasks", "list", "--as", "al ice"}, 2, "Error: --as \"al ice\": want an operator name of 1 to 64 letters, digits and . _ @ -, starting with a letter or digit (e.g. alice, alice@example.com)\nRun 'a2ad tasks list --help' for usage.\n",
			"usage", `--as "al ice": want an operator name of 1 to 64 letters, digits and . _ @ -, starting with a letter or digit (e.g. alice, alice@example.com)`},
		{[]string{"tasks", "list", "--data-dir", empty}, 1, "Error: the admin API needs a token with scope a2a:admin: pass --token (or A2AD_TOKEN), or --data-dir of a daemon that uses the development key\n",
			"unauthorized", "the admin API needs a token with scope a2a:admin: pass --token (or A2AD_TOKEN), or --data-dir of a daemon that uses the development key"},
		{[]string{"tasks", "list", "--server", "http://127.0.0.1:1", "--token", "x"}, 1, "", "unreachable", ""},
		// a2ad console as every admin command (red team: its faults were
		// all "internal", exit 1).
		{[]string{"console", "--ttl", "0s", "--data-dir", empty}, 2, "Error: console: --ttl 0s: want a duration above 0 and at most 720h\nRun 'a2ad console --help' for usage.\n", "usage", "console: --ttl 0s: want a duration above 0 and at most 720h"},
		{[]string{"console", "--data-dir", empty}, 1, "Error: console: the admin API needs a token with scope a2a:admin: pass --token (or A2AD_TOKEN), or --data-dir of a daemon that uses the development key\n",
			"unauthorized", "console: the admin API needs a token with scope a2a:admin: pass --token (or A2AD_TOKEN), or --data-dir of a daemon that uses the development key"},
	} {
		stdout, stderr, status := exitOf(t, nil, bin, c.args...)
		if status != c.status || stdout != "" || (c.stderr != "" && stderr != c.stderr) || !strings.HasPrefix(stderr, "Error: ") {
			t.Errorf("a2ad %v: exit %d, stdout %q, stderr %q; want %d and %q", c.args, status, stdout, stderr, c.status, c.stderr)
		}
		stdout, stderr, status = exitOf(t, nil, bin, append(c.args, "--json")...)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if status != c.status || stderr != "" || json.Unmarshal([]byte(stdout), &e) != nil || e.Error.Code != c.code || (c.json != "" && e.Error.Message != c.json) {
			t.Errorf("a2ad %v --json: exit %d, stdout %q, stderr %q; want %d and code %q message %q", c.args, status, stdout, stderr, c.status, c.code, c.json)
		}
	}
	// An API error keeps the API's code.
	d := startDaemon(t, nil, "--config", writeConfig(t), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	stdout, _, status := exitOf(t, nil, bin, "tasks", "get", "tsk-nope", "--json", "--server", d.HTTP, "--data-dir", d.DataDir)
	if want := `{"error":{"code":"task_not_found","message":"task_not_found: no task tsk-nope"}}` + "\n"; status != 1 || stdout != want {
		t.Errorf("tasks get tsk-nope --json: exit %d %q, want 1 %q", status, stdout, want)
	}

	// a2ad console --json prints the link as JSON, and --as names the
	// operator of the session it opens (red team: it was always
	// a2ad-console).
	stdout, _, status = exitOf(t, nil, bin, "console", "--json", "--as", "bob", "--server", d.HTTP, "--data-dir", d.DataDir)
	var link struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(stdout), &link); status != 0 || err != nil || !strings.HasPrefix(link.URL, d.HTTP+"/console/login#code=") ||
		time.Until(link.ExpiresAt) <= 0 || time.Until(link.ExpiresAt) > time.Minute {
		t.Fatalf("console --json: exit %d %q", status, stdout)
	}
	_, code, _ := strings.Cut(link.URL, "#code=")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(d.HTTP+"/console/login", url.Values{"code": {code}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login with console --as bob's link: %d %v", resp.StatusCode, resp.Cookies())
	}
	req, _ := http.NewRequest("GET", d.HTTP+"/console/api/session", nil)
	req.AddCookie(resp.Cookies()[0])
	req.Header.Set(console.KeyHeader, strings.TrimPrefix(resp.Header.Get("Location"), "/console/#key="))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sess struct{ Subject string }
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || sess.Subject != "bob" {
		t.Errorf("the session of console --as bob: %d %q, want bob", resp.StatusCode, sess.Subject)
	}
}

// An address in use is refused at once, naming it: before, the embedded
// NATS server timed out after 10 s and a2ad guessed.
func TestServeRefusesAnAddressInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--nats-listen", addr, "--http-addr", "127.0.0.1:0"}, "NATS address " + addr + " is in use (--nats-listen, config nats_listen): another process (another a2ad, a NATS server) listens there; stop it or give a free address"},
		{[]string{"--nats-listen", "127.0.0.1:-1", "--http-addr", addr}, "HTTP address " + addr + " is in use (--http-addr, config http_addr): another process (another a2ad, a NATS server) listens there; stop it or give a free address"},
	} {
		start := time.Now()
		_, stderr, status := exitOf(t, nil, bin, append([]string{"serve", "--data-dir", t.TempDir()}, c.flags...)...)
		t.Logf("a2ad serve %v: exited after %v", c.flags, time.Since(start))
		if status != 1 || !strings.Contains(stderr, `msg="a2ad did not start" err="`+c.want+`"`) {
			t.Errorf("a2ad serve %v: exit %d\n%s\nwant 1 and %q", c.flags, status, stderr, c.want)
		}
	}
}

// agents credential --out FILE writes mode 0600 and refuses to overwrite;
// --out - is stdout; neither is a usage error.
func TestCredentialOut(t *testing.T) {
	d := startDaemon(t, nil, "--config", writeConfig(t), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	cli := func(args ...string) (string, string, int) {
		return exitOf(t, nil, bin, append(append([]string{"agents", "credential", "fraud-review"}, args...), "--server", d.HTTP, "--data-dir", d.DataDir)...)
	}
	jwtForm := regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\n$`)
	if stdout, stderr, status := cli(); status != 2 || stdout != "" ||
		stderr != "Error: agents credential: pass --out FILE (written with mode 0600) or --out - (stdout): a credential is a secret, and a redirect of stdout leaves it in a file others may read\nRun 'a2ad agents credential --help' for usage.\n" {
		t.Errorf("agents credential without --out: exit %d, stdout %q, stderr %q", status, stdout, stderr)
	}
	file := filepath.Join(t.TempDir(), "fraud-review.jwt")
	stdout, stderr, status := cli("--out", file)
	info, err := os.Stat(file)
	if status != 0 || stdout != "" || err != nil || info.Mode().Perm() != 0o600 || !strings.Contains(stderr, "written to "+file+" (mode 0600)") {
		t.Fatalf("agents credential --out: exit %d, stdout %q, stderr %q, file %v %v", status, stdout, stderr, info, err)
	}
	first, _ := os.ReadFile(file)
	if !jwtForm.Match(first) {
		t.Errorf("the file holds %q, want a JWT and a newline", first)
	}
	if stdout, stderr, status := cli("--out", file); status != 1 || stdout != "" ||
		stderr != "Error: --out "+file+": the file exists; the credential was not minted (pass --force to replace it, or another file)\n" {
		t.Errorf("agents credential --out an existing file: exit %d, stdout %q, stderr %q", status, stdout, stderr)
	}
	if now, _ := os.ReadFile(file); string(now) != string(first) {
		t.Error("the refused --out changed the file")
	}
	_ = os.Chmod(file, 0o644)
	if _, stderr, status := cli("--out", file, "--force"); status != 0 {
		t.Errorf("--force: exit %d %s", status, stderr)
	}
	if now, _ := os.ReadFile(file); string(now) == string(first) || !jwtForm.Match(now) {
		t.Errorf("--force: file %q, want a new credential", now)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o600 {
		t.Errorf("--force over a 0644 file: mode %v, want 0600", info.Mode().Perm())
	}
	if stdout, _, status := cli("--out", "-"); status != 0 || !jwtForm.MatchString(stdout) {
		t.Errorf("--out -: exit %d, stdout %q; want the JWT", status, stdout)
	}
	// A directory is refused before a credential is minted, with or
	// without --force (red team: --force minted one, then lost it).
	dir := t.TempDir()
	for _, force := range [][]string{nil, {"--force"}} {
		if stdout, stderr, status := cli(append([]string{"--out", dir}, force...)...); status != 1 || stdout != "" ||
			stderr != "Error: --out "+dir+": a directory; the credential was not minted (name a file)\n" {
			t.Errorf("agents credential --out a directory %v: exit %d, stdout %q, stderr %q", force, status, stdout, stderr)
		}
	}
}

// fraud-review-agent --help is clean usage on stdout and never shows an
// environment value (NATS_URL holds a password) as a default.
func TestFraudReviewAgentHelp(t *testing.T) {
	agentBin := filepath.Join(t.TempDir(), "fraud-review-agent")
	if out, err := exec.Command("go", "build", "-o", agentBin, "../fraud-review-agent").CombinedOutput(); err != nil {
		t.Fatalf("building fraud-review-agent: %v\n%s", err, out)
	}
	stdout, stderr, status := exitOf(t, []string{"NATS_URL=nats://agent:s3cret-pw@nats.example:4222", "A2AD_AGENT_CREDENTIAL_FILE=/secret/path.jwt"}, agentBin, "--help")
	if status != 0 || stderr != "" || strings.Contains(stdout, "s3cret-pw") || strings.Contains(stdout, "/secret/path.jwt") {
		t.Fatalf("fraud-review-agent --help: exit %d, stderr %q\n%s", status, stderr, stdout)
	}
	if !strings.HasPrefix(stdout, "fraud-review-agent: the reference A2A agent of a2ad") || !strings.Contains(stdout, "\nUsage:\n  fraud-review-agent --credential-file FILE [--nats-url URL] [flags]\n") {
		t.Errorf("fraud-review-agent --help lacks its header and usage line:\n%s", stdout)
	}
	// Every flag line is "  --name [TYPE]", every description line
	// indented under it: nothing else.
	flagLine := regexp.MustCompile(`^  --[a-z-]+( [A-Z:]+)?$`)
	_, flags, _ := strings.Cut(stdout, "\nFlags:\n")
	lines := strings.Split(strings.TrimSuffix(flags, "\n"), "\n")
	if len(lines) < 20 || len(lines)%2 != 0 {
		t.Fatalf("flags section has %d lines:\n%s", len(lines), flags)
	}
	for i := 0; i < len(lines); i += 2 {
		if !flagLine.MatchString(lines[i]) || !strings.HasPrefix(lines[i+1], "      ") || strings.ContainsAny(lines[i]+lines[i+1], "`") {
			t.Errorf("garbled flag entry:\n%s\n%s", lines[i], lines[i+1])
		}
	}
	for _, want := range []string{"  --nats-url STRING\n", "  --credential-file STRING\n", "  --slow-for DURATION\n", "(default 3s)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if _, stderr, status := exitOf(t, nil, agentBin, "--bogus"); status != 2 ||
		stderr != "fraud-review-agent: flag provided but not defined: -bogus\nRun 'fraud-review-agent --help' for usage.\n" {
		t.Errorf("fraud-review-agent --bogus: exit %d %q", status, stderr)
	}
}

// a2ad completion bash, sourced in bash with bash-completion, completes
// `a2ad ta<TAB>` to tasks.
func TestBashCompletion(t *testing.T) {
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("A2AD_REQUIRE_BASH_COMPLETION") != "" {
			t.Fatalf("bash-completion is required (A2AD_REQUIRE_BASH_COMPLETION) and %s is absent", lib)
		}
		t.Skip("bash-completion is not installed (apt-get install bash-completion)")
	}
	script := filepath.Join(t.TempDir(), "a2ad.bash")
	out, _, status := exitOf(t, nil, bin, "completion", "bash")
	if status != 0 || os.WriteFile(script, []byte(out), 0o600) != nil {
		t.Fatalf("a2ad completion bash: exit %d", status)
	}
	// As bash does on TAB: COMP_WORDS and COMP_CWORD, then the function
	// `complete -p a2ad` names.
	probe := `source ` + lib + ` && source ` + script + ` && PATH=` + filepath.Dir(bin) + `:$PATH &&
fn=$(complete -p a2ad | sed -E 's/.*-F ([^ ]+).*/\1/') &&
COMP_WORDS=(a2ad ta) COMP_CWORD=1 COMP_LINE="a2ad ta" COMP_POINT=7 && $fn a2ad ta a2ad && printf '%s\n' "${COMPREPLY[@]}"`
	// stdout only: outside a real TAB, compopt complains on stderr.
	got, err := exec.Command("bash", "--norc", "-c", probe).Output()
	if err != nil || strings.TrimSpace(string(got)) != "tasks" {
		t.Errorf("a2ad ta<TAB>: %v %q, want tasks", err, got)
	}
}

// `a2ad tasks watch` with a token it minted watches on when the token
// expires (the admin API ends every stream then): it mints another and
// reconnects, instead of exiting after five minutes (red team).
func TestTasksWatchOutlivesItsMintedToken(t *testing.T) {
	d := startDaemon(t, nil, "--config", configFile(t, "auth:\n  leeway_seconds: 1\n"), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
	prev := adminTokenTTL
	adminTokenTTL = 2 * time.Second
	t.Cleanup(func() { adminTokenTTL = prev })
	var stdout, stderr testlog.Buffer
	root := newRoot(&stdout, &stderr)
	root.SetArgs([]string{"tasks", "watch", "--json", "--server", d.HTTP, "--data-dir", d.DataDir})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "the watch reconnects with a fresh token", func() bool {
		return strings.Contains(stderr.String(), "the watch's token expired; watching on with a fresh one")
	})
	select {
	case err := <-done:
		t.Fatalf("the watch ended: %v\n%s", err, stderr.String())
	default:
	}
	// Still watching: a task's change arrives on the new stream.
	h := connectHost(t, d)
	agentOn(t, d.NATS, credentialFor(t, d.NATS, d.DataDir), nil)
	out, err := h.delegateWhenAgentKnown(delegateArgs("C-901", 1999, "", 10))
	if err != nil || out.ErrText != "" {
		t.Fatalf("delegate: %v %+v", err, out)
	}
	waitUntil(t, "the delegation on the watch after the reconnect", func() bool { return strings.Contains(stdout.String(), out.TaskID) })
}
