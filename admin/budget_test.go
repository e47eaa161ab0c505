package admin_test

import (
	"context"
	"net/http"
	"testing"

	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// spent sets a record's budget and spend, and marks it paused by its
// budget when it is PAUSED.
func spent(t *testing.T, st *memory.Store, id string, b trajectory.Budget, dollars float64) {
	t.Helper()
	_, err := st.Update(context.Background(), id, func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.Budget, r.Spend.Dollars = b, dollars
		if r.State == trajectory.Paused {
			r.PauseReason = trajectory.PauseBudget
			r.Stage = "halt"
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPatchBudget(t *testing.T) {
	base, st := setup(t)
	signals := subscribe(t, st)
	put(t, st, "run", trajectory.Paused)
	put(t, st, "run/t1", trajectory.Paused)
	put(t, st, "run/t2", trajectory.Paused) // paused by an operator: stays
	put(t, st, "done", trajectory.Failed)
	spent(t, st, "run", trajectory.Budget{Dollars: 1, OnExhaust: trajectory.OnExhaustPause}, 1)
	spent(t, st, "run/t1", trajectory.Budget{}, 0.5)
	u := base + "/admin/v1/trajectories/"

	// Still below what was spent: the stage stays halt, nothing resumes.
	code, rec := call(t, http.MethodPatch, u+"run/budget", opToken, `{"dollars": 0.9}`)
	if code != http.StatusOK || rec["state"] != "PAUSED" || rec["stage"] != "halt" {
		t.Fatalf("lowering: %d %v", code, rec)
	}
	code, rec = call(t, http.MethodPatch, u+"run/budget", opToken, `{"dollars": 5, "tokens": 1000000, "reason": "approved"}`)
	if code != http.StatusOK || rec["state"] != "READY" || rec["stage"] != "nominal" || rec["pause_reason"] != nil {
		t.Fatalf("raising: %d %v", code, rec)
	}
	b := rec["budget"].(map[string]any)
	if b["dollars"] != 5.0 || b["tokens"] != 1e6 || b["on_exhaust"] != "pause" {
		t.Errorf("budget %v, want $5, 1M tokens, pause kept", b)
	}
	if r, _ := st.Get(context.Background(), "run/t1"); r.State != trajectory.Ready {
		t.Errorf("the thread its budget paused is %s, want READY", r.State)
	}
	if r, _ := st.Get(context.Background(), "run/t2"); r.State != trajectory.Paused {
		t.Errorf("the thread an operator paused is %s, want PAUSED", r.State)
	}
	var woken []string
	for _, s := range signals() {
		woken = append(woken, s.ID)
	}
	if len(woken) != 2 || woken[0] != "run" || woken[1] != "run/t1" {
		t.Errorf("signalled %v, want run and run/t1", woken)
	}
	evs := events(t, base, "run")
	ts := types(evs)
	if len(ts) < 3 || ts[len(ts)-3] != "budget" || ts[len(ts)-2] != "stage" || ts[len(ts)-1] != "PAUSED>READY" {
		t.Errorf("events %v, want budget, stage, PAUSED>READY last", ts)
	}

	for _, tc := range []struct {
		name, path, token, body string
		code                    int
	}{
		{"a finished run is never revived", "done/budget", opToken, `{"dollars": 5}`, http.StatusConflict},
		{"an unknown run", "nope/budget", opToken, `{"dollars": 5}`, http.StatusNotFound},
		{"an approver cannot", "run/budget", apprToken, `{"dollars": 5}`, http.StatusForbidden},
		{"nothing to change", "run/budget", opToken, `{"reason": "x"}`, http.StatusBadRequest},
		{"negative", "run/budget", opToken, `{"dollars": -1}`, http.StatusBadRequest},
		{"unknown policy", "run/budget", opToken, `{"on_exhaust": "stop"}`, http.StatusBadRequest},
		{"unknown field", "run/budget", opToken, `{"dolars": 5}`, http.StatusBadRequest},
		{"no verb", "run", opToken, `{"dollars": 5}`, http.StatusNotFound},
	} {
		if code, out := call(t, http.MethodPatch, u+tc.path, tc.token, tc.body); code != tc.code {
			t.Errorf("%s: %d %v, want %d", tc.name, code, out, tc.code)
		}
	}
}
