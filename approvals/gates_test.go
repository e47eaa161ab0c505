package approvals

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
)

const destructive = `tool.name == "Bash" && tool.input.command.matches("rm -rf|DROP TABLE|kubectl delete")`

func gate(name, when string, tenants ...string) config.Gate {
	return config.Gate{
		Name: name, When: when, Tenants: tenants,
		Approvers: config.Approvers{Roles: []string{"secops", "sre"}, Quorum: 2, DistinctRoles: true},
	}
}

func compile(t testing.TB, gates ...config.Gate) *Gates {
	t.Helper()
	g, err := Compile(gates)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func bash(cmd string) Input {
	return Input{ToolName: "Bash", ToolInput: map[string]any{"command": cmd}, Tenant: "team-a", Provider: "anthropic", Model: "claude"}
}

func TestMatch(t *testing.T) {
	g := compile(t,
		gate("destructive-shell", destructive, "team-a"),
		gate("expensive", `trajectory.budget_used > 0.5 && request.provider == "openai"`),
		gate("prod-stage", `trajectory.stage == "restrict" && tool.name != "Read"`),
	)
	tests := []struct {
		name string
		in   Input
		want string
	}{
		{"destructive command", bash("rm -rf /srv/data"), "destructive-shell"},
		{"harmless command", bash("ls -la"), ""},
		{"other tool", Input{ToolName: "Read", ToolInput: map[string]any{"path": "/etc/hosts"}, Tenant: "team-a"}, ""},
		{"other tenant", func() Input { in := bash("rm -rf /"); in.Tenant = "team-b"; return in }(), ""},
		{"budget and provider", Input{ToolName: "Read", Tenant: "team-b", BudgetUsed: 0.7, Provider: "openai"}, "expensive"},
		{"stage", Input{ToolName: "Edit", Tenant: "team-b", Stage: "restrict"}, "prod-stage"},
		{"missing field fails closed", Input{ToolName: "Bash", ToolInput: map[string]any{"cmd": "ls"}, Tenant: "team-a"}, "destructive-shell"},
		{"wrong type fails closed", Input{ToolName: "Bash", ToolInput: map[string]any{"command": 3.0}, Tenant: "team-a"}, "destructive-shell"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := g.Match(tt.in)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tt.want {
				t.Fatalf("Match = %q (%s), want %q", name, why, tt.want)
			}
			if got != nil && why == "" {
				t.Errorf("a match without why")
			}
		})
	}
	_, why := g.Match(Input{ToolName: "Bash", ToolInput: map[string]any{"cmd": "ls"}, Tenant: "team-a"})
	if !strings.Contains(why, "evaluation error") {
		t.Errorf("why of a failed evaluation = %q", why)
	}
	_, why = g.Match(bash("kubectl delete ns prod"))
	if why != destructive {
		t.Errorf("why = %q, want the condition", why)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name  string
		gates []config.Gate
		want  []string
	}{
		{"syntax error with position", []config.Gate{gate("bad", "tool.name == \n  \"Bash\" &&& true")}, []string{"gates[0] (bad): when: 2:"}},
		{"undeclared variable", []config.Gate{gate("typo", `tol.name == "Bash"`)}, []string{"gates[0] (typo): when: 1:1: undeclared reference to 'tol'"}},
		{"non-bool output", []config.Gate{gate("str", `tool.name`)}, []string{"gates[0] (str)", "want bool"}},
		{"empty", []config.Gate{gate("none", "  ")}, []string{"gates[0] (none): when: empty condition"}},
		{"every problem", []config.Gate{gate("ok", destructive), gate("a", `1 +`), gate("b", `"x"`)}, []string{"gates[1] (a)", "gates[2] (b)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.gates)
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *CompileError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCompileDefaults(t *testing.T) {
	g := compile(t, config.Gate{Name: "x", When: "true", Approvers: config.Approvers{Roles: []string{"sre"}}})
	gt, ok := g.Lookup("x")
	if !ok {
		t.Fatal("gate x not found")
	}
	if gt.Expiry != 15*time.Minute || gt.Quorum != 1 || gt.OnRefusal != config.OnRefusalContinue {
		t.Errorf("defaults: expiry %v quorum %d on_refusal %q", gt.Expiry, gt.Quorum, gt.OnRefusal)
	}
	if (&Gates{}).Empty() != true || g.Empty() {
		t.Errorf("Empty is wrong")
	}
	var none *Gates
	if none.CouldMatch("t", "Bash", Input{}) {
		t.Errorf("nil gates could match")
	}
	if got, _ := none.Match(bash("rm -rf /")); got != nil {
		t.Errorf("nil gates matched")
	}
}

func TestCouldMatch(t *testing.T) {
	g := compile(t,
		gate("destructive-shell", destructive, "team-a"),
		gate("writes", `tool.name in ["Write", "Edit"] && tool.input.path.startsWith("/etc")`),
		gate("budget", `trajectory.budget_used > 0.9`),
	)
	tests := []struct {
		name, tenant, tool string
		used               float64
		want               bool
	}{
		{"Bash could match", "team-a", "Bash", 0, true},
		{"Read cannot", "team-a", "Read", 0, false},
		{"Bash of another tenant cannot", "team-b", "Bash", 0, false},
		{"Write could, whatever the path", "team-b", "Write", 0, true},
		{"any tool when the budget is spent", "team-b", "Read", 0.95, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := g.CouldMatch(tt.tenant, tt.tool, Input{BudgetUsed: tt.used})
			if got != tt.want {
				t.Errorf("CouldMatch(%s, %s) = %v, want %v", tt.tenant, tt.tool, got, tt.want)
			}
		})
	}
	// A condition over the input only is unsure for every tool.
	g2 := compile(t, gate("input-only", `tool.input.size() > 3`))
	if !g2.CouldMatch("t", "Read", Input{}) {
		t.Errorf("an input-only condition was judged without the input")
	}
}

func TestGateRequest(t *testing.T) {
	g := compile(t, gate("destructive-shell", destructive))
	gt, _ := g.Lookup("destructive-shell")
	c, _ := Canonical("Bash", []byte(`{"command":"rm -rf /"}`))
	r := gt.Request("", c, destructive, t0)
	if r.State != Pending || r.Digest != c.Digest() || r.Quorum != 2 || !r.DistinctRoles ||
		!r.ExpiresAt.Equal(t0.Add(15*time.Minute)) || r.Preview == "" || r.Gate != "destructive-shell" {
		t.Errorf("Request = %+v", r)
	}
}

func BenchmarkMatch(b *testing.B) {
	g := compile(b,
		gate("writes", `tool.name in ["Write", "Edit"] && tool.input.path.startsWith("/etc")`),
		gate("destructive-shell", destructive),
	)
	in := bash("cd /srv && ls -la && git status")
	b.ReportAllocs()
	for b.Loop() {
		if gt, _ := g.Match(in); gt != nil {
			b.Fatal("matched")
		}
	}
}

func BenchmarkCouldMatch(b *testing.B) {
	g := compile(b, gate("destructive-shell", destructive))
	b.ReportAllocs()
	for b.Loop() {
		if !g.CouldMatch("team-a", "Bash", Input{}) {
			b.Fatal("could not match")
		}
	}
}

func TestExplain(t *testing.T) {
	g := compile(t,
		gate("team-b-only", `tool.name == "Bash"`, "team-b"),
		gate("shell", `tool.name.lowerAscii() == "bash" && tool.input.command.contains("rm")`),
		gate("also-shell", `tool.name == "Bash"`),
		gate("needs-path", `tool.input.path.startsWith("/etc")`),
	)
	got := g.Explain(bash("rm x"))
	want := []struct {
		applies, matches, decides bool
		matched                   string
	}{
		{false, false, false, ""},
		{true, true, true, "rm"},
		{true, true, false, ""},
		{true, true, false, ""}, // no path: an evaluation error, which holds
	}
	if len(got) != len(want) {
		t.Fatalf("verdicts = %+v", got)
	}
	for i, w := range want {
		v := got[i]
		var matched string
		if len(v.Matched) > 0 {
			matched = v.Matched[0].Text
		}
		if v.Applies != w.applies || v.Matches != w.matches || v.Decides != w.decides || matched != w.matched {
			t.Errorf("gate %s: %+v, want %+v", v.Gate, v, w)
		}
	}
	if !strings.HasPrefix(got[3].Why, "evaluation error") {
		t.Errorf("why = %q", got[3].Why)
	}
	if gate, _ := g.Match(bash("rm x")); gate == nil || gate.Name != "shell" {
		t.Errorf("Match disagrees with Explain: %v", gate)
	}
}

// The example gate reads the tool name through lowerAscii: a call to
// another tool is known not to match before its input is seen.
func TestCouldMatchLowerAscii(t *testing.T) {
	g := compile(t, gate("shell", `tool.name.lowerAscii() == "bash" && tool.input.command.matches("rm")`))
	if g.CouldMatch("team-a", "Read", Input{}) {
		t.Error("a Read call could match a gate on bash")
	}
	if !g.CouldMatch("team-a", "BASH", Input{}) {
		t.Error("a BASH call was judged unable to match")
	}
}
