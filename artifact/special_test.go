//go:build unix

package artifact_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/a2ad/a2ad/artifact"
)

// A schemas_dir entry that is, or links to, anything but a regular file is
// refused by name before it is opened: a named pipe would block the load
// (and a2ad's start) for ever, /dev/zero would be read until memory runs
// out. A file over MaxSchemaFileBytes is refused unread. Each is named
// with every fault of the other files, in file name order.
func TestLoadDirRefusesSpecialAndHugeFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		make   func(t *testing.T, p string)
		reason string
	}{
		{"symlink to a FIFO", func(t *testing.T, p string) { must(t, os.Symlink(fifo, p)) },
			"not a regular file (a named pipe): a schema is a regular file, or a symlink to one"},
		{"a FIFO", func(t *testing.T, p string) { must(t, syscall.Mkfifo(p, 0o600)) },
			"not a regular file (a named pipe): a schema is a regular file, or a symlink to one"},
		{"symlink to /dev/zero", func(t *testing.T, p string) { must(t, os.Symlink("/dev/zero", p)) },
			"not a regular file (a character device): a schema is a regular file, or a symlink to one"},
		{"over 1 MiB", func(t *testing.T, p string) {
			must(t, os.WriteFile(p, []byte(`{"description":"`+strings.Repeat("x", artifact.MaxSchemaFileBytes)+`"}`), 0o600))
		}, "larger than 1048576 bytes (1 MiB), the most a schema file may hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"type":"object"}`), 0o600))
			must(t, os.WriteFile(filepath.Join(dir, "z.json"), []byte(`{"pattern":"(?<=a)"}`), 0o600))
			tc.make(t, filepath.Join(dir, "special.json"))
			_, err := artifact.LoadDir(dir)
			want := "artifact: schema special.json: " + tc.reason + "\n" +
				"artifact: schema z.json at /pattern: pattern is not a regular expression Go's regexp accepts (RE2 syntax: no look-around, no back-references): invalid named capture: (?<=a)"
			if err == nil || err.Error() != want {
				t.Fatalf("LoadDir = %v, want\n%s", err, want)
			}
			var le *artifact.LoadError
			if !errors.As(err, &le) || le.File != "special.json" || le.Pointer != "" {
				t.Fatalf("errors.As finds %+v, want special.json", le)
			}
		})
	}
	t.Run("exactly MaxSchemaFileBytes loads", func(t *testing.T) {
		dir := t.TempDir()
		doc := `{"description":"` + strings.Repeat("x", artifact.MaxSchemaFileBytes-len(`{"description":""}`)) + `"}`
		must(t, os.WriteFile(filepath.Join(dir, "big.json"), []byte(doc), 0o600))
		r, err := artifact.LoadDir(dir)
		if err != nil || len(r.Names()) != 1 {
			t.Fatalf("LoadDir = %v, %v; want big loaded", r, err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
