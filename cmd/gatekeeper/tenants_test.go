package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/store/memory"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// TestTenantsCommand reads tenants' limits, spend and live runs through
// the admin API.
func TestTenantsCommand(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: k, key: sk-x}]}
tenants:
  - {name: team-a, keys: [vk-a-0123456789], limits: {dollars_per_day: 5, tokens_per_day: 100000, max_live_trajectories: 3}}
  - {name: team-b, keys: [vk-b-0123456789], trajectories: operators}
admin:
  tokens:
    - {name: alice, token: operator-token-0123456789, roles: [operator]}
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, ledger := memory.New(memory.Options{}), memory.NewLedger(nil)
	for _, id := range []string{"run-1", "run-2"} {
		if err := st.Create(ctx, trajectory.New(id, "team-a", time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if err := ledger.Settle(ctx, "team-a", "c1", tenant.Amount{Micros: 1_250_000, Tokens: 4200}); err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	admin.New(cfg, st, nil, nil, admin.WithLedger(ledger)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	env := func(k string) string {
		return map[string]string{"GATEKEEPER_URL": srv.URL, "GATEKEEPER_ADMIN_TOKEN": "operator-token-0123456789"}[k]
	}

	var out bytes.Buffer
	if err := run(ctx, []string{"tenants"}, env, &out, &out); err != nil {
		t.Fatalf("tenants: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two tenants:\n%s", out.String())
	}
	for _, want := range []string{"team-a", "agents", "2 / 3", "1.25 / 5.00", "4200 / 100000", "0 calls, $0.00"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("team-a's row lacks %q: %s", want, lines[1])
		}
	}
	if !strings.Contains(lines[2], "team-b") || !strings.Contains(lines[2], "operators") {
		t.Errorf("team-b's row: %s", lines[2])
	}

	out.Reset()
	if err := run(ctx, []string{"tenants", "team-a", "-json"}, env, &out, &out); err != nil {
		t.Fatalf("tenants team-a -json: %v\n%s", err, out.String())
	}
	var v struct {
		Name  string `json:"name"`
		Spend struct {
			Day struct {
				Dollars float64 `json:"dollars"`
				Tokens  int64   `json:"tokens"`
			} `json:"day"`
		} `json:"spend"`
		LiveRuns int `json:"live_runs"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if v.Name != "team-a" || v.Spend.Day.Dollars != 1.25 || v.Spend.Day.Tokens != 4200 || v.LiveRuns != 2 {
		t.Errorf("team-a: %+v", v)
	}

	out.Reset()
	if err := run(ctx, []string{"tenants", "team-z"}, env, &out, &out); err == nil || !strings.Contains(err.Error(), `no tenant "team-z"`) {
		t.Errorf("unknown tenant: %v", err)
	}
}
