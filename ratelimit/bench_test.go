package ratelimit

import (
	"context"
	"testing"
)

// The benchmarks measure one turn's Acquire and Done on a key far from
// its limits (the fast path), against the same on a key without limits:
// what rate limiting adds to a turn that does not wait.

var (
	benchEst    = Cost{Requests: 1, Input: 2000, Output: 1000}
	benchActual = Cost{Requests: 1, Input: 2100, Output: 350}
	benchLimits = Limits{RPM: 1 << 30, InputTPM: 1 << 50, OutputTPM: 1 << 50}
)

func benchAcquire(b *testing.B, s *Scheduler, keys []Key) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g, err := s.Acquire(ctx, Interactive, keys, benchEst)
			if err != nil {
				b.Error(err)
				return
			}
			g.Done(ctx, benchActual)
		}
	})
}

// BenchmarkAcquireBaseline is a key without limits: the scheduler's own
// cost, no bucket touched.
func BenchmarkAcquireBaseline(b *testing.B) {
	s := New(Options{Buckets: NewMemory(nil)})
	defer s.Close()
	benchAcquire(b, s, []Key{{ID: "p/free"}})
}

func BenchmarkAcquireUnsaturated(b *testing.B) {
	s := New(Options{Buckets: NewMemory(nil)})
	defer s.Close()
	benchAcquire(b, s, []Key{{ID: "p/k", Limits: benchLimits}})
}

// BenchmarkAcquireUnsaturatedPool is a pool of three keys: Headroom of
// each before the Take.
func BenchmarkAcquireUnsaturatedPool(b *testing.B) {
	s := New(Options{Buckets: NewMemory(nil)})
	defer s.Close()
	benchAcquire(b, s, []Key{{ID: "p/a", Limits: benchLimits}, {ID: "p/b", Limits: benchLimits}, {ID: "p/c", Limits: benchLimits}})
}

func BenchmarkAcquireUnsaturatedRedis(b *testing.B) {
	s := New(Options{Buckets: NewRedis(newRedisClient(b), "gk:")})
	defer s.Close()
	benchAcquire(b, s, []Key{{ID: "p/k", Limits: benchLimits}})
}

func BenchmarkAcquireUnsaturatedRedisPool(b *testing.B) {
	s := New(Options{Buckets: NewRedis(newRedisClient(b), "gk:")})
	defer s.Close()
	benchAcquire(b, s, []Key{{ID: "p/a", Limits: benchLimits}, {ID: "p/b", Limits: benchLimits}, {ID: "p/c", Limits: benchLimits}})
}
