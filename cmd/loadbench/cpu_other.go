//go:build !unix

package main

import "time"

// cpuTime is not read off unix; the CPU rows read n/a.
func cpuTime() (time.Duration, bool) { return 0, false }
