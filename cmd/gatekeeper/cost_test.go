package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/feed"
	"gatekeeper/mockprovider"
)

// The ceilings of TestTurnCostCeilings, over the bare proxy's figures:
// what a small turn allocated when they were set (125 allocations more
// than the bare proxy, and 9 KiB less; 139 more under the race detector,
// and between 3.5 KiB less and as much), and a margin of a few
// allocations (3, and 4 under the race detector), so that a change that
// adds a handful to every turn fails here: formatting the turn's log
// attributes ahead of its line again (6 more) does. The bare proxy's
// figures vary with the run far more in bytes than in allocations. A turn
// allocated 245 more before the work that set them (239 before the
// changes merged with it), and a turn of the build before the feed's ring
// 870 KiB once the event log was full.
const (
	maxTurnAllocs     = 128
	maxTurnAllocsRace = 143
	maxTurnBytes      = 8 << 10
	feedRetain        = feed.DefaultRetain
)

// costYAML is an operator's config as config.yaml has it: the event
// stream (always on), the log at its default level to a file, metrics,
// budgets, tenant limits and provider-key limits that do not bind.
const costYAML = `
listen: 127.0.0.1:0
providers:
  - name: anthropic
    api: anthropic
    base_url: %s
    default: true
    keys: [{name: main, key: sk-ant-mock, rpm: 10000000, input_tpm: 10000000000, output_tpm: 10000000000}]
prices:
  claude-sonnet-4-5: {input: 3.00, cached_input: 0.30, cache_write: 3.75, output: 15.00}
tenants:
  - name: demo
    keys: [gk-cost-key]
    budget: {turns: 100000000, tokens: 100000000000, wall_clock: 24h, dollars: 1000000}
    limits: {dollars_per_day: 1000000, dollars_per_month: 10000000, max_live_trajectories: 100000, new_trajectories_per_hour: 1000000}
admin:
  tokens: [{name: admin, token: cost-admin-token, roles: [operator]}]
`

// turnAllocs is the process's allocations and bytes allocated per small
// non-streamed turn through base on trajectory traj.
func turnAllocs(t *testing.T, c *http.Client, base, traj string, turns int) (allocs, allocated float64) {
	t.Helper()
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"status?"}]}`)
	turn := func() {
		req, err := http.NewRequest(http.MethodPost, base+"/anthropic/v1/messages", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-api-key", "gk-cost-key")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("content-type", "application/json")
		req.Header.Set("X-Gatekeeper-Trajectory", traj)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("turn: %s", resp.Status)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	allocs = testing.AllocsPerRun(turns, turn)
	runtime.ReadMemStats(&after)
	return allocs, float64(after.TotalAlloc-before.TotalAlloc) / float64(turns+1)
}

// TestTurnCostCeilings guards what a turn costs that does not depend on
// the machine's load: the allocations of a small turn through the
// server an operator runs, over what a bare reverse proxy in front of
// the same provider allocates, and that they do not grow with the turns
// a run has made, the records stored, or the events the log holds.
func TestTurnCostCeilings(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// The provider advertises limits as roomy as the key's, as the real
	// ones do for a key with such limits.
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{RequestsPerMinute: 10_000_000, TokensPerMinute: 10_000_000_000}))
	defer mock.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, costYAML, mock.URL), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "gatekeeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	s, err := newServer(context.Background(), cfg, newLogger(cfg, logFile), env())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	}()
	gk := httptest.NewServer(s.handler)
	defer gk.Close()
	mockURL, err := url.Parse(mock.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The bare proxy's transport asks for no compression either (by
	// default Go's asks for gzip and decodes it), as gatekeeper's does.
	bare := httptest.NewServer(&httputil.ReverseProxy{Transport: &http.Transport{DisableCompression: true}, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(mockURL)
		r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, "/anthropic")
		r.Out.Header.Set("x-api-key", "sk-ant-mock")
	}})
	defer bare.Close()
	// No Accept-Encoding: a bare proxy would forward it and have the
	// provider compress, which gatekeeper does not ask for.
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	defer c.CloseIdleConnections()

	const turns = 200
	turnAllocs(t, c, bare.URL, "warm", 50)
	bareAllocs, bareBytes := turnAllocs(t, c, bare.URL, "bare", turns)
	turnAllocs(t, c, gk.URL, "run-1", 50)
	early, earlyBytes := turnAllocs(t, c, gk.URL, "run-1", turns)
	t.Logf("per turn: bare %.0f allocations, %.0f bytes; gatekeeper %.0f, %.0f (%.0f and %.0f over bare)",
		bareAllocs, bareBytes, early, earlyBytes, early-bareAllocs, earlyBytes-bareBytes)
	// Many turns, runs and events later: other runs fill the event log
	// past its retention, and run-1 reaches its 1,000th turn.
	for i := range 9 {
		turnAllocs(t, c, gk.URL, fmt.Sprintf("filler-%d", i), 400)
	}
	turnAllocs(t, c, gk.URL, "run-1", 500)
	late, lateBytes := turnAllocs(t, c, gk.URL, "run-1", turns)
	t.Logf("at turn %d of run-1, %d events published: %.0f allocations, %.0f bytes per turn",
		50+turns+500+turns, s.feed.Stats().Published, late, lateBytes)

	if s.feed.Stats().Published < feedRetain {
		t.Fatalf("%d events published; the test needs the event log full (%d)", s.feed.Stats().Published, feedRetain)
	}
	ceiling := maxTurnAllocs
	if raceDetector {
		ceiling = maxTurnAllocsRace
	}
	if over := early - bareAllocs; over > float64(ceiling) {
		t.Errorf("a turn allocates %.0f times more than the bare proxy's %.0f; the ceiling is %d", over, bareAllocs, ceiling)
	}
	if over := earlyBytes - bareBytes; over > maxTurnBytes {
		t.Errorf("a turn allocates %.0f bytes more than the bare proxy's %.0f; the ceiling is %d", over, bareBytes, maxTurnBytes)
	}
	if late > early*1.1+10 || lateBytes > earlyBytes*1.5+8192 {
		t.Errorf("with the event log full and at a run's turn 1,000 a turn allocates %.0f times and %.0f bytes; at turn 50, %.0f and %.0f: per-turn work grows",
			late, lateBytes, early, earlyBytes)
	}
}
