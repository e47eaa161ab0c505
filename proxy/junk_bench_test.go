package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkJunkTrajectoriesRSS measures what 10,000 junk trajectories
// (one call each, through gatekeeper, memory store) cost the process, and
// what their expiry gives back: RSS before, after, and once the idle
// retention has passed and the store swept them.
//
//	go test -run '^$' -bench JunkTrajectoriesRSS -benchtime 1x ./proxy/
func BenchmarkJunkTrajectoriesRSS(b *testing.B) {
	const runs = 10_000
	for range b.N {
		// Limits above the runs made: the defaults would refuse the
		// 1,001st new run of the hour.
		e := newEnv(b, envOpts{idle: time.Hour,
			teamAExtra: "    limits: {max_live_trajectories: 100000, new_trajectories_per_hour: 100000}"})
		var heap []float64
		settle := func() float64 {
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap = append(heap, float64(ms.HeapAlloc)/(1<<20))
			return rssMiB(b)
		}
		// Warm the connection pool and the mock before measuring.
		e.junk(b, "warm")
		before := settle()
		for i := range runs {
			e.junk(b, fmt.Sprintf("junk-%05d", i))
		}
		after := settle()
		e.clk.advance(2 * time.Hour)
		swept := e.store.Sweep()
		expired := settle()
		if swept < runs {
			b.Fatalf("swept %d records, want the %d junk trajectories", swept, runs)
		}
		b.ReportMetric(before, "rss-before-MiB")
		b.ReportMetric(after, "rss-10k-MiB")
		b.ReportMetric(expired, "rss-expired-MiB")
		b.ReportMetric(heap[2], "live-heap-expired-MiB")
		b.Logf("RSS %.1f MiB before, %.1f MiB with %d junk trajectories, %.1f MiB once %d records expired (live heap %.1f, %.1f, %.1f MiB)",
			before, after, runs, expired, swept, heap[0], heap[1], heap[2])
	}
}

// junk makes one call in a trajectory of its own. Its context is its
// own, not the benchmark's: nothing of the call outlives it in the test.
func (e *env) junk(b *testing.B, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", e.gk+"/v1/messages", strings.NewReader(anthropicReq(false, "junk "+id)))
	if err != nil {
		b.Fatal(err)
	}
	h := hdr("X-Gatekeeper-Trajectory", id, "X-Mock-Turn", `{"kind":"text","text":"ok"}`)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("%s: %d %s %v", id, resp.StatusCode, body, err)
	}
}

// rssMiB is the process's resident set, from /proc/self/status.
func rssMiB(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
