package main

import (
	"runtime/metrics"
	"time"
)

// cost is what the process spent over a phase: CPU time, and heap bytes
// and objects allocated. Client and mock do the same work per turn or
// event through either proxy, so per unit of work the difference between
// targets is the proxies' own. Unlike wall time, none of it grows while
// the process waits for a core that other work on the machine holds.
type cost struct {
	cpu        time.Duration
	allocBytes uint64
	allocObjs  uint64
	// cpuUnknown is set once any part's CPU time could not be read.
	cpuUnknown bool
}

// costMark is a reading taken when a phase begins.
type costMark struct {
	cpu   time.Duration
	cpuOK bool
	bytes uint64
	objs  uint64
}

var allocMetrics = []string{"/gc/heap/allocs:bytes", "/gc/heap/allocs:objects"}

func markCost() costMark {
	m := costMark{}
	m.cpu, m.cpuOK = cpuTime()
	m.bytes, m.objs = allocated()
	return m
}

// allocated reads the heap's cumulative allocation counters without
// stopping the world, as runtime.ReadMemStats would.
func allocated() (bytes, objects uint64) {
	s := make([]metrics.Sample, len(allocMetrics))
	for i, name := range allocMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		bytes = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		objects = s[1].Value.Uint64()
	}
	return bytes, objects
}

func (m costMark) since() cost {
	now := markCost()
	return cost{
		cpu:        now.cpu - m.cpu,
		cpuUnknown: !now.cpuOK || !m.cpuOK,
		allocBytes: now.bytes - m.bytes,
		allocObjs:  now.objs - m.objs,
	}
}

func (c *cost) add(o cost) {
	c.cpu += o.cpu
	c.cpuUnknown = c.cpuUnknown || o.cpuUnknown
	c.allocBytes += o.allocBytes
	c.allocObjs += o.allocObjs
}

// cpuPer is the CPU time per unit of work.
func (c cost) cpuPer(n int) (time.Duration, bool) {
	if c.cpuUnknown || n <= 0 {
		return 0, false
	}
	return c.cpu / time.Duration(n), true
}

// allocPer is the heap allocated per unit of work: bytes and objects.
func (c cost) allocPer(n int) (bytes, objects float64, ok bool) {
	if n <= 0 {
		return 0, 0, false
	}
	return float64(c.allocBytes) / float64(n), float64(c.allocObjs) / float64(n), true
}
