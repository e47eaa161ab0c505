package proxy_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"gatekeeper/config"
	"gatekeeper/trajectory"
)

// chatCall is one turn of team-a's run through the OpenAI SDK.
func (e *env) chatCall(t *testing.T, run string) error {
	t.Helper()
	c := openai.NewClient(ooption.WithBaseURL(e.gk+"/t/"+run+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
		ooption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"ok"}`))
	_, err := c.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("summarize the logs")}})
	return err
}

// create asks the admin API for team-a's run id and returns the status,
// the Retry-After header and the body.
func (e *env) create(t *testing.T, id string) (int, string, []byte) {
	t.Helper()
	resp := e.do(t, "POST", "/admin/v1/trajectories", `{"id":"`+id+`","tenant":"team-a"}`, "Authorization", "Bearer "+adminToken)
	return resp.StatusCode, resp.Header.Get("Retry-After"), readAll(t, resp)
}

// TestOperatorRunsCountTowardTenantLimits: a run an operator creates
// through the admin API counts toward its tenant's
// max_live_trajectories and new_trajectories_per_hour as an agent's does:
// over either, the admin API refuses it 429 tenant_limit_error naming the
// limit (with Retry-After for the hourly one), and an agent's new run is
// refused for the operator's runs as for its own.
func TestOperatorRunsCountTowardTenantLimits(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: "    limits: {max_live_trajectories: 2, new_trajectories_per_hour: 3}"})
	finish := func(run string) {
		t.Helper()
		resp := e.do(t, "POST", "/admin/v1/trajectories/"+run+"/finish", "", "Authorization", "Bearer "+adminToken)
		if b := readAll(t, resp); resp.StatusCode/100 != 2 {
			t.Fatalf("finish %s: %d %s", run, resp.StatusCode, b)
		}
	}
	if code, _, b := e.create(t, "op1"); code != http.StatusCreated {
		t.Fatalf("create op1: %d %s", code, b)
	}
	if err := e.chatCall(t, "r1"); err != nil {
		t.Fatalf("agent run r1 beside op1: %v", err)
	}
	code, _, b := e.create(t, "op2")
	if code != http.StatusTooManyRequests || gjson.GetBytes(b, "error.type").String() != "tenant_limit_error" ||
		!strings.Contains(gjson.GetBytes(b, "error.message").String(), "tenant team-a has reached its max_live_trajectories limit (2 runs not finished); trajectory op2 was not created") {
		t.Fatalf("op2 with op1 and r1 live: %d %s, want 429 tenant_limit_error naming max_live_trajectories", code, b)
	}
	if rec, err := e.store.Get(ctxT(t), "op2"); err == nil {
		t.Fatalf("the refused run was created: %+v", rec)
	}
	var ae *openai.Error
	if err := e.chatCall(t, "r2"); !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired || !strings.Contains(ae.RawJSON(), "max_live_trajectories") {
		t.Fatalf("agent run r2 with op1 and r1 live: %v, want 402 naming max_live_trajectories", err)
	}
	finish("op1")
	if code, _, b := e.create(t, "op2"); code != http.StatusCreated {
		t.Fatalf("op2 once op1 finished: %d %s", code, b)
	}
	finish("r1")
	code, retry, b := e.create(t, "op3")
	if code != http.StatusTooManyRequests || retry == "" ||
		!strings.Contains(gjson.GetBytes(b, "error.message").String(), "new_trajectories_per_hour limit (3 runs started in the last hour); trajectory op3 was not created; it resets at ") {
		t.Fatalf("op3 after op1, r1 and op2 started this hour: %d Retry-After %q %s, want 429 naming new_trajectories_per_hour", code, retry, b)
	}
}

// TestOperatorsOnlyStopsAgentRuns: every record keeps who created it
// (shown by the admin API); once a config reload switches the tenant to
// trajectories: operators, the runs its agents had started, and their
// threads, take no more turns (403 permission_error in the provider's
// format, saying why), while the run an operator created goes on.
func TestOperatorsOnlyStopsAgentRuns(t *testing.T) {
	e := newEnv(t, envOpts{})
	if err := e.chatCall(t, "agent-run"); err != nil {
		t.Fatalf("an agent's run under trajectories: agents: %v", err)
	}
	if code, _, b := e.create(t, "op-run"); code != http.StatusCreated ||
		gjson.GetBytes(b, "created_by.kind").String() != "operator" || gjson.GetBytes(b, "created_by.name").String() != "alice" {
		t.Fatalf("create op-run: %d %s, want created_by operator alice", code, b)
	}
	resp := e.do(t, "GET", "/admin/v1/trajectories/agent-run", "", "Authorization", "Bearer "+adminToken)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK || gjson.GetBytes(b, "created_by.kind").String() != "agent" ||
		gjson.GetBytes(b, "created_by.name").String() != "team-a" {
		t.Fatalf("the agent's run: %d %s, want created_by agent team-a", resp.StatusCode, b)
	}
	if err := e.chatCall(t, "op-run"); err != nil {
		t.Fatalf("the operator's run under trajectories: agents: %v", err)
	}

	cfg := *e.cfg
	cfg.Tenants = slices.Clone(e.cfg.Tenants)
	cfg.Tenants[0].Trajectories = config.TrajectoriesOperators
	if err := e.px.Reload(&cfg, nil); err != nil {
		t.Fatal(err)
	}
	var ae *openai.Error
	err := e.chatCall(t, "agent-run")
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || gjson.Get(ae.RawJSON(), "type").String() != "permission_error" ||
		!strings.Contains(ae.RawJSON(), "trajectory agent-run was started by an agent, so it takes no more turns") {
		t.Fatalf("the agent's run after the switch: %v, want 403 permission_error saying it was started by an agent", err)
	}
	if rec := e.record(t, "agent-run"); rec.Turns != 1 || rec.State != trajectory.Ready {
		t.Errorf("the refused run: %d turns, %s; want 1 turn, READY, untouched", rec.Turns, rec.State)
	}
	if err := e.chatCall(t, "op-run"); err != nil {
		t.Fatalf("the operator's run after the switch: %v", err)
	}
	if rec := e.record(t, "op-run"); rec.Turns != 2 {
		t.Errorf("the operator's run after the switch: %d turns, want 2", rec.Turns)
	}
}
