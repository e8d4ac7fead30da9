//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `a2ad serve` with a schemas_dir entry that links to a FIFO or to
// /dev/zero exits at once, naming the file, instead of hanging for ever
// (deaf to SIGTERM) or reading until it runs out of memory.
func TestServeRefusesSchemaFileThatIsNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ target, want string }{
		{fifo, "artifact: schema special.json: not a regular file (a named pipe): a schema is a regular file, or a symlink to one"},
		{"/dev/zero", "artifact: schema special.json: not a regular file (a character device): a schema is a regular file, or a symlink to one"},
	} {
		dir := t.TempDir()
		for _, f := range []string{"refund_evidence.json", "risk_assessment.json"} {
			b, err := os.ReadFile(filepath.Join("../../testdata/schemas", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(tc.target, filepath.Join(dir, "special.json")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", "--schemas-dir", dir,
			"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), tc.want) {
				t.Errorf("%s: exit %v, want a refusal containing %q:\n%s", tc.target, err, tc.want, tail(out.String(), 5))
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s: a2ad still starting after 30 s (killed):\n%s", tc.target, tail(out.String(), 5))
		}
	}
}
