package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/tenant"
)

// TestReplicasOperatorRuns runs two gatekeeper processes on one Redis
// (and on a cluster): a run an operator creates through one replica
// counts toward the tenant's max_live_trajectories as the runs its agents
// start through the other, so a third run is refused, by the admin API
// (429 tenant_limit_error) and to an agent (402) alike; every record
// keeps who created it; and once the config is reloaded with the tenant
// switched to trajectories: operators, the agent's run takes no more
// turns on either replica while the operator's goes on.
func TestReplicasOperatorRuns(t *testing.T) {
	redistest.Each(t, testReplicasOperatorRuns)
}

func testReplicasOperatorRuns(t *testing.T, r redistest.Target) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	cfgText := func(trajectories string) string {
		return fmt.Sprintf(`
listen: 127.0.0.1:0
store: %s
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
    trajectories: %s
    limits: {max_live_trajectories: 2, new_trajectories_per_hour: 10}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, storeYAML(r), mock.URL, replicaKey, trajectories, replicaAdmin)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText("agents")), 0o600); err != nil {
		t.Fatal(err)
	}
	reps := []*replica{startReplica(t, cfg), startReplica(t, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	call := func(base, run string) error {
		c := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey(replicaKey), option.WithMaxRetries(0),
			option.WithHeader("X-Gatekeeper-Trajectory", run), option.WithHeader("X-Mock-Turn", `{"kind":"text","text":"done"}`))
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
		return err
	}
	refused := func(what string, err error, code int, want string) {
		t.Helper()
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != code || !strings.Contains(ae.Error(), want) {
			t.Fatalf("%s: %v, want %d saying %q", what, err, code, want)
		}
	}
	create := func(base, id string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/admin/v1/trajectories", strings.NewReader(`{"id":"`+id+`","tenant":"fleet"}`))
		req.Header.Set("Authorization", "Bearer "+replicaAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	creator := func(id string) string {
		t.Helper()
		var v struct {
			CreatedBy struct{ Kind, Name string } `json:"created_by"`
		}
		if err := adminGet(ctx, reps[1].base+"/admin/v1/trajectories/"+id, &v); err != nil {
			t.Fatal(err)
		}
		return v.CreatedBy.Kind + " " + v.CreatedBy.Name
	}

	if err := call(reps[0].base, "agent-1"); err != nil {
		t.Fatalf("the agent's run: %v", err)
	}
	if code, b := create(reps[1].base, "op-1"); code != http.StatusCreated {
		t.Fatalf("the operator's run: %d %s", code, b)
	}
	code, b := create(reps[0].base, "op-2")
	if code != http.StatusTooManyRequests || !strings.Contains(b, "tenant_limit_error") ||
		!strings.Contains(b, "tenant fleet has reached its max_live_trajectories limit (2 runs not finished); trajectory op-2 was not created") {
		t.Fatalf("a third run created by an operator: %d %s, want 429 tenant_limit_error", code, b)
	}
	refused("a third run started by an agent", call(reps[1].base, "agent-2"), http.StatusPaymentRequired, "max_live_trajectories")
	if got := creator("agent-1"); got != "agent fleet" {
		t.Errorf("agent-1 created by %q, want the agent of tenant fleet", got)
	}
	if got := creator("op-1"); got != "operator ops" {
		t.Errorf("op-1 created by %q, want the operator ops", got)
	}

	if err := os.WriteFile(cfg, []byte(cfgText("operators")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, rep := range reps {
		if code, a := postReload(ctx, t, rep.base, replicaAdmin); code != http.StatusOK || !a.Reloaded {
			t.Fatalf("reload: %d %+v", code, a)
		}
	}
	for i, rep := range reps {
		refused(fmt.Sprintf("the agent's run through replica %d after the switch", i), call(rep.base, "agent-1"),
			http.StatusForbidden, "trajectory agent-1 was started by an agent, so it takes no more turns")
		if err := call(rep.base, "op-1"); err != nil {
			t.Fatalf("the operator's run through replica %d after the switch: %v", i, err)
		}
	}
}

// TestContinuationTenantCeilingOnRedis: gatekeeper serving on Redis (one
// server and a cluster) holds a call for approval; while it waits, the
// tenant's other runs spend all but a few of its tokens_per_day in the
// shared ledger; the call is denied, and the continuation gatekeeper
// would send after the refusal reserves against the tenant first, finds
// no room and is not sent: the agent gets 402 naming the limit, and the
// ledger holds nothing for it.
func TestContinuationTenantCeilingOnRedis(t *testing.T) {
	redistest.Each(t, testContinuationTenantCeiling)
}

func testContinuationTenantCeiling(t *testing.T, r redistest.Target) {
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	defer ms.Close()
	const limit = 200_000
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
listen: 127.0.0.1:0
store: %s
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
    limits: {tokens_per_day: %d}
gates:
  - name: shell-rm
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf")'
    approvers: {roles: [secops], quorum: 1}
approvals:
  keepalive: 50ms
admin:
  tokens:
    - {name: ops, token: %s, roles: [operator]}
    - {name: carol, token: %s, roles: ["approver:secops"]}
log: {level: info, format: json}
`, storeYAML(r), ms.URL, replicaKey, limit, replicaAdmin, approverToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startReplica(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := redisstore.Open(ctx, redisstore.Options{URL: r.URL, Cluster: r.Cluster})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ledger := st.Ledger()

	done := make(chan error, 1)
	go func() {
		p := reloadParams("clean")
		p.MaxTokens = 8000
		c := reloadClient(rep.base, "held", `{"kind":"tool","first_only":true,"text":"Cleaning.","tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}]}`)
		_, err := c.Messages.New(ctx, p)
		done <- err
	}()
	var holds []struct {
		ID   string `json:"id"`
		Gate string `json:"gate"`
	}
	for i := 0; i < 400 && len(holds) == 0; i++ {
		holds = pendingHolds(ctx, t, rep.base, "held")
		time.Sleep(25 * time.Millisecond)
	}
	if len(holds) != 1 {
		t.Fatalf("pending holds of the run: %+v", holds)
	}
	u, err := ledger.Usage(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Settle(ctx, "fleet", "other-runs", tenant.Amount{Tokens: limit - u.Day().Tokens - u.Reserved.Tokens - 10}); err != nil {
		t.Fatal(err)
	}
	if code := adminCall(ctx, t, "POST", rep.base+"/admin/v1/approvals/"+holds[0].ID+"/deny", approverToken, nil); code != http.StatusOK {
		t.Fatalf("deny: %d", code)
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the held call got no answer")
	}
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired || !strings.Contains(ae.Error(), "tokens_per_day") {
		t.Fatalf("the held call after the denial: %v, want 402 naming tokens_per_day", err)
	}
	turns := 0
	for _, req := range mock.Requests() {
		if req.API != "" {
			turns++
		}
	}
	if turns != 1 {
		t.Fatalf("the provider saw %d turn requests; the refused continuation must not be sent", turns)
	}
	if u, err = ledger.Usage(ctx, "fleet"); err != nil || u.InFlight != 0 || u.Reserved != (tenant.Amount{}) || u.Day().Tokens > limit {
		t.Fatalf("the tenant after the turn: %+v, %v; want nothing in flight, at most %d tokens spent", u, err, limit)
	}
}
