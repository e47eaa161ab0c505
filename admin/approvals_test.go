package admin_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/store/memory"
)

const (
	secopsToken = "secops-token-0123456789"
	sreToken    = "sre-token-01234567890123"
)

// approvalsSetup serves the admin API with an approvals Service over a
// memory store holding one pending request of gate "destructive-shell"
// (roles secops and sre, quorum 2, distinct roles), and returns its id.
func approvalsSetup(t *testing.T) (base, id string, st *memory.Approvals) {
	t.Helper()
	call, err := approvals.Canonical("Bash", []byte(`{"command":"kubectl delete ns prod"}`))
	if err != nil {
		t.Fatal(err)
	}
	return approvalsSetupWith(t, &approvals.Request{Call: call, Digest: call.Digest(), Gate: "destructive-shell", Roles: []string{"secops", "sre"},
		Quorum: 2, DistinctRoles: true})
}

// approvalsSetupWith is approvalsSetup holding req.
func approvalsSetupWith(t *testing.T, req *approvals.Request) (base, id string, st *memory.Approvals) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Admin.Tokens = append(cfg.Admin.Tokens,
		config.AdminToken{Name: "carol", Token: secopsToken, Roles: []string{"approver:secops"}},
		config.AdminToken{Name: "erin", Token: sreToken, Roles: []string{"operator", "approver:sre"}})
	st = memory.NewApprovals(memory.ApprovalsOptions{})
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	svc := approvals.NewService(approvals.ServiceOptions{Store: st, Clock: func() time.Time { return now }})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	req.ExpiresAt = now.Add(15 * time.Minute)
	if _, err := svc.Open(context.Background(), &approvals.Hold{Trajectory: "run-1", Root: "run-1", Key: "k"}, []*approvals.Request{req}); err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	admin.New(cfg, memory.New(memory.Options{}), nil, func() time.Time { return now }, admin.WithApprovals(svc)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, req.ID, st
}

func TestApprovalsAPI(t *testing.T) {
	base, id, st := approvalsSetup(t)
	u := base + "/admin/v1/approvals"
	steps := []struct {
		name, method, path, token, body string
		status                          int
		check                           func(t *testing.T, out map[string]any)
	}{
		{name: "no token", method: "GET", path: "", status: 401},
		{name: "list pending", method: "GET", path: "?state=pending", token: opToken, status: 200, check: func(t *testing.T, out map[string]any) {
			list := out["approvals"].([]any)
			if len(list) != 1 || list[0].(map[string]any)["id"] != id {
				t.Errorf("list = %v", list)
			}
		}},
		{name: "list by trajectory", method: "GET", path: "?trajectory=run-2", token: opToken, status: 200, check: func(t *testing.T, out map[string]any) {
			if list := out["approvals"].([]any); len(list) != 0 {
				t.Errorf("list = %v", list)
			}
		}},
		{name: "list bad state", method: "GET", path: "?state=maybe", token: opToken, status: 400},
		{name: "list bad limit", method: "GET", path: "?limit=0", token: opToken, status: 400},
		{name: "show", method: "GET", path: "/" + id, token: apprToken, status: 200, check: func(t *testing.T, out map[string]any) {
			if out["state"] != "pending" || out["gate"] != "destructive-shell" || out["call"].(map[string]any)["name"] != "Bash" {
				t.Errorf("show = %v", out)
			}
		}},
		{name: "show missing", method: "GET", path: "/apr_none", token: opToken, status: 404},
		{name: "operator without the gate's role", method: "POST", path: "/" + id + "/approve", token: opToken, status: 403},
		{name: "plain approver without the gate's role", method: "POST", path: "/" + id + "/approve", token: apprToken, status: 403},
		{name: "unknown verb", method: "POST", path: "/" + id + "/maybe", token: secopsToken, status: 404},
		{name: "bad body", method: "POST", path: "/" + id + "/approve", token: secopsToken, body: `{"why":"x"}`, status: 400},
		{name: "vote missing request", method: "POST", path: "/apr_none/approve", token: secopsToken, status: 404},
		{name: "secops approves", method: "POST", path: "/" + id + "/approve", token: secopsToken, body: `{"reason":"checked"}`, status: 200,
			check: func(t *testing.T, out map[string]any) {
				votes := out["votes"].([]any)
				v := votes[0].(map[string]any)
				if out["state"] != "pending" || len(votes) != 1 || v["approver"] != "carol" || v["via"] != "admin" || v["reason"] != "checked" {
					t.Errorf("after one vote: %v", out)
				}
			}},
		{name: "secops again", method: "POST", path: "/" + id + "/approve", token: secopsToken, status: 409},
		{name: "sre approves", method: "POST", path: "/" + id + "/approve", token: sreToken, body: ``, status: 200,
			check: func(t *testing.T, out map[string]any) {
				if out["state"] != "approved" {
					t.Errorf("after two distinct roles: %v", out)
				}
			}},
		{name: "vote after the decision", method: "POST", path: "/" + id + "/deny", token: sreToken, status: 409},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			status, out := call(t, s.method, u+s.path, s.token, s.body)
			if status != s.status {
				t.Fatalf("status %d, want %d: %v", status, s.status, out)
			}
			if status >= 400 {
				if e, ok := out["error"].(map[string]any); !ok || e["type"] == "" || e["message"] == "" {
					t.Errorf("error body %v", out)
				}
			}
			if s.check != nil {
				s.check(t, out)
			}
		})
	}
	r, err := st.Get(context.Background(), id)
	if err != nil || r.State != approvals.Approved || len(r.Votes) != 2 {
		t.Errorf("stored: %+v, %v", r, err)
	}
}

