//go:build unix

package conncap

import "syscall"

// openFiles returns the process's soft limit on open files, 0 when it
// cannot be read.
func openFiles() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}
