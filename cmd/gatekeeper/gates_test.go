package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"gatekeeper/approvals"
	"gatekeeper/config"
)

// exampleGateCalls are spellings the example gate of config.yaml and of
// the approvals guide must hold, and must let through.
var exampleGateCalls = []struct {
	name, tool, command string
	held                bool
}{
	{"rm -rf", "Bash", "rm -rf /", true},
	{"rm -fr", "Bash", "rm -fr /", true},
	{"rm -r -f", "Bash", "rm -r -f /", true},
	{"rm -f -r", "Bash", "rm -f -r /", true},
	{"two spaces", "Bash", "rm  -rf  /", true},
	{"spaces between flags", "Bash", "rm -r   -f /srv", true},
	{"a tab", "Bash", "rm\t-rf /", true},
	{"long flags", "Bash", "rm --recursive --force /", true},
	{"long flags reversed", "Bash", "rm --force --recursive build", true},
	{"mixed long and short", "Bash", "rm -r --force build", true},
	{"capital R", "Bash", "rm -Rf /", true},
	{"more flags", "Bash", "rm -rfv /tmp/x", true},
	{"flag letters around", "Bash", "rm -vfr /tmp/x", true},
	{"flags after the operand", "Bash", "rm -r build -f", true},
	{"sudo", "Bash", "sudo rm -rf /", true},
	{"full path", "Bash", "/bin/rm -rf /", true},
	{"after other commands", "Bash", "cd / && rm -rf *", true},
	{"at the end of a long command", "Bash", "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /", true},
	{"tool name lowercase", "bash", "rm -rf /", true},
	{"tool name uppercase", "BASH", "rm -fr /", true},
	{"drop table", "Bash", `psql -c "DROP TABLE users"`, true},
	{"drop table lowercase, two spaces", "Bash", `psql -c "drop  table users"`, true},
	{"drop database", "Bash", `mysql -e "Drop Database prod"`, true},
	{"kubectl delete", "Bash", "kubectl delete ns prod", true},
	{"kubectl with flags before delete", "Bash", "kubectl -n prod delete pod x", true},

	{"rm without flags", "Bash", "rm notes.txt", false},
	{"rm recursive only", "Bash", "rm -r build", false},
	{"rm force only", "Bash", "rm -f build.log", false},
	{"rm interactive verbose", "Bash", "rm -i -v x", false},
	{"rmdir", "Bash", "rmdir -p a/b", false},
	{"a word ending in rm", "Bash", "firm -rf", false},
	{"flags of another command", "Bash", "ls -rf; rm -i x", false},
	{"force for another command", "Bash", "grep -r TODO . && rm -i x", false},
	{"drop tables in prose", "Bash", "echo we never drop tables", false},
	{"kubectl get", "Bash", "kubectl get pods", false},
	{"plain listing", "Bash", "ls -la", false},
	{"another tool", "Read", "rm -rf /", false},
}

// exampleGateAgentCalls are other agents' shells, as they call them: the
// example gate reads each one's command through tool.class and
// tool.command.
var exampleGateAgentCalls = []struct {
	name, tool, input string
	held              bool
}{
	{"Codex shell", "shell", `{"command":["bash","-lc","rm -rf /srv"],"workdir":"/w"}`, true},
	{"Codex shell, harmless", "shell", `{"command":["bash","-lc","ls -la"]}`, false},
	{"Codex shell_command", "shell_command", `{"command":"rm -fr build"}`, true},
	{"Codex exec_command", "exec_command", `{"cmd":"kubectl -n prod delete pod x","yield_time_ms":1000}`, true},
	{"Codex write_stdin", "write_stdin", `{"session_id":1,"chars":"rm -r -f /\n"}`, true},
	{"Codex local_shell", "local_shell", `{"type":"exec","command":["rm","-rf","/"]}`, true},
	{"Gemini CLI", "run_shell_command", `{"command":"rm -rf /","description":"wipe"}`, true},
	{"Qwen Code, harmless", "run_shell_command", `{"command":"git status"}`, false},
	{"opencode", "bash", `{"command":"psql -c \"DROP TABLE users\"","description":"d"}`, true},
	{"an SDK app's shell", "run_in_sandbox", `{"command":"rm -rf /"}`, true},
	{"a file write", "Write", `{"file_path":"/tmp/rm -rf","content":"rm -rf /"}`, false},
	{"Bash input that is not JSON", "Bash", `{"command": "ls", oops`, true},
}

// guideGates returns the gates of the first YAML example under
// "## Approval gates" in docs/guide/approvals.md.
func guideGates(t *testing.T) []config.Gate {
	t.Helper()
	b, err := os.ReadFile("../../docs/guide/approvals.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Approval gates\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/guide/approvals.md has no YAML example under ## Approval gates")
	}
	var doc struct {
		Gates []config.Gate `yaml:"gates"`
	}
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Gates
}

