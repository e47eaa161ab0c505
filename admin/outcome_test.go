package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"gatekeeper/report"
	"gatekeeper/trajectory"
)

func TestOutcomeMark(t *testing.T) {
	base, st := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	run := trajectory.New("run-1", "team-a", t0)
	if err := st.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	child := trajectory.New("run-1/sub", "team-a", t0)
	child.ParentID = "run-1"
	if err := st.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	u := base + "/admin/v1/trajectories/run-1/outcome"

	code, out := call(t, http.MethodPost, u, opToken, `{"accepted": true, "task_class": "bugfix"}`)
	if code != http.StatusOK || out["outcome"] != "accepted" || out["task_class"] != "bugfix" {
		t.Fatalf("mark: %d %v", code, out)
	}
	// A finished run can be judged later, and a mark without a class keeps the class.
	if _, err := st.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		_, err := r.Finalize(trajectory.Completed, "FINISHED", t0.Add(time.Minute))
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	code, out = call(t, http.MethodPost, u, opToken, `{"accepted": false}`)
	if code != http.StatusOK || out["outcome"] != "rejected" || out["task_class"] != "bugfix" || out["state"] != "COMPLETED" {
		t.Fatalf("second mark: %d %v", code, out)
	}
	evs, err := st.Events(ctx, "run-1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var marks []string
	for _, e := range evs {
		if e.Type == trajectory.EventOutcome {
			marks = append(marks, string(e.Data))
		}
	}
	want := []string{
		`{"by":"alice","source":"admin","from":{},"to":{"outcome":"accepted","task_class":"bugfix"}}`,
		`{"by":"alice","source":"admin","from":{"outcome":"accepted","task_class":"bugfix"},"to":{"outcome":"rejected","task_class":"bugfix"}}`,
	}
	if strings.Join(marks, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcome events:\n%s\nwant\n%s", strings.Join(marks, "\n"), strings.Join(want, "\n"))
	}

	tests := []struct {
		name, path, token, body string
		code                    int
		msg                     string
	}{
		{"approver", u, apprToken, `{"accepted": true}`, http.StatusForbidden, "operator role"},
		{"no token", u, "", `{"accepted": true}`, http.StatusUnauthorized, "bearer"},
		{"empty body", u, opToken, ``, http.StatusBadRequest, "accepted"},
		{"accepted missing", u, opToken, `{"task_class": "bugfix"}`, http.StatusBadRequest, "accepted is required"},
		{"accepted as a string", u, opToken, `{"accepted": "true"}`, http.StatusBadRequest, "accepted"},
		{"unknown field", u, opToken, `{"accepted": true, "score": 3}`, http.StatusBadRequest, "score"},
		{"two objects", u, opToken, `{"accepted": true} {}`, http.StatusBadRequest, "one JSON object"},
		{"class with a space", u, opToken, `{"accepted": true, "task_class": "bug fix"}`, http.StatusBadRequest, "task class"},
		{"class too long", u, opToken, `{"accepted": true, "task_class": "` + strings.Repeat("x", 65) + `"}`, http.StatusBadRequest, "1-64"},
		{"huge body", u, opToken, `{"accepted": true, "task_class": "` + strings.Repeat("x", 5000) + `"}`, http.StatusBadRequest, "too large"},
		{"a subagent", base + "/admin/v1/trajectories/run-1/sub/outcome", opToken, `{"accepted": true}`, http.StatusBadRequest, `use "run-1"`},
		{"unknown run", base + "/admin/v1/trajectories/nope/outcome", opToken, `{"accepted": true}`, http.StatusNotFound, "no such trajectory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := call(t, http.MethodPost, tc.path, tc.token, tc.body)
			e, _ := out["error"].(map[string]any)
			if code != tc.code || e == nil || !strings.Contains(e["message"].(string), tc.msg) {
				t.Errorf("%d %v, want %d with %q", code, out, tc.code, tc.msg)
			}
		})
	}
	rec, err := st.Get(ctx, "run-1")
	if err != nil || rec.Outcome != trajectory.OutcomeRejected || rec.TaskClass != "bugfix" {
		t.Errorf("a refused mark changed the record: %+v %v", rec, err)
	}
}

