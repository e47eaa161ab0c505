package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/store/memory"
)

const gatesYAML = `
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: k, key: sk-x}]}
tenants:
  - {name: team-a, keys: [vk-a-0123456789]}
admin:
  tokens:
    - {name: alice, token: operator-token-0123456789, roles: [operator]}
    - {name: carol, token: secops-token-0123456789, roles: ["approver:secops"]}
`

func TestCheckConfigGates(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", gatesYAML+`gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf|DROP TABLE")'
    approvers: {roles: [secops]}
`)
	bad := write("bad.yaml", gatesYAML+`gates:
  - name: typo
    when: |
      tool.name == "Bash" &&
        tool.inptu.command == "x" ||| true
    approvers: {roles: [secops], quorum: 0}
  - name: not-bool
    when: 'tool.name'
    approvers: {roles: [secops, sre], quorum: 3, distinct_roles: true}
`)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"check-config", "-config", good}, env(), &out, &out); err != nil {
		t.Fatalf("good gates: %v\n%s", err, out.String())
	}
	out.Reset()
	err := run(context.Background(), []string{"check-config", "-config", bad}, env(), &out, &out)
	if !errors.Is(err, errReported) {
		t.Fatalf("bad gates: err = %v\n%s", err, out.String())
	}
	for _, want := range []string{"gates[0] (typo): when: 2:", "gates[1] (not-bool)", "want bool", "gates[1].approvers.quorum"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// approvalsServer serves the admin API with an approvals Service holding
// one pending request, and returns the request's id.
func approvalsServer(t *testing.T) (base, id string) {
	t.Helper()
	call, _ := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv"}`))
	return approvalsServerWith(t, &approvals.Request{Call: call, Digest: call.Digest(), Gate: "destructive-shell", Why: `tool.name == "Bash"`,
		Roles: []string{"secops"}, Quorum: 1})
}

// approvalsServerWith is approvalsServer holding req.
func approvalsServerWith(t *testing.T, req *approvals.Request) (base, id string) {
	t.Helper()
	cfg, err := config.Parse([]byte(gatesYAML), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	svc := approvals.NewService(approvals.ServiceOptions{Store: memory.NewApprovals(memory.ApprovalsOptions{}), Clock: func() time.Time { return now }})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	req.ExpiresAt = now.Add(15 * time.Minute)
	if _, err := svc.Open(context.Background(), &approvals.Hold{Trajectory: "run-7", Root: "run-7", Key: "k"}, []*approvals.Request{req}); err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	admin.New(cfg, memory.New(memory.Options{}), nil, nil, admin.WithApprovals(svc)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, req.ID
}

func TestApprovalsVerbs(t *testing.T) {
	base, id := approvalsServer(t)
	ctx := context.Background()
	as := func(token string) func(string) string {
		return env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", token)
	}
	const op, secops = "operator-token-0123456789", "secops-token-0123456789"
	var out bytes.Buffer

	if err := run(ctx, []string{"approvals", "ls", "-state", "pending"}, as(op), &out, &out); err != nil {
		t.Fatalf("ls: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ID") || !strings.Contains(out.String(), id) || !strings.Contains(out.String(), "destructive-shell") ||
		!strings.Contains(out.String(), "0/1") {
		t.Errorf("ls table:\n%s", out.String())
	}

	out.Reset()
	if err := run(ctx, []string{"approvals", "show", id}, as(op), &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `{"command":"rm -rf /srv"}`) || !strings.Contains(out.String(), "1 of roles secops") {
		t.Errorf("show:\n%s", out.String())
	}

	out.Reset()
	if err := run(ctx, []string{"approvals", "approve", id}, as(op), &out, &out); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("an operator without the gate's role approved: %v", err)
	}

	out.Reset()
	if err := run(ctx, []string{"approvals", "approve", id, "-reason", "checked the namespace", "-json"}, as(secops), &out, &out); err != nil {
		t.Fatal(err)
	}
	var got approvals.Request
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("approve -json: %v\n%s", err, out.String())
	}
	if got.State != approvals.Approved || len(got.Votes) != 1 || got.Votes[0].Approver != "carol" || got.Votes[0].Reason != "checked the namespace" {
		t.Errorf("approved: %+v", got)
	}

	out.Reset()
	if err := run(ctx, []string{"approvals", "deny", id}, as(secops), &out, &out); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("a vote after the decision: %v", err)
	}

	out.Reset()
	if err := run(ctx, []string{"approvals", "ls", "-json", "-state", "approved"}, as(op), &out, &out); err != nil {
		t.Fatal(err)
	}
	var list []approvals.Request
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("ls -json: %v %s", err, out.String())
	}
}

