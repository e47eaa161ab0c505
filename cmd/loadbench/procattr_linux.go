package main

import "syscall"

// childAttr has the kernel end a child if the benchmark dies without
// stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
