package proxy_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"gatekeeper/meter"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// TestTenantCeilingClampsThenRefuses: a call that does not fit what its
// tenant has left of dollars_per_day is clamped to it, as by a run's
// budget; its charge, not its reservation, stays on the tenant's ledger;
// once not even a minimal call fits, a call of a brand-new run is refused
// 402 naming the tenant's limit and when it resets, and no record is left
// behind.
func TestTenantCeilingClampsThenRefuses(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: "    limits: {dollars_per_day: 0.05}"})
	var sent []byte
	client := func(run string) openai.Client {
		return openai.NewClient(ooption.WithBaseURL(e.gk+"/t/"+run+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
			ooption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"the logs show three restarts"}`), ooption.WithMiddleware(capture(&sent)))
	}
	params := openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("summarize the logs")}}
	c := client("first")
	if _, err := c.Chat.Completions.New(ctxT(t), params); err != nil {
		t.Fatalf("the call was refused: %v", err)
	}
	table := meter.DefaultTable()
	want := meter.FitCall([]meter.Level{{ID: "day", Budget: trajectory.Budget{Dollars: 0.05}}}, table.Worst("gpt-4o", int64(len(sent))), false).MaxOutput
	if got := gjson.GetBytes(lastUpstream(t, e), "max_completion_tokens").Int(); got != want || want >= 16384 || want < 1024 {
		t.Errorf("forwarded max_completion_tokens %d, want the tenant's clamp %d", got, want)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "first"); return rec.Turns == 1 })
	clamps := e.eventsOf(t, "first", trajectory.EventBudgetClamp)
	if len(clamps) != 1 || clamps[0]["to"] != float64(want) || clamps[0]["limit"] != tenant.LimitDollarsPerDay || clamps[0]["binding"] != "tenant team-a" {
		t.Errorf("clamp events %v, want one to %d on the tenant's dollars_per_day", clamps, want)
	}
	u, err := e.ledger.Usage(ctxT(t), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if u.InFlight != 0 || u.Reserved != (tenant.Amount{}) {
		t.Errorf("after the call: %d calls in flight holding %+v", u.InFlight, u.Reserved)
	}
	if got, want := u.Day().Micros, meter.FromDollars(rec.Spend.Dollars); got != want || got == 0 {
		t.Errorf("tenant's day spend %d micros, the run's %d", got, want)
	}
	if got, want := u.Day().Tokens, rec.Spend.Tokens(); got != want {
		t.Errorf("tenant's day tokens %d, the run's %d", got, want)
	}

	// Other runs spent nearly all the rest.
	if err := e.ledger.Settle(ctxT(t), "team-a", "", tenant.Amount{Micros: 50_000 - u.Day().Micros - 100}); err != nil {
		t.Fatal(err)
	}
	c = client("second")
	_, err = c.Chat.Completions.New(ctxT(t), params)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("a new run past the tenant's ceiling: %v, want 402", err)
	}
	var body struct {
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(ae.RawJSON()), &body.Error); err != nil {
		t.Fatal(err)
	}
	if body.Error.Type != "budget_exceeded" || !strings.Contains(body.Error.Message, "tenant team-a has reached its dollars_per_day limit") ||
		!strings.Contains(body.Error.Message, "it resets, as earlier spend leaves the window, at 2026-12-03T10:00:00Z") {
		t.Errorf("refusal %s", ae.RawJSON())
	}
	if got := ae.Response.Header.Get("X-Should-Retry"); got != "false" {
		t.Errorf("x-should-retry = %q", got)
	}
	if _, err := e.store.Get(ctxT(t), "second"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("the refused call left a record: %v", err)
	}
	if u, _ := e.ledger.Usage(ctxT(t), "team-a"); u.InFlight != 0 {
		t.Errorf("the refused call holds a reservation")
	}
	// team-b has no limits: team-a's spend is nothing to it.
	cb := openai.NewClient(ooption.WithBaseURL(e.gk+"/openai/v1"), ooption.WithAPIKey(vkB), ooption.WithMaxRetries(0),
		ooption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"ok"}`))
	if _, err := cb.Chat.Completions.New(ctxT(t), params); err != nil {
		t.Errorf("team-b's call: %v", err)
	}

	t.Run("admin", func(t *testing.T) {
		resp := e.do(t, "GET", "/admin/v1/tenants/team-a", "", "Authorization", "Bearer "+adminToken)
		b := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if got := gjson.GetBytes(b, "spend.day.dollars").Float(); got < 0.0499 || got > 0.05 {
			t.Errorf("day spend %v in %s", got, b)
		}
		if gjson.GetBytes(b, "limits.dollars_per_day").Float() != 0.05 || gjson.GetBytes(b, "live_runs").Int() != 1 ||
			gjson.GetBytes(b, "trajectories").String() != "agents" || gjson.GetBytes(b, "spend.in_flight.calls").Int() != 0 {
			t.Errorf("tenant view %s", b)
		}
		resp = e.do(t, "GET", "/admin/v1/tenants", "", "Authorization", "Bearer "+adminToken)
		if b := readAll(t, resp); gjson.GetBytes(b, "tenants.#").Int() != 2 || gjson.GetBytes(b, "tenants.1.name").String() != "team-b" {
			t.Errorf("tenants %s", b)
		}
		for _, tc := range []struct {
			name, path, token string
			code              int
		}{
			{"approver only", "/admin/v1/tenants", readToken, http.StatusForbidden},
			{"no token", "/admin/v1/tenants/team-a", "", http.StatusUnauthorized},
			{"unknown tenant", "/admin/v1/tenants/team-z", adminToken, http.StatusNotFound},
		} {
			resp := e.do(t, "GET", tc.path, "", "Authorization", "Bearer "+tc.token)
			readAll(t, resp)
			if resp.StatusCode != tc.code {
				t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
			}
		}
	})
}

// TestTenantRunLimits: max_live_trajectories refuses a new run while as
// many are unfinished, and lets one start once one finishes;
// new_trajectories_per_hour counts the runs started, finished or not.
func TestTenantRunLimits(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: "    limits: {max_live_trajectories: 2, new_trajectories_per_hour: 3}"})
	params := openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("summarize the logs")}}
	call := func(run string) error {
		c := openai.NewClient(ooption.WithBaseURL(e.gk+"/t/"+run+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
			ooption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"ok"}`))
		_, err := c.Chat.Completions.New(ctxT(t), params)
		return err
	}
	refused := func(run, want string) {
		t.Helper()
		var ae *openai.Error
		if err := call(run); !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired || !strings.Contains(ae.RawJSON(), want) {
			t.Fatalf("run %s: %v, want 402 naming %q", run, err, want)
		}
	}
	finish := func(run string) {
		t.Helper()
		resp := e.do(t, "POST", "/admin/v1/trajectories/"+run+"/finish", "", "Authorization", "Bearer "+adminToken)
		if b := readAll(t, resp); resp.StatusCode/100 != 2 {
			t.Fatalf("finish %s: %d %s", run, resp.StatusCode, b)
		}
	}
	for _, run := range []string{"r1", "r2", "r1"} {
		if err := call(run); err != nil {
			t.Fatalf("run %s: %v", run, err)
		}
	}
	refused("r3", "tenant team-a has reached its max_live_trajectories limit (2 runs not finished); trajectory r3 was not started")
	finish("r1")
	if err := call("r3"); err != nil {
		t.Fatalf("r3 once r1 finished: %v", err)
	}
	finish("r2")
	refused("r4", "tenant team-a has reached its new_trajectories_per_hour limit (3 runs started in the last hour); trajectory r4 was not started; it resets at ")
}
