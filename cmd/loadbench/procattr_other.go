//go:build !linux

package main

import "syscall"

// childAttr is nothing off Linux: children are stopped by PID only.
func childAttr() *syscall.SysProcAttr { return nil }
