package main

import "syscall"

// benchChildAttr puts a child of `a2ad bench --processes` in a process
// group of its own, and has the kernel kill it if the bench dies first.
func benchChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
