package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/ratelimit"
	"gatekeeper/store/memory"
	"gatekeeper/telemetry"
)

// BenchmarkTurnRateLimit measures what admission against a provider key's
// limits costs a turn when the key is not saturated: the same smallest
// non-streamed turn as BenchmarkTurnPath/json, through gatekeeper on the
// memory store, with a key without limits (no scheduler), with limits far
// above the load in memory, and with the same limits in Redis (shared by
// replicas; rtt/turn counts the rate-limit round trips).
func BenchmarkTurnRateLimit(b *testing.B) {
	const (
		body = `{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"status?"}]}`
		spec = `{"kind":"text","text":"all green"}`
		// rpm is far above what the benchmark sends, for the key's limit
		// and for the one the mock advertises: gatekeeper follows the
		// provider's rate-limit headers, and with the mock's default
		// (mockprovider.DefaultRequestsPerMinute) they report the minute
		// spent after that many turns, where every later turn would wait
		// out max_wait.
		rpm = 1_000_000_000
	)
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{RequestsPerMinute: rpm}))
	b.Cleanup(mock.Close)
	gatekeeper := func(b *testing.B, limits string, buckets ratelimit.Buckets) http.Handler {
		doc := fmt.Sprintf(`
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: %s%s}]}
tenants:
  - {name: team-a, keys: [%s], budget: {turns: 100000000, dollars: 1000000}}
`, mock.URL, antKey, limits, vkA)
		cfg, err := config.Parse([]byte(doc), func(string) string { return "" })
		if err != nil {
			b.Fatal(err)
		}
		tel, err := telemetry.New(context.Background(), telemetry.Options{})
		if err != nil {
			b.Fatal(err)
		}
		st := memory.New(memory.Options{})
		px, err := proxy.New(proxy.Options{Config: cfg, Store: st, Ledger: memory.NewLedger(nil), Telemetry: tel, Buckets: buckets})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			px.Close(context.Background())
			_ = tel.Shutdown(context.Background())
			_ = st.Close()
		})
		r := chi.NewRouter()
		px.Routes(r)
		return r
	}
	// Far above what the benchmark sends: the key never saturates.
	unsaturated := fmt.Sprintf(", rpm: %d, input_tpm: 1000000000000, output_tpm: 1000000000000", rpm)
	cases := []struct {
		name string
		make func(b *testing.B) (http.Handler, *redistest.RoundTrips)
	}{
		{"unlimited", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			return gatekeeper(b, "", nil), nil
		}},
		{"limited-memory", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			return gatekeeper(b, unsaturated, nil), nil
		}},
		{"limited-redis", func(b *testing.B) (http.Handler, *redistest.RoundTrips) {
			srv := redistest.StartServer(b)
			opt, err := goredis.ParseURL(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			client := goredis.NewClient(opt)
			b.Cleanup(func() { _ = client.Close() })
			rt := &redistest.RoundTrips{}
			client.AddHook(rt)
			return gatekeeper(b, unsaturated, ratelimit.NewRedis(client, "gk:")), rt
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { benchTurns(b, c.make, "/t/bench-%d/anthropic/v1/messages", body, spec) })
	}
}
