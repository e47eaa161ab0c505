package proxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/telemetry"
	"gatekeeper/trajectory"

	"github.com/go-chi/chi/v5"
)

// BenchmarkTurnPath measures one non-streamed turn per operation, from
// parallel clients each continuing its own trajectory, through a bare
// reverse proxy and through gatekeeper on each store: the metering and
// budget path (admit + reserve before the call, settle after) is the
// difference. With Redis it reports the round trips per turn.
func BenchmarkTurnPath(b *testing.B) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	b.Cleanup(mock.Close)
	// Turn shapes: the smallest non-streamed turn, where the per-turn
	// cost weighs most, and streamed replies of 40 and 50 text deltas.
	shapes := []struct{ name, body, spec string }{
		{"json", `{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"status?"}]}`,
			`{"kind":"text","text":"all green"}`},
		{"stream40", `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"status?"}]}`,
			`{"kind":"text","deltas":40}`},
		{"stream50", `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"status?"}]}`,
			`{"kind":"text","deltas":50}`},
		// A small turn whose reply calls a tool, each time with another
		// input (%d: the turn's number), for the loop watchdog to digest.
		{"json-tool", `{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"status?"}],` +
			`"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]}`,
			`{"kind":"tool","text":"Checking.","tools":[{"name":"Bash","input":{"command":"git status --short %d"}}]}`},
	}
	cfgText := fmt.Sprintf(`
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: %s}]}
tenants:
  - {name: team-a, keys: [%s], budget: {turns: 100000000, dollars: 1000000}}
`, mock.URL, antKey, vkA)
	cfg, err := config.Parse([]byte(cfgText), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	// gatedFor puts a gate that no reply here matches on the tenant named:
	// team-a's turns are then checked at their stop and their reply kept;
	// another tenant's gate must cost team-a nothing.
	gated := func(b *testing.B, tenant string) (*config.Config, *approvals.Service) {
		c, err := config.Parse([]byte(cfgText+fmt.Sprintf(`
gates:
  - {name: g, when: 'tool.name == "Bash"', tenants: [%s], approvers: {roles: [secops], quorum: 1}}
`, tenant)), func(string) string { return "" })
		if err != nil {
			b.Fatal(err)
		}
		gs, err := approvals.Compile(c.Gates)
		if err != nil {
			b.Fatal(err)
		}
		return c, approvals.NewService(approvals.ServiceOptions{Store: memory.NewApprovals(memory.ApprovalsOptions{}), Gates: gs,
			Logger: slog.New(slog.DiscardHandler)})
	}
	gatedProxy := func(b *testing.B, tenant string) http.Handler {
		c, svc := gated(b, tenant)
		st := memory.New(memory.Options{})
		b.Cleanup(func() { _ = st.Close() })
		tel, err := telemetry.New(context.Background(), telemetry.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
		px, err := proxy.New(proxy.Options{Config: c, Store: st, Ledger: memory.NewLedger(nil), Telemetry: tel, Approvals: svc})
		if err != nil {
			b.Fatal(err)
		}
		r := chi.NewRouter()
		px.Routes(r)
		return r
	}
	watched, err := config.Parse([]byte(cfgText+"watchdog: {enabled: true}\n"), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	gatekeeperOn := func(b *testing.B, cfg *config.Config, st trajectory.Store, traced bool) http.Handler {
		// Metrics are always on, as in serve; traced adds a span per turn,
		// batched to an in-memory exporter.
		o := telemetry.Options{}
		if traced {
			o.SpanExporter = tracetest.NewInMemoryExporter()
		}
		tel, err := telemetry.New(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
		px, err := proxy.New(proxy.Options{Config: cfg, Store: st, Ledger: memory.NewLedger(nil), Telemetry: tel})
		if err != nil {
			b.Fatal(err)
		}
		// Closed before the store and its client (cleanups run last
		// first): on Redis it writes the settles still waiting.
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			px.Close(ctx)
		})
		r := chi.NewRouter()
		px.Routes(r)
		return r
	}
	gatekeeper := func(b *testing.B, st trajectory.Store, traced bool) http.Handler {
		return gatekeeperOn(b, cfg, st, traced)
	}
	// onRedis is gatekeeper on a Redis store of its own, with the round
	// trips counted, and settles written behind replies for window.
	onRedis := func(b *testing.B, window time.Duration) (http.Handler, *redistest.RoundTrips) {
		srv := redistest.StartServer(b)
		opt, err := goredis.ParseURL(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		client := goredis.NewClient(opt)
		b.Cleanup(func() { _ = client.Close() })
		rt := &redistest.RoundTrips{}
		client.AddHook(rt)
		st, err := redisstore.Open(context.Background(), redisstore.Options{Client: client})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		rc := *cfg
		rc.Store.Kind, rc.Store.RedisURL, rc.Store.SettleWindow = config.StoreRedis, srv.URL, config.Duration(window)
		return gatekeeperOn(b, &rc, st, false), rt
	}
	target, _ := url.Parse(mock.URL)
	cases := []struct {
		name string
		path string // %d is the client's number
		make func(b *testing.B) (http.Handler, *redistest.RoundTrips)
	}{
		{"bare", "/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			rp := httputil.NewSingleHostReverseProxy(target)
			// The same connection reuse as gatekeeper's own transport.
			rp.Transport = &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256}
			return rp, nil
		}},
		{"memory", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			st := memory.New(memory.Options{})
			b.Cleanup(func() { _ = st.Close() })
			return gatekeeper(b, st, false), nil
		}},
		{"memory-watchdog", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			// The loop watchdog on: it reads every reply's calls and
			// every request's results; none of these turns loops.
			st := memory.New(memory.Options{})
			b.Cleanup(func() { _ = st.Close() })
			return gatekeeperOn(b, watched, st, false), nil
		}},
		{"memory-traced", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			st := memory.New(memory.Options{})
			b.Cleanup(func() { _ = st.Close() })
			return gatekeeper(b, st, true), nil
		}},
		{"memory-gates-elsewhere", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			return gatedProxy(b, "team-z"), nil
		}},
		{"memory-gated", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			return gatedProxy(b, "team-a"), nil
		}},
		// redis writes settles behind their replies (store.settle_window,
		// its default); redis-inline writes each before the reply ends,
		// as settle_window: 0 does.
		{"redis", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			return onRedis(b, config.DefaultSettleWindow)
		}},
		{"redis-inline", "/t/bench-%d/anthropic/v1/messages", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			return onRedis(b, 0)
		}},
	}
	for _, sh := range shapes {
		for _, c := range cases {
			b.Run(sh.name+"/"+c.name, func(b *testing.B) { benchTurns(b, c.make, c.path, sh.body, sh.spec) })
		}
	}
}