// show prints the whole call, however long, with its invisible characters
// escaped, and the part the gate matched.
func TestApprovalsShowWholeCallVisible(t *testing.T) {
	const when = `tool.input.command.matches("rm -rf")`
	gates, err := approvals.Compile([]config.Gate{{Name: "destructive-shell", When: when, Approvers: config.Approvers{Roles: []string{"secops"}, Quorum: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	gate, _ := gates.Lookup("destructive-shell")
	cmd := "echo harmless-" + strings.Repeat("a", 4970) + "; \u2066rm -rf /\u2069 # <ok> \x1b[2J"
	args, _ := json.Marshal(map[string]string{"command": cmd})
	call, err := approvals.Canonical("Bash", args)
	if err != nil {
		t.Fatal(err)
	}
	base, id := approvalsServerWith(t, gate.Request("", call, when, time.Now()))
	var out bytes.Buffer
	if err := run(context.Background(), []string{"approvals", "show", id}, env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", "operator-token-0123456789"), &out, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	wantInput := `{"command":"echo harmless-` + strings.Repeat("a", 4970) + `; \u2066rm -rf /\u2069 # <ok> \u001b[2J"}`
	for _, want := range []string{wantInput, "warning", "2 invisible", "matched", "⟦rm -rf⟧"} {
		if !strings.Contains(text, want) {
			t.Errorf("show lacks %.80q:\n%.300s", want, text)
		}
	}
	for _, bad := range []string{"\u2066", "\u2069", "\x1b"} {
		if strings.Contains(text, bad) {
			t.Errorf("show prints %q raw", bad)
		}
	}
}

func TestApprovalsUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"approvals"}, env(), &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, verb := range []string{"ls", "show ID", "approve ID", "deny ID"} {
		if !strings.Contains(out.String(), verb) {
			t.Errorf("usage lacks %q", verb)
		}
	}
	if err := run(context.Background(), []string{"approvals", "grant", "x"}, env(), &out, &out); err == nil || !strings.Contains(err.Error(), "approve") {
		t.Errorf("unknown verb: %v", err)
	}
	if err := run(context.Background(), []string{"approvals", "show"}, env(), &out, &out); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("show without an id: %v", err)
	}
}

// TestServeWithGates builds the server from a config with gates and checks
// that the admin API serves approvals and the server stops cleanly.
func TestServeWithGates(t *testing.T) {
	cfg, err := config.Parse([]byte(gatesYAML+`gates:
  - {name: g, when: 'tool.name == "Bash"', approvers: {roles: [secops]}}
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(context.Background(), cfg, slog.New(slog.DiscardHandler), env())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	}()
	if s.approvals == nil || s.approvals.Gates().Empty() {
		t.Fatal("no approvals service with gates configured")
	}
	srv := httptest.NewServer(s.handler)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/v1/approvals", nil)
	req.Header.Set("Authorization", "Bearer operator-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string][]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/v1/approvals: %d %v", resp.StatusCode, err)
	}
	if list, ok := body["approvals"]; !ok || len(list) != 0 {
		t.Errorf("approvals = %v", body)
	}
}