// A 5,000-character call with the dangerous part at the end: the admin
// API's preview shows that part and states the elision, the matched part
// is named, the whole call is there, and invisible characters are escaped
// in the preview.
func TestApprovalsAPILongCallPreview(t *testing.T) {
	const when = `tool.name == "Bash" && tool.input.command.matches("rm -rf|DROP TABLE|kubectl delete")`
	gates, err := approvals.Compile([]config.Gate{{Name: "destructive-shell", When: when, Approvers: config.Approvers{Roles: []string{"secops"}, Quorum: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	gate, _ := gates.Lookup("destructive-shell")
	cmd := "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /\u202e"
	args, _ := json.Marshal(map[string]string{"command": cmd})
	c, err := approvals.Canonical("Bash", args)
	if err != nil {
		t.Fatal(err)
	}
	base, id, _ := approvalsSetupWith(t, gate.Request("", c, when, time.Now()))
	code, out := call(t, "GET", base+"/admin/v1/approvals/"+id, opToken, "")
	if code != 200 {
		t.Fatalf("GET: %d %v", code, out)
	}
	preview, _ := out["preview"].(string)
	if !strings.HasPrefix(preview, `Bash {"command":"echo harmless-aaa`) || !strings.HasSuffix(preview, `aaa; rm -rf /\u202e"}`) ||
		!strings.Contains(preview, " characters elided]… ") || utf8.RuneCountInString(preview) > approvals.MaxPreview {
		t.Errorf("preview = %q", preview)
	}
	matched, _ := out["matched"].([]any)
	if len(matched) != 1 || matched[0].(map[string]any)["text"] != "rm -rf" || matched[0].(map[string]any)["after"] != ` /\u202e` {
		t.Errorf("matched = %v", out["matched"])
	}
	if out["invisible_chars"] != float64(1) {
		t.Errorf("invisible_chars = %v", out["invisible_chars"])
	}
	if input, _ := out["call"].(map[string]any)["input"].(map[string]any); input["command"] != cmd {
		t.Error("the admin API does not hold the whole call")
	}
}

func TestApprovalsNotConfigured(t *testing.T) {
	base, _ := setup(t)
	for _, p := range []string{"GET /admin/v1/approvals", "GET /admin/v1/approvals/apr_1", "POST /admin/v1/approvals/apr_1/approve"} {
		method, path, _ := strings.Cut(p, " ")
		status, out := call(t, method, base+path, opToken, "")
		if status != 404 || out["error"].(map[string]any)["message"] != "approvals are not configured" {
			t.Errorf("%s: %d %v", p, status, out)
		}
	}
}

// An operator's cancel ends the run: its pending approval requests are
// withdrawn at once, whether or not a client still waits on the held turn,
// so that nobody is asked about a call that can no longer be delivered.
// A pause keeps them pending.
func TestEndedTrajectoryWithdrawsApprovals(t *testing.T) {
	cfg := testConfig(t)
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := memory.NewApprovals(memory.ApprovalsOptions{})
	svc := approvals.NewService(approvals.ServiceOptions{Store: st, Clock: clock})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	r := chi.NewRouter()
	admin.New(cfg, memory.New(memory.Options{}), nil, clock, admin.WithApprovals(svc)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	open := func(run string) string {
		call, err := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv/`+run+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		req := &approvals.Request{Call: call, Digest: call.Digest(), Gate: "destructive-shell", Roles: []string{"secops"},
			Quorum: 1, ExpiresAt: now.Add(15 * time.Minute)}
		if _, err := svc.Open(context.Background(), &approvals.Hold{Trajectory: run, Root: run, Key: "k-" + run}, []*approvals.Request{req}); err != nil {
			t.Fatal(err)
		}
		return req.ID
	}
	for _, run := range []string{"run-c", "run-p"} {
		if status, out := call(t, "POST", srv.URL+"/admin/v1/trajectories", opToken, `{"id":"`+run+`","tenant":"team-a"}`); status != 201 {
			t.Fatalf("create %s: %d %v", run, status, out)
		}
	}
	canceled, paused := open("run-c"), open("run-p")

	if status, out := call(t, "POST", srv.URL+"/admin/v1/trajectories/run-c/cancel", opToken, ""); status != 202 {
		t.Fatalf("cancel: %d %v", status, out)
	}
	if status, out := call(t, "POST", srv.URL+"/admin/v1/trajectories/run-p/pause", opToken, ""); status != 202 {
		t.Fatalf("pause: %d %v", status, out)
	}
	got, err := st.Get(context.Background(), canceled)
	if err != nil || got.State != approvals.Withdrawn || !strings.Contains(got.Reason, "alice") {
		t.Errorf("request of the canceled run: %+v, %v", got, err)
	}
	if got, err := st.Get(context.Background(), paused); err != nil || got.State != approvals.Pending {
		t.Errorf("request of the paused run: %+v, %v", got, err)
	}
}
