package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

// BenchmarkEscrowRelease measures, per held turn, the time from an
// approver's vote to the agent reading the first released byte of its
// held stream: the decision's store update and signal, the wake of the
// held request, the re-check and release, and the write. Memory stores on
// one replica, and Redis (records, approvals and signals) shared as
// replicas share it. Run with -benchtime 200x for 200 held turns.
func BenchmarkEscrowRelease(b *testing.B) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	b.Cleanup(mock.Close)
	cfgText := fmt.Sprintf(`
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: %s}]}
tenants:
  - {name: team-a, keys: [%s]}
gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf")'
    approvers: {roles: [secops], quorum: 1}
approvals:
  keepalive: 1s
`, mock.URL, antKey, vkA)
	cfg, err := config.Parse([]byte(cfgText), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	gates, err := approvals.Compile(cfg.Gates)
	if err != nil {
		b.Fatal(err)
	}
	replica := func(b *testing.B, st trajectory.Store, apst approvals.Store) (*approvals.Service, string) {
		svc := approvals.NewService(approvals.ServiceOptions{Store: apst, Gates: gates, Signals: st.(trajectory.Signals),
			Logger: slog.New(slog.DiscardHandler)})
		px, err := proxy.New(proxy.Options{Config: cfg, Store: st, Ledger: memory.NewLedger(nil), Approvals: svc})
		if err != nil {
			b.Fatal(err)
		}
		r := chi.NewRouter()
		px.Routes(r)
		srv := httptest.NewServer(r)
		b.Cleanup(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			px.Close(ctx)
			_ = svc.Close(ctx)
		})
		return svc, srv.URL
	}
	b.Run("memory", func(b *testing.B) {
		st := memory.New(memory.Options{})
		svc, gk := replica(b, st, memory.NewApprovals(memory.ApprovalsOptions{}))
		releaseTrials(b, svc, gk)
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.StartServer(b)
		client, err := redisstore.NewClient(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = client.Close() })
		st, err := redisstore.Open(context.Background(), redisstore.Options{Client: client})
		if err != nil {
			b.Fatal(err)
		}
		svc, gk := replica(b, st, redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client}))
		releaseTrials(b, svc, gk)
	})
}

func releaseTrials(b *testing.B, svc *approvals.Service, gk string) {
	spec := `{"kind":"tool","text":"Cleaning up.","tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}]}`
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("rel-%d-%d", time.Now().UnixNano(), i)
		resp := startTurn(b, gk, id, spec)
		rd := bufio.NewReader(resp.Body)
		// The hold's first keepalive (a message_delta without a stop)
		// comes as it opens, after the text.
		text := false
		for {
			ev, err := readEvent(rd)
			if err != nil {
				b.Fatalf("stream ended before the hold: %v", err)
			}
			text = text || strings.Contains(ev, "text_delta")
			if text && strings.Contains(ev, `"delta":{"stop_reason":null`) {
				break
			}
			if strings.Contains(ev, `"tool_use"`) {
				b.Fatal("the gated call was delivered")
			}
		}
		var apr *approvals.Request
		for n := 0; apr == nil && n < 1000; n++ {
			reqs, err := svc.Store().List(context.Background(), approvals.Filter{State: approvals.Pending, Trajectory: id, Limit: 1})
			if err != nil {
				b.Fatal(err)
			}
			if len(reqs) == 1 {
				apr = reqs[0]
			}
		}
		if apr == nil {
			b.Fatal("no pending request")
		}
		start := time.Now()
		if _, err := svc.Vote(context.Background(), apr.ID, approvals.Vote{Approver: "carol", Roles: []string{"secops"}, Approve: true, Via: approvals.ViaAdmin}); err != nil {
			b.Fatal(err)
		}
		for {
			ev, err := readEvent(rd)
			if err != nil {
				b.Fatalf("stream ended before the release: %v", err)
			}
			if !strings.Contains(ev, `"delta":{"stop_reason":null`) {
				lat = append(lat, time.Since(start))
				if !strings.Contains(ev, `"tool_use"`) {
					b.Fatalf("first released event is not the call: %s", ev)
				}
				break
			}
		}
		_, _ = io.Copy(io.Discard, rd)
		resp.Body.Close()
	}
	b.ReportMetric(pct(lat, 50), "release-p50-ms")
	b.ReportMetric(pct(lat, 99), "release-p99-ms")
	b.ReportMetric(pct(lat, 99)/50, "p99/target")
}
