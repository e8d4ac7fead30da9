//go:build unix

package daemon

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (Go raises it to the
// hard limit at start, since Go 1.19); 0 if unknown.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0
	}
	return uint64(r.Cur)
}