func TestExampleGate(t *testing.T) {
	cfg, err := config.Load("../../config.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]config.Gate{"config.yaml": cfg.Gates, "guide": guideGates(t)}
	for source, gs := range sources {
		gates, err := approvals.Compile(gs)
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		for _, c := range exampleGateCalls {
			t.Run(source+"/"+c.name, func(t *testing.T) {
				args, _ := json.Marshal(map[string]string{"command": c.command})
				r := testCall(gates, approvals.Input{Tenant: "team-a"}, testCallInput{Name: c.tool, Input: args})
				if held := r.HeldBy == "destructive-shell"; held != c.held {
					t.Errorf("%s %q: held %v, want %v (verdicts %+v)", c.tool, c.command, held, c.held, r.Verdicts)
				}
				if c.held && strings.HasPrefix(r.Verdicts[0].Why, "evaluation error") {
					t.Errorf("held by an evaluation error, not by the condition: %s", r.Verdicts[0].Why)
				}
			})
		}
	}
}

func TestExampleGateEveryAgentsShell(t *testing.T) {
	cfg, err := config.Load("../../config.yaml", env())
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]config.Gate{"config.yaml": cfg.Gates, "guide": guideGates(t)}
	for source, gs := range sources {
		gates, err := approvals.Compile(gs)
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		for _, c := range exampleGateAgentCalls {
			t.Run(source+"/"+c.name, func(t *testing.T) {
				r := testCall(gates, approvals.Input{Tenant: "team-a"}, testCallInput{Name: c.tool, Input: []byte(c.input)})
				if held := r.HeldBy == "destructive-shell"; held != c.held {
					t.Errorf("%s %s: held %v, want %v (class %+v, verdicts %+v)", c.tool, c.input, held, c.held, r.Class, r.Verdicts)
				}
			})
		}
	}
}

func TestGatesTestVerb(t *testing.T) {
	stdin := strings.NewReader(`{"name": "bash", "input": {"command": "rm -r  -f /srv"}}
{"name": "Bash", "input": "{\"command\": \"ls\"}"}
{"name": "Bash", "input": "not json"}
`)
	var out, errOut bytes.Buffer
	if err := runGates([]string{"test", "-config", "../../config.yaml"}, env(), stdin, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		`call 1: bash {"command":"rm -r  -f /srv"}`,
		"class: shell, command: rm -r  -f /srv",
		"gate destructive-shell: MATCHES: holds the call",
		"⟦rm -r  -f⟧ /srv",
		"→ held by destructive-shell",
		`call 2: Bash {"command":"ls"}`,
		"→ not held",
		// Arguments that are not JSON are judged on their text, which the
		// condition cannot read: held to be safe.
		"call 3:", "evaluation error (held to be safe)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "→ held by") != 2 {
		t.Errorf("want calls 1 and 3 held:\n%s", text)
	}

	out.Reset()
	stdin = strings.NewReader(`{"name": "Bash", "input": {"command": "kubectl delete ns x"}}`)
	if err := runGates([]string{"test", "-config", "../../config.yaml", "-json"}, env(), stdin, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var results []gateTestResult
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(results) != 1 || results[0].HeldBy != "destructive-shell" || len(results[0].Verdicts) != 1 ||
		len(results[0].Verdicts[0].Matched) != 1 || results[0].Verdicts[0].Matched[0].Text != "kubectl delete" {
		t.Errorf("results = %+v", results)
	}
}

func TestGatesTestVerbErrors(t *testing.T) {
	cases := []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"no verb", "", nil, ""},
		{"unknown verb", "", []string{"check"}, ""},
		{"no call", "", []string{"test", "-config", "../../config.yaml"}, "no call"},
		{"not JSON", "{", []string{"test", "-config", "../../config.yaml"}, "call 1"},
		{"no name", `{"input": {}}`, []string{"test", "-config", "../../config.yaml"}, "no name"},
		{"argument", "", []string{"test", "-config", "../../config.yaml", "extra"}, "stdin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runGates(c.args, env(), strings.NewReader(c.stdin), &out, &out)
			if c.want == "" {
				if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "gates test") {
					t.Errorf("err = %v, usage %q", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func FuzzParseTestCalls(f *testing.F) {
	f.Add([]byte(`{"name":"Bash","input":{"command":"rm -rf /"}}`))
	f.Add([]byte(`{"name":"Bash","input":"{\"command\":\"ls\"}"} {"name":"x"}`))
	f.Add([]byte(`{"name":"Bash","input":"\u202e"}`))
	f.Add([]byte(`[1,2]`))
	gates, err := approvals.Compile([]config.Gate{{Name: "g", When: `tool.input.command.matches("rm")`, Approvers: config.Approvers{Roles: []string{"secops"}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		calls, err := parseTestCalls(data)
		if err != nil {
			return
		}
		for _, c := range calls {
			if c.Name == "" {
				t.Fatal("a call without a name was accepted")
			}
			r := testCall(gates, approvals.Input{}, c)
			if !json.Valid(r.Call.Input) {
				t.Fatalf("call input %q is not JSON", r.Call.Input)
			}
		}
	})
}
