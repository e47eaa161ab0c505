package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

// upstreamWatch wraps the mock provider and reports when a turn's
// request context ends: the moment the provider sees its call aborted.
type upstreamWatch struct {
	h    http.Handler
	done chan time.Time
}

func (u *upstreamWatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.h.ServeHTTP(w, r)
	select {
	case u.done <- time.Now():
	default:
	}
}

// BenchmarkControlLatency measures, per trial, the time from an
// operator's cancel request to (a) the provider seeing its call aborted
// and (b) the agent's stream ending, with the stream served by the
// replica that got the request and by another replica sharing Redis.
// Run with -benchtime 200x for 200 trials.
func BenchmarkControlLatency(b *testing.B) {
	watch := &upstreamWatch{h: mockprovider.New(mockprovider.Options{}), done: make(chan time.Time, 1)}
	mock := httptest.NewServer(watch)
	b.Cleanup(mock.Close)
	cfgText := fmt.Sprintf(`
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: %s}]}
tenants:
  - {name: team-a, keys: [%s]}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
`, mock.URL, antKey, vkA, adminToken)
	cfg, err := config.Parse([]byte(cfgText), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	replica := func(b *testing.B, st trajectory.Store) string {
		px, err := proxy.New(proxy.Options{Config: cfg, Store: st, Ledger: memory.NewLedger(nil)})
		if err != nil {
			b.Fatal(err)
		}
		r := chi.NewRouter()
		admin.New(cfg, st, nil, nil, admin.WithSignals(st.(trajectory.Signals))).Routes(r)
		px.Routes(r)
		srv := httptest.NewServer(r)
		b.Cleanup(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			px.Close(ctx)
		})
		return srv.URL
	}
	b.Run("one-replica", func(b *testing.B) {
		st := memory.New(memory.Options{})
		gk := replica(b, st)
		controlTrials(b, gk, gk, watch.done)
	})
	b.Run("two-replicas", func(b *testing.B) {
		srv := redistest.StartServer(b)
		open := func() trajectory.Store {
			st, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			return st
		}
		a, bb := replica(b, open()), replica(b, open())
		controlTrials(b, a, bb, watch.done)
	})
}

func controlTrials(b *testing.B, streamVia, controlVia string, upstreamDone chan time.Time) {
	spec := `{"kind":"tool","event_delay":"20ms","tools":[{"name":"Bash","input":{"command":"` + strings.Repeat("x", 4000) + `"}}]}`
	var toAbort, toEnd []time.Duration
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("lat-%d-%d", time.Now().UnixNano(), i)
		resp := startTurn(b, streamVia, id, spec)
		buf := make([]byte, 512)
		if _, err := resp.Body.Read(buf); err != nil { // the stream has begun
			b.Fatal(err)
		}
		select {
		case <-upstreamDone: // a stale report of an earlier trial
		default:
		}
		start := time.Now()
		creq, _ := http.NewRequest("POST", controlVia+"/admin/v1/trajectories/"+id+"/cancel", nil)
		creq.Header.Set("Authorization", "Bearer "+adminToken)
		cresp, err := http.DefaultClient.Do(creq)
		if err != nil {
			b.Fatal(err)
		}
		cresp.Body.Close()
		if cresp.StatusCode != http.StatusAccepted {
			b.Fatalf("cancel: status %d", cresp.StatusCode)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		toEnd = append(toEnd, time.Since(start))
		select {
		case at := <-upstreamDone:
			toAbort = append(toAbort, at.Sub(start))
		case <-time.After(10 * time.Second):
			b.Fatal("the provider's call was not aborted")
		}
	}
	b.ReportMetric(pct(toAbort, 50), "abort-p50-ms")
	b.ReportMetric(pct(toAbort, 99), "abort-p99-ms")
	b.ReportMetric(pct(toEnd, 50), "end-p50-ms")
	b.ReportMetric(pct(toEnd, 99), "end-p99-ms")
}

// pct is the p-th percentile of ds in milliseconds.
// startTurn sends trajectory id's streamed Anthropic turn, scripted by
// spec, to the gatekeeper at base and returns its reply as it begins.
func startTurn(b *testing.B, base, id, spec string) *http.Response {
	req, err := http.NewRequest("POST", base+"/t/"+id+"/anthropic/v1/messages", strings.NewReader(anthropicReq(true, "clean up")))
	if err != nil {
		b.Fatal(err)
	}
	for j := 0; j+1 < len(anthropicHdr); j += 2 {
		req.Header.Set(anthropicHdr[j], anthropicHdr[j+1])
	}
	req.Header.Set("X-Mock-Turn", spec)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	return resp
}

func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return float64(s[max(i, 0)].Microseconds()) / 1000
}
