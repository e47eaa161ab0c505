package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// TestCreateKeepsCreatorAndMaxChildren: a record created through the
// admin API keeps the operator who created it, and a child counts toward
// its parent's limits.max_children: past it, 409 conflict_error naming
// the limit, and nothing created.
func TestCreateKeepsCreatorAndMaxChildren(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.MaxChildren = 2
	st := memory.New(memory.Options{})
	r := chi.NewRouter()
	admin.New(cfg, st, nil, nil).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	create := func(body string) (int, map[string]any) {
		t.Helper()
		return call(t, "POST", srv.URL+"/admin/v1/trajectories", opToken, body)
	}
	code, out := create(`{"id":"wide","tenant":"team-a"}`)
	if by, _ := out["created_by"].(map[string]any); code != http.StatusCreated || by["kind"] != "operator" || by["name"] != "alice" {
		t.Fatalf("create: %d %v, want created_by operator alice", code, out)
	}
	for _, id := range []string{"a", "b"} {
		if code, out := create(`{"id":"` + id + `","tenant":"team-a","parent_id":"wide"}`); code != http.StatusCreated {
			t.Fatalf("child %s under the limit: %d %v", id, code, out)
		}
	}
	code, out = create(`{"id":"c","tenant":"team-a","parent_id":"wide"}`)
	e, _ := out["error"].(map[string]any)
	if msg, _ := e["message"].(string); code != http.StatusConflict || e["type"] != "conflict_error" || !strings.Contains(msg, "limits.max_children") {
		t.Fatalf("a third child under max_children 2: %d %v, want 409 conflict_error naming limits.max_children", code, out)
	}
	if _, err := st.Get(t.Context(), "wide/c"); err == nil {
		t.Fatal("the refused child was created")
	}
}

// failingCreates is a store whose Create fails as a store that cannot be
// reached.
type failingCreates struct{ *memory.Store }

func (failingCreates) Create(context.Context, *trajectory.Record, ...trajectory.Event) error {
	return trajectory.ErrUnavailable
}

// TestCreateFailsWithoutLedger: a run whose record the store cannot
// create, on an API with no tenant ledger (its tenant's run limits set by
// default), is answered 503 api_error.
func TestCreateFailsWithoutLedger(t *testing.T) {
	cfg := testConfig(t)
	if cfg.Tenants[0].Limits.MaxLiveTrajectories == 0 {
		t.Fatal("the test needs a tenant with max_live_trajectories")
	}
	r := chi.NewRouter()
	admin.New(cfg, failingCreates{memory.New(memory.Options{})}, nil, nil).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	code, out := call(t, "POST", srv.URL+"/admin/v1/trajectories", opToken, `{"id":"run-1","tenant":"team-a"}`)
	if e, _ := out["error"].(map[string]any); code != http.StatusServiceUnavailable || e["type"] != "api_error" {
		t.Fatalf("create on a failing store: %d %v, want 503 api_error", code, out)
	}
}
