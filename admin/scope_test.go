package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/feed"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

const (
	annToken  = "ann-team-a-token-0123456789" // operator and approver:secops of team-a only
	rootToken = "root-all-tenants-0123456789" // operator and approver:secops of every tenant
)

// scopeWorld is two tenants' runs, subagents, finished judged runs and
// pending approvals behind one admin API with its event stream.
type scopeWorld struct {
	base       string
	recs       *feed.Records
	aprA, aprB string // team-a's and team-b's pending approval requests
}

func scopeSetup(t *testing.T) *scopeWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := feed.New(ctx, feed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	cfg := testConfig(t)
	cfg.Admin.Tokens = append(cfg.Admin.Tokens,
		config.AdminToken{Name: "ann", Token: annToken, Roles: []string{"operator", "approver:secops"}, Tenants: []string{"team-a"}},
		config.AdminToken{Name: "root", Token: rootToken, Roles: []string{"operator", "approver:secops"}})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := &scopeWorld{recs: feed.NewRecords(memory.New(memory.Options{}), f)}
	now := time.Now()
	svc := approvals.NewService(approvals.ServiceOptions{Store: feed.NewApprovals(memory.NewApprovals(memory.ApprovalsOptions{}), f),
		Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	r := chi.NewRouter()
	admin.New(cfg, w.recs, nil, nil, admin.WithSignals(w.recs), admin.WithStream(f, feed.NewKeys(f, nil)),
		admin.WithApprovals(svc), admin.WithLedger(memory.NewLedger(nil))).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	w.base = srv.URL

	for _, tn := range []struct{ tenant, prefix string }{{"team-a", "a"}, {"team-b", "b"}} {
		run := trajectory.New(tn.prefix+"-run", tn.tenant, now)
		kid := trajectory.New(tn.prefix+"-run/kid", tn.tenant, now)
		kid.ParentID = run.ID
		done := trajectory.New(tn.prefix+"-done", tn.tenant, now)
		done.State, done.Outcome, done.TaskClass = trajectory.Completed, trajectory.OutcomeAccepted, "bugfix"
		done.Spend.Turns, done.Spend.Dollars = 3, 0.5
		shared := trajectory.New("shared", tn.tenant, now)
		if tn.tenant == "team-b" {
			shared.ID = trajectory.TenantScoped("shared", tn.tenant)
		}
		for _, rec := range []*trajectory.Record{run, kid, done, shared} {
			if err := w.recs.Create(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		call, err := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv/`+tn.prefix+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		req := &approvals.Request{Tenant: tn.tenant, Call: call, Digest: call.Digest(), Gate: "shell", Roles: []string{"secops"}, Quorum: 1,
			ExpiresAt: now.Add(time.Hour)}
		if _, err := svc.Open(ctx, &approvals.Hold{Trajectory: run.ID, Root: run.ID, Tenant: tn.tenant, Key: "k"}, []*approvals.Request{req}); err != nil {
			t.Fatal(err)
		}
		if tn.tenant == "team-a" {
			w.aprA = req.ID
		} else {
			w.aprB = req.ID
		}
	}
	return w
}

// do calls the API and returns the status and the raw body.
func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// teamB reports whether s names anything of team-b's.
func teamB(s string) bool {
	return strings.Contains(s, "team-b") || strings.Contains(s, "b-run") || strings.Contains(s, "b-done") ||
		strings.Contains(s, "/srv/b") || strings.Contains(s, "shared@")
}

// TestScopedTokenSeesOneTenant drives every admin route with a token
// scoped to team-a while team-b has runs, subagents, finished runs and a
// pending approval: team-b's objects are absent (404, left out of lists,
// counts and reports), nothing of team-b's is changed, and an unscoped
// token still sees them all.
func TestScopedTokenSeesOneTenant(t *testing.T) {
	w := scopeSetup(t)
	u := w.base + "/admin/v1"
	type step struct {
		method, path, body string
		status             int
		contains           string // in the body, for team-a's objects
	}
	visible := []step{
		{"GET", "/trajectories", "", 200, `"a-run/kid"`},
		{"GET", "/trajectories?tenant=team-a&limit=1000", "", 200, `"a-run"`},
		{"GET", "/trajectories/a-run", "", 200, `"a-run/kid"`},
		{"GET", "/trajectories/a-run/kid/events", "", 200, `"events"`},
		{"GET", "/trajectories/shared", "", 200, `"tenant": "team-a"`},
		{"GET", "/trajectories/team-a/shared", "", 200, `"tenant": "team-a"`},
		{"GET", "/approvals", "", 200, w.aprA},
		{"GET", "/approvals?state=pending", "", 200, w.aprA},
		{"GET", "/approvals/" + w.aprA, "", 200, "/srv/a"},
		{"GET", "/reports/costs", "", 200, `"runs": 1`},
		{"GET", "/tenants", "", 200, `"team-a"`},
		{"GET", "/tenants/team-a", "", 200, `"team-a"`},
		{"GET", "/whoami", "", 200, `"tenants": [`},
		{"GET", "/keys", "", 200, `"keys"`},
		{"POST", "/trajectories", `{"tenant":"team-a","id":"a-new"}`, 201, `"a-new"`},
		{"POST", "/trajectories", `{"tenant":"team-a","id":"kid2","parent_id":"a-run"}`, 201, `"a-run/kid2"`},
		{"PATCH", "/trajectories/a-run/budget", `{"turns":9}`, 200, `"turns": 9`},
		{"POST", "/trajectories/a-done/outcome", `{"accepted":false}`, 200, `"rejected"`},
		{"POST", "/trajectories/a-run/interrupt", `{"message":"stop"}`, 202, `"a-run"`},
		{"POST", "/trajectories/a-run/pause", "", 202, `"PAUSED"`},
		{"POST", "/approvals/" + w.aprA + "/approve", "", 200, `"approved"`},
	}
	for _, s := range visible {
		code, body := do(t, s.method, u+s.path, annToken, s.body)
		if code != s.status || !strings.Contains(body, s.contains) {
			t.Errorf("%s %s: %d %s, want %d with %s", s.method, s.path, code, body, s.status, s.contains)
		}
		if teamB(body) {
			t.Errorf("%s %s shows team-b's objects to a team-a token: %s", s.method, s.path, body)
		}
	}

	absent := []step{
		{"GET", "/trajectories/b-run", "", 404, ""},
		{"GET", "/trajectories/b-run/kid", "", 404, ""},
		{"GET", "/trajectories/b-run/events", "", 404, ""},
		{"GET", "/trajectories/b-run/kid/events", "", 404, ""},
		{"GET", "/trajectories/b-run?tenant=team-b", "", 404, ""},
		{"GET", "/trajectories/team-b/b-run", "", 404, ""},
		{"GET", "/trajectories/shared@team-b", "", 404, ""},
		{"GET", "/trajectories/team-b/shared", "", 404, ""},
		{"GET", "/trajectories/shared?tenant=team-b", "", 404, ""},
		{"GET", "/approvals/" + w.aprB, "", 404, ""},
		{"GET", "/tenants/team-b", "", 404, ""},
		{"PATCH", "/trajectories/b-run/budget", `{"dollars":100}`, 404, ""},
		{"PATCH", "/trajectories/b-run/kid/budget", `{"dollars":100}`, 404, ""},
		{"POST", "/trajectories/b-done/outcome", `{"accepted":false}`, 404, ""},
		{"POST", "/trajectories/b-run/interrupt", `{"message":"rm -rf"}`, 404, ""},
		{"POST", "/approvals/" + w.aprB + "/approve", "", 404, ""},
		{"POST", "/approvals/" + w.aprB + "/deny", "", 404, ""},
	}
	for _, verb := range []string{"pause", "resume", "cancel", "kill", "finish"} {
		absent = append(absent, step{"POST", "/trajectories/b-run/" + verb, "", 404, ""}, step{"POST", "/trajectories/b-run/kid/" + verb, "", 404, ""})
	}
	for _, s := range absent {
		code, body := do(t, s.method, u+s.path, annToken, s.body)
		if code != s.status || !strings.Contains(body, `"not_found_error"`) {
			t.Errorf("%s %s: %d %s, want 404 not_found_error", s.method, s.path, code, body)
		}
		if teamB(strings.ReplaceAll(body, `\"team-b\"`, "")) {
			t.Errorf("%s %s tells of team-b's objects: %s", s.method, s.path, body)
		}
	}
	// Lists filtered by another tenant are empty, not refused.
	for _, path := range []string{"/trajectories?tenant=team-b", "/approvals?trajectory=b-run", "/approvals?root=b-run", "/reports/costs?tenant=team-b"} {
		code, body := do(t, "GET", u+path, annToken, "")
		if code != 200 || teamB(strings.ReplaceAll(body, `"tenant": "team-b"`, "")) || strings.Contains(body, `"runs": 1`) {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	// Creating in another tenant, or under its run, is as for a tenant
	// or a parent that does not exist.
	for _, body := range []string{`{"tenant":"team-b"}`, `{"tenant":"team-a","parent_id":"b-run"}`} {
		code, out := do(t, "POST", u+"/trajectories", annToken, body)
		if code != 400 || (!strings.Contains(out, "unknown tenant") && !strings.Contains(out, "does not exist")) {
			t.Errorf("POST %s: %d %s", body, code, out)
		}
	}

	// Nothing of team-b's changed, and an unscoped token sees it all.
	for _, id := range []string{"b-run", "b-run/kid"} {
		rec, err := w.recs.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != trajectory.Ready || rec.Budget.Dollars != 0 || rec.Pending.Control != nil || rec.Outcome != "" {
			t.Errorf("%s changed through a team-a token: %+v", id, rec)
		}
	}
	if code, body := do(t, "GET", u+"/approvals/"+w.aprB, rootToken, ""); code != 200 || !strings.Contains(body, `"pending"`) {
		t.Errorf("team-b's approval after the scoped votes: %d %s", code, body)
	}
	for _, path := range []string{"/trajectories", "/approvals", "/tenants", "/trajectories/b-run/kid"} {
		if code, body := do(t, "GET", u+path, rootToken, ""); code != 200 || !teamB(body) {
			t.Errorf("unscoped GET %s: %d, team-b not shown: %s", path, code, body)
		}
	}
	if code, body := do(t, "GET", u+"/trajectories/shared", rootToken, ""); code != 409 {
		t.Errorf("unscoped GET /trajectories/shared: %d %s, want 409 (two tenants' runs)", code, body)
	}
	if code, body := do(t, "GET", u+"/reports/costs", rootToken, ""); code != 200 || !strings.Contains(body, `"runs": 2`) {
		t.Errorf("unscoped cost report: %d %s", code, body)
	}
}

// TestScopedStream: a scoped token's event stream, replayed from its first
// event and live, carries nothing of another tenant's while an unscoped
// one carries both tenants'.
func TestScopedStream(t *testing.T) {
	w := scopeSetup(t)
	live := openStreamAs(t, w.base, annToken, "")
	liveAll := openStreamAs(t, w.base, rootToken, "")
	u := w.base + "/admin/v1"
	// team-b's runs change, its approval is decided, team-a's too.
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/trajectories/b-run/pause", `{"reason":"b"}`},
		{"PATCH", "/trajectories/b-run/budget", `{"dollars":7}`},
		{"POST", "/approvals/" + w.aprB + "/deny", ""},
		{"POST", "/trajectories/b-done/outcome", `{"accepted":false}`},
		{"POST", "/trajectories/a-run/pause", `{"reason":"a"}`},
		{"POST", "/approvals/" + w.aprA + "/approve", ""},
		{"POST", "/trajectories", `{"tenant":"team-a","id":"a-last"}`},
	} {
		if code, body := do(t, s.method, u+s.path, rootToken, s.body); code >= 300 {
			t.Fatalf("%s %s: %d %s", s.method, s.path, code, body)
		}
	}
	replay := openStreamAs(t, w.base, annToken, "0-1")
	replayAll := openStreamAs(t, w.base, rootToken, "0-1")
	for name, next := range map[string]func() sse{"live": live, "replayed": replay} {
		seen := map[string]bool{}
		for ev := next(); ; ev = next() {
			raw, _ := json.Marshal(ev.data)
			if ev.data.Tenant != "team-a" || teamB(string(raw)) {
				t.Errorf("%s stream of a team-a token carries %s", name, raw)
			}
			seen[ev.data.Trajectory] = true
			if ev.data.Trajectory == "a-last" {
				break
			}
		}
		if !seen["a-run"] {
			t.Errorf("%s stream of a team-a token missed team-a's changes: %v", name, seen)
		}
	}
	// Every admin action is an event naming who took it.
	actions := map[string]string{
		"control": `"type":"control","data":{"kind":"pause","by":"root"`,
		"budget":  `"type":"budget","data":{"by":"root"`,
		"outcome": `"type":"outcome","data":{"by":"root","source":"admin"`,
		"vote":    `"approver":"root"`,
		"created": `"type":"created","to":"READY","data":{"by":"root"}`,
	}
	for name, next := range map[string]func() sse{"live": liveAll, "replayed": replayAll} {
		var b bool
		var all strings.Builder
		for ev := next(); ; ev = next() {
			b = b || ev.data.Tenant == "team-b"
			raw, _ := json.Marshal(ev.data)
			all.Write(raw)
			if ev.data.Trajectory == "a-last" {
				break
			}
		}
		if !b {
			t.Errorf("%s stream of an unscoped token carries no team-b event", name)
		}
		for action, want := range actions {
			if !strings.Contains(all.String(), want) {
				t.Errorf("%s stream: no %s event naming who took it (%s)", name, action, want)
			}
		}
	}
}

// openStreamAs is openStream with token.
func openStreamAs(t *testing.T, base, token, lastID string) func() sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return readStream(t, req)
}
