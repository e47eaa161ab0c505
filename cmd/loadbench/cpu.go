package main

import "time"

// cpuSpan is process CPU time over a phase. The zero value is no time,
// known; unknown is set once any part could not be read.
type cpuSpan struct {
	d       time.Duration
	unknown bool
}

// cpuStart is a reading taken when a phase begins.
type cpuStart struct {
	at time.Duration
	ok bool
}

func startCPU() cpuStart {
	at, ok := cpuTime()
	return cpuStart{at: at, ok: ok}
}

func (c cpuStart) stop() cpuSpan {
	end, ok := cpuTime()
	return cpuSpan{d: end - c.at, unknown: !ok || !c.ok}
}

func (s *cpuSpan) add(o cpuSpan) {
	s.d += o.d
	s.unknown = s.unknown || o.unknown
}

// per is the CPU time per unit of work.
func (s cpuSpan) per(n int) (time.Duration, bool) {
	if s.unknown || n <= 0 {
		return 0, false
	}
	return s.d / time.Duration(n), true
}