func benchTurns(b *testing.B, mk func(b *testing.B) (http.Handler, *redistest.RoundTrips), path, body, spec string) {
	h, rt := mk(b)
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{}).DialContext}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var clients, failed, turns atomic.Int64
	var base int64
	// Enough clients in flight that throughput, not one client's latency,
	// is measured.
	b.SetParallelism(8)
	b.ResetTimer()
	if rt != nil {
		base = rt.Load()
	}
	cpu0, cpuOK := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		p := path
		if strings.Contains(p, "%d") {
			p = fmt.Sprintf(p, clients.Add(1))
		}
		for pb.Next() {
			req, _ := http.NewRequest("POST", srv.URL+p, strings.NewReader(body))
			req.Header.Set("x-api-key", vkA)
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Set("content-type", "application/json")
			if strings.Contains(spec, "%d") {
				req.Header.Set("X-Mock-Turn", fmt.Sprintf(spec, turns.Add(1)))
			} else {
				req.Header.Set("X-Mock-Turn", spec)
			}
			// gatekeeper asks the provider for identity encoding on turns;
			// the bare proxy must not pay for gzip instead.
			req.Header.Set("Accept-Encoding", "identity")
			resp, err := hc.Do(req)
			if err != nil {
				failed.Add(1)
				continue
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	if cpu1, ok := cpuTime(); ok && cpuOK {
		// The process's CPU per turn (client, mock and proxy alike): on a
		// shared machine it moves far less than the time per turn.
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/turn")
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d turns failed", n, b.N)
	}
	if rt != nil {
		b.ReportMetric(float64(rt.Load()-base)/float64(b.N), "rtt/turn")
	}
}
