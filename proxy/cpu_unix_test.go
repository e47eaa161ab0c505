//go:build unix

package proxy_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the test process has used so
// far: on a shared machine it does not grow while the process waits for a
// core, as wall time does.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
