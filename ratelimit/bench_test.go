package ratelimit

import (
	"context"
	"net/http"
	"testing"
	"time"
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

// BenchmarkRideSettleRedis is a limited key's whole part of a turn on
// Redis, as the proxy runs it: the take riding in a pipeline (alone here,
// where the proxy's admission would carry it), the grant, and the settle
// with the provider's rate-limit headers, as a flush sends it. What it
// allocates is gatekeeper's per-turn cost of key limits.
func BenchmarkRideSettleRedis(b *testing.B) {
	benchRideSettle(b, false, "4000", "2000000")
}

// BenchmarkRideSettleRedisRoomy is BenchmarkRideSettleRedis with the
// provider's headers advertising the key's own limits, all left (a key
// with room, whose headers lower nothing), exact (every take and settle
// a script) and with slices (most turns served and settled in memory).
func BenchmarkRideSettleRedisRoomy(b *testing.B) {
	for _, tc := range []struct {
		name   string
		slices bool
	}{{"exact", false}, {"slices", true}} {
		b.Run(tc.name, func(b *testing.B) {
			benchRideSettle(b, tc.slices, "1073741824", "1125899906842624")
		})
	}
}

// benchRideSettle runs turns on a key of benchLimits whose replies'
// headers advertise requests and tokens a minute, all left; each
// iteration is one turn, and the Redis commands it sent are reported.
func benchRideSettle(b *testing.B, slices bool, requests, tokens string) {
	c := newRedisClient(b)
	cmds := &cmdCount{}
	c.AddHook(cmds)
	s := New(Options{Buckets: NewRedis(c, "gk:"), Slices: slices})
	defer s.Close()
	keys := []Key{{ID: "anthropic/k1", Limits: benchLimits}}
	reset := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", requests)
	h.Set("anthropic-ratelimit-requests-remaining", requests)
	h.Set("anthropic-ratelimit-requests-reset", reset)
	h.Set("anthropic-ratelimit-tokens-limit", tokens)
	h.Set("anthropic-ratelimit-tokens-remaining", tokens)
	h.Set("anthropic-ratelimit-tokens-reset", reset)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rd := s.Ride(Interactive, keys, benchEst)
		if rd == nil {
			b.Fatal("no ride on Redis buckets")
		}
		if !rd.Sent() {
			p := c.Pipeline()
			if !rd.Queue(ctx, c, p) {
				b.Fatal("the ride was not queued")
			}
			// The take's own error (the first NOSCRIPT) is Grant's to read.
			_, _ = p.Exec(ctx)
		}
		g, err := rd.Grant(ctx)
		if err != nil {
			b.Fatal(err)
		}
		SettleAll(ctx, []Settlement{{Grant: g, Actual: benchActual, Header: h}})
	}
	b.ReportMetric(float64(cmds.n.Load())/float64(b.N), "cmds/turn")
}
