package admin_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// attribSetup is an admin API over runs of two people and of virtual
// keys in two tenants: ada (team-a, groups platform and sre) with two
// runs and a subagent, bob (team-b, group sre) with one, and one virtual
// key run per tenant.
func attribSetup(t *testing.T) string {
	t.Helper()
	cfg := testConfig(t)
	cfg.Admin.Tokens = append(cfg.Admin.Tokens,
		config.AdminToken{Name: "ann", Token: annToken, Roles: []string{"operator"}, Tenants: []string{"team-a"}},
		config.AdminToken{Name: "root", Token: rootToken, Roles: []string{"operator"}})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ada := &trajectory.Person{Subject: "sub-ada", Name: "Ada", Email: "ada@example.com", Groups: []string{"platform", "sre"}}
	bob := &trajectory.Person{Subject: "sub-bob", Name: "Bob", Groups: []string{"sre"}}
	now := time.Now()
	for _, r := range []struct {
		id, tenant string
		p          *trajectory.Person
		dollars    float64
		parent     string
	}{
		{"ada-1", "team-a", ada, 1.25, ""},
		{"ada-2", "team-a", ada, 0.5, ""},
		{"ada-1/kid", "team-a", ada, 0.25, "ada-1"}, // its spend is in ada-1's already
		{"bob-1", "team-b", bob, 2, ""},
		{"vk-a", "team-a", nil, 0.125, ""},
		{"vk-b", "team-b", nil, 4, ""},
	} {
		rec := trajectory.New(r.id, r.tenant, now)
		rec.Person, rec.ParentID = r.p.Clone(), r.parent
		rec.Spend.Turns, rec.Spend.Dollars = 2, r.dollars
		if err := st.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	r := chi.NewRouter()
	admin.New(cfg, st, nil, nil).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestListByPerson: ?person= keeps the runs the person started, by their
// email or subject, within the token's tenants.
func TestListByPerson(t *testing.T) {
	base := attribSetup(t)
	ids := func(token, query string) map[string]bool {
		t.Helper()
		code, out := call(t, "GET", base+"/admin/v1/trajectories?"+query, token, "")
		if code != 200 {
			t.Fatalf("%s: %d %v", query, code, out)
		}
		got := map[string]bool{}
		for _, r := range out["trajectories"].([]any) {
			got[r.(map[string]any)["id"].(string)] = true
		}
		return got
	}
	for _, tc := range []struct {
		name, token, query string
		want               []string
	}{
		{"by email", rootToken, "person=ada%40example.com", []string{"ada-1", "ada-2", "ada-1/kid"}},
		{"by subject", rootToken, "person=sub-bob", []string{"bob-1"}},
		{"by name without email", rootToken, "person=Bob", []string{"bob-1"}},
		{"a name behind an email is not a label", rootToken, "person=Ada", nil},
		{"another tenant's person is absent", annToken, "person=sub-bob", nil},
		{"within scope", annToken, "person=sub-ada&state=READY", []string{"ada-1", "ada-2", "ada-1/kid"}},
		{"no filter", annToken, "", []string{"ada-1", "ada-2", "ada-1/kid", "vk-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ids(tc.token, tc.query)
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for _, id := range tc.want {
				if !got[id] {
					t.Errorf("missing %s in %v", id, got)
				}
			}
		})
	}
	long := make([]byte, 1025)
	for i := range long {
		long[i] = 'a'
	}
	if code, _ := call(t, "GET", base+"/admin/v1/trajectories?person="+string(long), rootToken, ""); code != 400 {
		t.Errorf("a 1025-byte person: %d, want 400", code)
	}
}

// TestSpendReportByPersonAndGroup: by=person and by=group attribute each
// run's dollars, runs of virtual keys apart, within the token's tenants.
func TestSpendReportByPersonAndGroup(t *testing.T) {
	base := attribSetup(t)
	rows := func(token, by string) (map[string]float64, float64) {
		t.Helper()
		code, out := call(t, "GET", base+"/admin/v1/reports/costs?by="+url.QueryEscape(by), token, "")
		if code != 200 {
			t.Fatalf("by %s: %d %v", by, code, out)
		}
		got := map[string]float64{}
		for _, r := range out["rows"].([]any) {
			row := r.(map[string]any)
			got[row["kind"].(string)+":"+row["label"].(string)] = row["dollars"].(float64)
		}
		return got, out["dollars"].(float64)
	}
	check := func(name string, got map[string]float64, total float64, want map[string]float64, wantTotal float64) {
		t.Helper()
		if total != wantTotal {
			t.Errorf("%s: total $%v, want $%v", name, total, wantTotal)
		}
		if len(got) != len(want) {
			t.Errorf("%s: rows %v, want %v", name, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = $%v, want $%v (rows %v)", name, k, got[k], v, got)
			}
		}
	}
	got, total := rows(rootToken, "person")
	check("root by person", got, total, map[string]float64{"person:ada@example.com": 1.75, "person:Bob": 2,
		"virtual_key:(virtual key: team-a)": 0.125, "virtual_key:(virtual key: team-b)": 4}, 7.875)
	got, total = rows(rootToken, "group")
	check("root by group", got, total, map[string]float64{"group:platform": 1.75, "group:sre": 3.75,
		"virtual_key:(virtual key: team-a)": 0.125, "virtual_key:(virtual key: team-b)": 4}, 7.875)
	got, total = rows(annToken, "group")
	check("team-a's by group", got, total, map[string]float64{"group:platform": 1.75, "group:sre": 1.75,
		"virtual_key:(virtual key: team-a)": 0.125}, 1.875)
	if code, _ := call(t, "GET", base+"/admin/v1/reports/costs?by=tenant", rootToken, ""); code != 400 {
		t.Errorf("by=tenant: %d, want 400", code)
	}
}
