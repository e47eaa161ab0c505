package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

const (
	opToken   = "operator-token-0123456789"
	apprToken = "approver-token-0123456789"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: k, key: sk-x}]}
tenants:
  - {name: team-a, keys: [vk-a-0123456789], budget: {turns: 50, dollars: 5}}
  - {name: team-b, keys: [vk-b-0123456789]}
admin:
  tokens:
    - {name: alice, token: `+opToken+`, roles: [operator]}
    - {name: bob, token: `+apprToken+`, roles: [approver]}
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// setup serves the admin API on a memory store, which also carries its
// control signals.
func setup(t *testing.T) (string, *memory.Store) {
	t.Helper()
	st := memory.New(memory.Options{})
	r := chi.NewRouter()
	now := func() time.Time { return time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC) }
	admin.New(testConfig(t), st, nil, now, admin.WithSignals(st)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, st
}

func call(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, url, err)
	}
	return resp.StatusCode, out
}

func TestAdminAPI(t *testing.T) {
	base, st := setup(t)
	ctx := context.Background()
	cases := []struct {
		name, method, path, token, body string
		status                          int
		check                           func(t *testing.T, out map[string]any)
	}{
		{name: "no token", method: "GET", path: "/admin/v1/trajectories", status: 401},
		{name: "wrong token", method: "GET", path: "/admin/v1/trajectories", token: "nope-nope-nope-nope", status: 401},
		{name: "virtual key is not an admin token", method: "GET", path: "/admin/v1/trajectories", token: "vk-a-0123456789", status: 401},
		{name: "create needs operator", method: "POST", path: "/admin/v1/trajectories", token: apprToken,
			body: `{"id":"run-1","tenant":"team-a"}`, status: 403},
		{name: "create with tenant defaults", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"id":"run-1","tenant":"team-a"}`, status: 201, check: func(t *testing.T, out map[string]any) {
				b := out["budget"].(map[string]any)
				if out["id"] != "run-1" || out["state"] != "READY" || b["turns"] != 50.0 || b["dollars"] != 5.0 {
					t.Errorf("created %v", out)
				}
				if out["parent_id"] != nil || out["exit_reason"] != nil {
					t.Errorf("nulls expected: %v", out)
				}
			}},
		{name: "create with budget", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"id":"run-2","tenant":"team-a","budget":{"turns":3,"tokens":0,"wall_clock_s":60,"dollars":0.5}}`, status: 201,
			check: func(t *testing.T, out map[string]any) {
				if b := out["budget"].(map[string]any); b["turns"] != 3.0 || b["wall_clock_s"] != 60.0 {
					t.Errorf("budget %v", b)
				}
			}},
		{name: "create child", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"id":"run-2.a","tenant":"team-a","parent_id":"run-2"}`, status: 201},
		{name: "child of another tenant's parent", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"id":"run-3","tenant":"team-b","parent_id":"run-2"}`, status: 400},
		{name: "duplicate id", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"id":"run-1","tenant":"team-a"}`, status: 409},
		{name: "unknown tenant", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"tenant":"nobody"}`, status: 400},
		{name: "unknown field", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"tenant":"team-a","budgets":{}}`, status: 400},
		{name: "negative budget", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"tenant":"team-a","budget":{"dollars":-1}}`, status: 400},
		{name: "bad id", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"id":"a/b","tenant":"team-a"}`, status: 400},
		{name: "generated id", method: "POST", path: "/admin/v1/trajectories", token: opToken,
			body: `{"tenant":"team-b"}`, status: 201, check: func(t *testing.T, out map[string]any) {
				if id, _ := out["id"].(string); !strings.HasPrefix(id, "run-") {
					t.Errorf("generated id %q", id)
				}
			}},
		{name: "show with children", method: "GET", path: "/admin/v1/trajectories/run-2", token: apprToken, status: 200,
			check: func(t *testing.T, out map[string]any) {
				if ch := out["children"].([]any); len(ch) != 1 || ch[0] != "run-2/run-2.a" {
					t.Errorf("children %v", out["children"])
				}
			}},
		{name: "show missing", method: "GET", path: "/admin/v1/trajectories/nope", token: opToken, status: 404},
		{name: "events", method: "GET", path: "/admin/v1/trajectories/run-1/events", token: opToken, status: 200,
			check: func(t *testing.T, out map[string]any) {
				evs := out["events"].([]any)
				if len(evs) != 1 || evs[0].(map[string]any)["type"] != "created" {
					t.Errorf("events %v", evs)
				}
			}},
		{name: "list by tenant", method: "GET", path: "/admin/v1/trajectories?tenant=team-a", token: opToken, status: 200,
			check: func(t *testing.T, out map[string]any) {
				if n := len(out["trajectories"].([]any)); n != 3 {
					t.Errorf("%d team-a records", n)
				}
			}},
		{name: "list bad state", method: "GET", path: "/admin/v1/trajectories?state=SLEEPING", token: opToken, status: 400},
		{name: "list bad limit", method: "GET", path: "/admin/v1/trajectories?limit=100000", token: opToken, status: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out := call(t, tc.method, base+tc.path, tc.token, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, out)
			}
			if status >= 400 {
				e, _ := out["error"].(map[string]any)
				if e == nil || e["message"] == "" || e["type"] == "" {
					t.Fatalf("error body %v", out)
				}
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
	// A child id holds a slash; it is reachable as the rest of the path.
	child := trajectory.New("run-1/3f9a", "team-a", time.Now())
	child.ParentID = "run-1"
	if err := st.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/admin/v1/trajectories/run-1/3f9a", "/admin/v1/trajectories/run-1%2F3f9a"} {
		status, out := call(t, "GET", base+p, opToken, "")
		if status != 200 || out["id"] != "run-1/3f9a" {
			t.Errorf("GET %s: %d %v", p, status, out)
		}
	}
	status, out := call(t, "GET", base+"/admin/v1/trajectories?state=READY&min_budget_used=0.5", opToken, "")
	if status != 200 || len(out["trajectories"].([]any)) != 0 {
		t.Errorf("min_budget_used filter: %d %v", status, out)
	}
}
