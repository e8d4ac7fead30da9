//go:build !linux

package main

import "syscall"

// benchChildAttr: --processes is refused off Linux (it reads /proc).
func benchChildAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