// TestOutcomeMarkNamespaces: a run two tenants both name is marked by
// {tenant}/{id} (or ?tenant=), as every other admin route addresses it;
// the bare id is ambiguous and marks nothing.
func TestOutcomeMarkNamespaces(t *testing.T) {
	base, st := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	for _, r := range []*trajectory.Record{trajectory.New("run-42", "team-a", t0),
		trajectory.New(trajectory.TenantScoped("run-42", "team-b"), "team-b", t0)} {
		if err := st.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := call(t, http.MethodPost, base+"/admin/v1/trajectories/run-42/outcome", opToken, `{"accepted": true}`); code != http.StatusConflict {
		t.Errorf("bare id two tenants use: %d %v, want 409", code, out)
	}
	if code, out := call(t, http.MethodPost, base+"/admin/v1/trajectories/team-b/run-42/outcome", opToken, `{"accepted": true, "task_class": "docs"}`); code != http.StatusOK {
		t.Fatalf("team-b/run-42: %d %v", code, out)
	}
	if code, out := call(t, http.MethodPost, base+"/admin/v1/trajectories/run-42/outcome?tenant=team-a", opToken, `{"accepted": false}`); code != http.StatusOK {
		t.Fatalf("run-42?tenant=team-a: %d %v", code, out)
	}
	a, _ := st.Get(ctx, "run-42")
	b, _ := st.Get(ctx, trajectory.TenantScoped("run-42", "team-b"))
	if a.Outcome != trajectory.OutcomeRejected || a.TaskClass != "" || b.Outcome != trajectory.OutcomeAccepted || b.TaskClass != "docs" {
		t.Errorf("team-a's run %q %q, team-b's %q %q", a.Outcome, a.TaskClass, b.Outcome, b.TaskClass)
	}
}

// finishedRun stores a finished root record with an outcome and a spend.
func finishedRun(t *testing.T, st interface {
	Create(context.Context, *trajectory.Record, ...trajectory.Event) error
}, id, tenant, class, outcome string, created time.Time, turns int64, dollars float64, state trajectory.State) {
	t.Helper()
	r := trajectory.New(id, tenant, created)
	r.State, r.Outcome, r.TaskClass = state, outcome, class
	r.Spend = trajectory.Spend{Turns: turns, InputTokens: 100 * turns, OutputTokens: 10 * turns, Dollars: dollars, WallClockS: float64(30 * turns)}
	if err := st.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func TestCostReport(t *testing.T) {
	base, st := setup(t)
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	finishedRun(t, st, "a1", "team-a", "bugfix", "accepted", now.Add(-day), 4, 0.4, trajectory.Completed)
	finishedRun(t, st, "a2", "team-a", "bugfix", "accepted", now.Add(-2*day), 8, 0.8, trajectory.Completed)
	finishedRun(t, st, "a3", "team-a", "bugfix", "rejected", now.Add(-3*day), 20, 2, trajectory.Failed)
	finishedRun(t, st, "a4", "team-a", "docs", "accepted", now.Add(-40*day), 2, 0.1, trajectory.Canceled)
	finishedRun(t, st, "b1", "team-b", "bugfix", "accepted", now.Add(-day), 6, 0.6, trajectory.Completed)
	finishedRun(t, st, "live", "team-a", "bugfix", "accepted", now.Add(-day), 1, 0.1, trajectory.Ready)
	finishedRun(t, st, "unjudged", "team-a", "bugfix", "", now.Add(-day), 1, 0.1, trajectory.Completed)

	get := func(t *testing.T, query string) (int, report.Report, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/v1/reports/costs?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+apprToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		rep, _ := report.Decode(raw)
		return resp.StatusCode, rep, m
	}
	classes := func(rep report.Report) string {
		var s []string
		for _, c := range rep.Classes {
			s = append(s, c.Class+":"+strconv.Itoa(c.Runs)+"/"+strconv.Itoa(c.Accepted))
		}
		return strings.Join(s, " ")
	}
	tests := []struct {
		name, query, want string
		scanned           int
	}{
		{"everything finished and judged", "", "bugfix:4/3 docs:1/1", 6},
		{"one tenant", "tenant=team-a", "bugfix:3/2 docs:1/1", 5},
		{"one class", "class=docs", "docs:1/1", 6},
		{"since a duration", "since=720h", "bugfix:4/3", 6},
		{"since days", "since=2d", "bugfix:3/3", 6},
		{"since a date", "since=2026-11-30", "bugfix:3/3", 6},
		{"the slope is the caller's", "slope=0.5", "bugfix:4/3 docs:1/1", 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, rep, _ := get(t, tc.query)
			if code != http.StatusOK || classes(rep) != tc.want || rep.Scope.Scanned != tc.scanned || rep.Scope.Truncated {
				t.Errorf("%d: classes %q, scanned %d, want %q, %d", code, classes(rep), rep.Scope.Scanned, tc.want, tc.scanned)
			}
		})
	}
	_, rep, _ := get(t, "class=bugfix&tenant=team-a")
	turns := rep.Classes[0].Curves[0]
	if turns.Dimension != report.Turns || turns.Ceiling == nil || turns.Ceiling.Value != 8 || turns.Ceiling.Runs != 2 {
		t.Errorf("turns curve of team-a's bugfix runs: %+v", turns)
	}
	if p := turns.Points[8]; p.Budget != 8 || p.Accepted != 2 || p.Fraction != 2.0/3 {
		t.Errorf("F(8 turns) = %+v, want 2 of 3 runs", p)
	}
	if rep.Scope.Tenant != "team-a" || rep.Scope.Class != "bugfix" {
		t.Errorf("scope %+v", rep.Scope)
	}
	for _, q := range []string{"since=yesterday", "since=-5h", "slope=0", "slope=x", "class=" + url.QueryEscape("a b")} {
		code, _, m := get(t, q)
		if code != http.StatusBadRequest || m["error"] == nil {
			t.Errorf("%s: %d %v, want 400", q, code, m)
		}
	}
}
