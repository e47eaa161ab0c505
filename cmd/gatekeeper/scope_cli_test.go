package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// TestCLIScopedToken: the command-line client, given a token scoped to
// team-a, lists, shows and acts on team-a's runs and approvals only;
// team-b's are "no such" to it, and are left as they were.
func TestCLIScopedToken(t *testing.T) {
	const ann, root = "ann-team-a-token-0123456789", "root-all-tenants-0123456789"
	cfg, err := config.Parse([]byte(`
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: k, key: sk-x}]}
tenants:
  - {name: team-a, keys: [vk-a-0123456789]}
  - {name: team-b, keys: [vk-b-0123456789]}
admin:
  tokens:
    - {name: ann, token: `+ann+`, roles: [operator, "approver:secops"], tenants: [team-a]}
    - {name: root, token: `+root+`, roles: [operator, "approver:secops"]}
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := memory.New(memory.Options{})
	svc := approvals.NewService(approvals.ServiceOptions{Store: memory.NewApprovals(memory.ApprovalsOptions{}), Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = svc.Close(ctx) })
	apr := map[string]string{}
	for _, tn := range []string{"team-a", "team-b"} {
		id := "run-" + tn[len(tn)-1:]
		done := trajectory.New(id+"-done", tn, time.Now())
		done.State, done.Outcome, done.TaskClass = trajectory.Completed, trajectory.OutcomeAccepted, "bugfix"
		for _, r := range []*trajectory.Record{trajectory.New(id, tn, time.Now()), done} {
			if err := st.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		call, _ := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv/`+tn+`"}`))
		req := &approvals.Request{Tenant: tn, Call: call, Digest: call.Digest(), Gate: "shell", Roles: []string{"secops"}, Quorum: 1,
			ExpiresAt: time.Now().Add(time.Hour)}
		if _, err := svc.Open(ctx, &approvals.Hold{Trajectory: id, Root: id, Tenant: tn, Key: "k"}, []*approvals.Request{req}); err != nil {
			t.Fatal(err)
		}
		apr[tn] = req.ID
	}
	r := chi.NewRouter()
	admin.New(cfg, st, nil, nil, admin.WithSignals(st), admin.WithApprovals(svc)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	cli := func(token string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, env("GATEKEEPER_URL", srv.URL, "GATEKEEPER_ADMIN_TOKEN", token), &out, &out)
		return out.String(), err
	}

	for _, args := range [][]string{
		{"trajectories", "ls"}, {"trajectories", "ls", "-json"}, {"trajectories", "ls", "-tenant", "team-b"},
		{"trajectories", "show", "run-a"}, {"tenants"}, {"tenants", "-json"},
		{"approvals", "ls"}, {"approvals", "show", apr["team-a"]}, {"report", "costs", "-format", "json"},
	} {
		out, err := cli(ann, args...)
		if err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if strings.Contains(out, "team-b") || strings.Contains(out, "run-b") || strings.Contains(out, apr["team-b"]) {
			t.Errorf("%v shows team-b's objects to a team-a token:\n%s", args, out)
		}
	}
	if out, _ := cli(ann, "trajectories", "ls"); !strings.Contains(out, "run-a") {
		t.Errorf("trajectories ls misses team-a's run:\n%s", out)
	}
	for _, args := range [][]string{
		{"trajectories", "show", "run-b"}, {"trajectories", "pause", "run-b"}, {"trajectories", "kill", "run-b"},
		{"trajectories", "interrupt", "run-b", "stop"}, {"trajectories", "budget", "run-b", "-dollars", "99"},
		{"tenants", "team-b"}, {"approvals", "show", apr["team-b"]}, {"approvals", "approve", apr["team-b"]},
		{"approvals", "deny", apr["team-b"]},
	} {
		if _, err := cli(ann, args...); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("%v: %v, want a 404", args, err)
		}
	}
	if rec, err := st.Get(ctx, "run-b"); err != nil || rec.State != trajectory.Ready || rec.Budget.Dollars != 0 {
		t.Errorf("run-b after the scoped commands: %+v %v", rec, err)
	}
	if out, err := cli(root, "approvals", "show", apr["team-b"]); err != nil || !strings.Contains(out, "pending") {
		t.Errorf("team-b's approval after the scoped votes: %v\n%s", err, out)
	}
	if out, err := cli(root, "trajectories", "ls"); err != nil || !strings.Contains(out, "run-b") {
		t.Errorf("an unscoped token does not list team-b's run: %v\n%s", err, out)
	}
}
