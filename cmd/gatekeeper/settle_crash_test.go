package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

// settleConfig is a replica's config with settles written behind replies
// for window, long enough that a test can stop the process with settles
// still waiting.
func settleConfig(t *testing.T, redisURL, mockURL string, window time.Duration) string {
	t.Helper()
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: {kind: redis, redis_url: %q, heartbeat: 10s, settle_window: %s}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - {name: fleet, keys: [%s], budget: {turns: 1000, dollars: 100}}
log: {level: info, format: json}
`, redisURL, window, mockURL, replicaKey)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// settleTurn sends one non-streamed turn on run through r.
func settleTurn(ctx context.Context, t *testing.T, r *replica, run string) {
	t.Helper()
	body := `{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"status?"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", r.base+"/t/"+run+"/anthropic/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", replicaKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Type string `json:"type"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Type != "message" {
		t.Fatalf("turn on %s: %d %v %+v", run, resp.StatusCode, err, out)
	}
}

// settleReader reads what Redis holds, with a store of its own.
func settleReader(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.Open(context.Background(), redisstore.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// turnCharge is what a turn event says a call was charged.
type turnCharge struct {
	Call      string  `json:"call"`
	Estimated bool    `json:"estimated"`
	Dollars   float64 `json:"dollars"`
	Detail    string  `json:"detail"`
}

// turnCharges is a record's turn events by call id.
func turnCharges(ctx context.Context, t *testing.T, st *redisstore.Store, id string) map[string][]turnCharge {
	t.Helper()
	evs, err := st.Events(ctx, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]turnCharge{}
	for _, ev := range evs {
		if ev.Type != trajectory.EventTurn {
			continue
		}
		var c turnCharge
		if err := json.Unmarshal(ev.Data, &c); err != nil || c.Call == "" {
			t.Fatalf("turn event of %s: %v %s", id, err, ev.Data)
		}
		out[c.Call] = append(out[c.Call], c)
	}
	return out
}

// TestSettleBehindCrash kills a gatekeeper process (SIGKILL) while the
// settles of its last turns wait behind their replies, and restarts it
// under the same replica name: every call is charged once, either by its
// own settle (those an admission carried before the kill) or by the
// restart's sweep, which reclaims it as estimated with an event; nothing
// stays reserved. A graceful stop, by contrast, writes the waiting
// settles before the process exits.
func TestSettleBehindCrash(t *testing.T) {
	srv := redistest.StartServer(t)
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := settleReader(t, srv.URL)
	cfg := settleConfig(t, srv.URL, mock.URL, 8*time.Second)

	// Runs of two turns: the first turn's settle rides the second's
	// admission, the second's waits.
	const runs = 4
	a := startReplica(t, cfg, "GATEKEEPER_REPLICA=crash-a")
	for i := range runs {
		settleTurn(ctx, t, a, fmt.Sprintf("crash-%d", i))
		settleTurn(ctx, t, a, fmt.Sprintf("crash-%d", i))
	}
	for i := range runs {
		rec, err := st.Get(ctx, fmt.Sprintf("crash-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != trajectory.CallingModel || rec.Turns != 1 {
			t.Fatalf("before the kill crash-%d is %s with %d turns; want its first turn settled and its second's settle waiting", i, rec.State, rec.Turns)
		}
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()

	// The restart's first sweep reclaims what A left in flight.
	startReplica(t, cfg, "GATEKEEPER_REPLICA=crash-a")
	for i := range runs {
		id := fmt.Sprintf("crash-%d", i)
		var rec *trajectory.Record
		for range 200 {
			var err error
			if rec, err = st.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			if rec.State == trajectory.Ready {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if rec.State != trajectory.Ready || rec.Turns != 2 || rec.Reserved != (trajectory.Reservation{}) || rec.Call != "" {
			t.Fatalf("after the restart %s is %s with %d turns, reserved %+v, call %q; want READY, 2 turns, nothing reserved",
				id, rec.State, rec.Turns, rec.Reserved, rec.Call)
		}
		charges := turnCharges(ctx, t, st, id)
		if len(charges) != 2 {
			t.Fatalf("%s: %d calls charged, want 2: %+v", id, len(charges), charges)
		}
		settled, swept := 0, 0
		for call, cs := range charges {
			if len(cs) != 1 {
				t.Fatalf("%s: call %s charged %d times: %+v", id, call, len(cs), cs)
			}
			switch c := cs[0]; {
			case !c.Estimated && c.Dollars > 0:
				settled++
			case c.Estimated && strings.Contains(c.Detail, "call lost: its replica restarted"):
				swept++
			default:
				t.Fatalf("%s: call %s charged %+v", id, call, c)
			}
		}
		if settled != 1 || swept != 1 {
			t.Fatalf("%s: %d calls settled and %d reclaimed, want 1 and 1", id, settled, swept)
		}
		if rec.Spend.Dollars <= 0 {
			t.Fatalf("%s: spend %+v, want both charges in it", id, rec.Spend)
		}
	}

	// A graceful stop writes the settles still waiting.
	b := startReplica(t, cfg, "GATEKEEPER_REPLICA=crash-b")
	settleTurn(ctx, t, b, "graceful-0")
	if rec, err := st.Get(ctx, "graceful-0"); err != nil || rec.State != trajectory.CallingModel {
		t.Fatalf("before the stop graceful-0 is %+v, %v; want its settle waiting", rec, err)
	}
	if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait()
	rec, err := st.Get(ctx, "graceful-0")
	if err != nil {
		t.Fatal(err)
	}
	charges := turnCharges(ctx, t, st, "graceful-0")
	if rec.State != trajectory.Ready || rec.Turns != 1 || rec.Reserved != (trajectory.Reservation{}) || len(charges) != 1 {
		t.Fatalf("after a graceful stop graceful-0 is %s with %d turns, reserved %+v, charges %+v; want its settle written",
			rec.State, rec.Turns, rec.Reserved, charges)
	}
	for _, cs := range charges {
		if len(cs) != 1 || cs[0].Estimated {
			t.Fatalf("graceful-0 charged %+v, want its own settle once", cs)
		}
	}
}
