package approvals

import (
	"encoding/json"
	"strings"
	"testing"

	"gatekeeper/config"
)

// The tools of the agents gatekeeper is tried with, as they call them,
// and what a gate reads of each.
var classCases = []struct {
	agent, tool, input string
	want               Class
}{
	{"Claude Code", "Bash", `{"command":"rm -rf /srv","description":"clean"}`, Class{Name: ClassShell, Command: "rm -rf /srv"}},
	{"opencode", "bash", `{"command":"ls -la","description":"list"}`, Class{Name: ClassShell, Command: "ls -la"}},
	{"Codex shell", "shell", `{"command":["bash","-lc","rm -rf /srv"],"workdir":"/w"}`, Class{Name: ClassShell, Command: "bash -lc rm -rf /srv"}},
	{"Codex shell_command", "shell_command", `{"command":"git status","workdir":"/w"}`, Class{Name: ClassShell, Command: "git status"}},
	{"Codex exec_command", "exec_command", `{"cmd":"rm -fr build","yield_time_ms":1000}`, Class{Name: ClassShell, Command: "rm -fr build"}},
	{"Codex write_stdin", "write_stdin", `{"session_id":3,"chars":"rm -rf /\n"}`, Class{Name: ClassShell, Command: "rm -rf /\n"}},
	{"Codex local_shell", "local_shell", `{"type":"exec","command":["rm","-rf","/"],"env":{}}`, Class{Name: ClassShell, Command: "rm -rf /"}},
	{"Codex code mode", "exec", `"await tools.exec_command({cmd: 'rm -rf /'})"`, Class{Name: ClassShell, Command: "await tools.exec_command({cmd: 'rm -rf /'})"}},
	{"Codex apply_patch", "apply_patch", `"*** Begin Patch\n*** End Patch"`, Class{Name: ClassFileWrite}},
	{"Gemini CLI", "run_shell_command", `{"command":"kubectl delete ns prod","description":"d"}`, Class{Name: ClassShell, Command: "kubectl delete ns prod"}},
	{"Qwen Code", "run_shell_command", `{"command":"drop table users"}`, Class{Name: ClassShell, Command: "drop table users"}},
	{"an SDK app", "run_in_sandbox", `{"command":"make test"}`, Class{Name: ClassShell, Command: "make test"}},
	{"an SDK app, cmd", "terminal_tool", `{"cmd":"make"}`, Class{Name: ClassShell, Command: "make"}},
	{"Claude Code Write", "Write", `{"file_path":"/etc/hosts","content":"x"}`, Class{Name: ClassFileWrite, Path: "/etc/hosts"}},
	{"Claude Code Edit", "Edit", `{"file_path":"/w/a.go","old_string":"a","new_string":"b"}`, Class{Name: ClassFileWrite, Path: "/w/a.go"}},
	{"opencode write", "write", `{"filePath":"/w/b.go","content":"x"}`, Class{Name: ClassFileWrite, Path: "/w/b.go"}},
	{"Gemini CLI write_file", "write_file", `{"file_path":"/w/c","content":"x"}`, Class{Name: ClassFileWrite, Path: "/w/c"}},
	{"Gemini CLI replace", "replace", `{"file_path":"/w/d","old_string":"a","new_string":"b"}`, Class{Name: ClassFileWrite, Path: "/w/d"}},
	{"Claude Code Read", "Read", `{"file_path":"/w/notes","command":"rm -rf /"}`, Class{Name: ClassFileRead, Path: "/w/notes"}},
	{"Claude Code WebFetch", "WebFetch", `{"url":"https://example.com/x","prompt":"p"}`, Class{Name: ClassWebFetch, URL: "https://example.com/x"}},
	{"opencode webfetch", "webfetch", `{"url":"https://example.com/y","format":"text"}`, Class{Name: ClassWebFetch, URL: "https://example.com/y"}},
	{"Gemini CLI web_fetch", "web_fetch", `{"prompt":"summarize https://example.com"}`, Class{Name: ClassWebFetch}},
	{"Claude Code MCP", "mcp__github__create_issue", `{"title":"t"}`, Class{Name: ClassMCP}},
	{"another tool", "get_weather", `{"city":"Paris"}`, Class{}},
	{"a command that is not text", "my_tool", `{"command":{"op":"rm"}}`, Class{}},
}

func TestClassify(t *testing.T) {
	for _, c := range classCases {
		t.Run(c.agent, func(t *testing.T) {
			var input any
			if err := json.Unmarshal([]byte(c.input), &input); err != nil {
				t.Fatal(err)
			}
			if got := Classify(c.tool, input); got != c.want {
				t.Errorf("Classify(%s, %s) = %+v, want %+v", c.tool, c.input, got, c.want)
			}
		})
	}
}

// A gate on the class holds every agent's shell running rm -rf, reads the
// command in one place, and lets the others through.
func TestGateOnClass(t *testing.T) {
	gates, err := Compile([]config.Gate{{Name: "shell", When: `tool.class == "shell" && tool.command.contains("rm -rf")`}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classCases {
		var input any
		_ = json.Unmarshal([]byte(c.input), &input)
		gate, _ := gates.Match(Input{ToolName: c.tool, ToolInput: input})
		want := c.want.Name == ClassShell && strings.Contains(c.want.Command, "rm -rf")
		if (gate != nil) != want {
			t.Errorf("%s %s: held %v, want %v", c.tool, c.input, gate != nil, want)
		}
	}
}

// Input that is not JSON, of a tool that takes JSON, cannot be read: a
// condition on tool.command fails to evaluate and holds the call (fail
// closed), as a condition on tool.input always did. A free-text tool's
// text is read as it is.
func TestClassOfUnreadableInput(t *testing.T) {
	gates, err := Compile([]config.Gate{{Name: "shell", When: `tool.class == "shell" && tool.command.contains("rm -rf")`}})
	if err != nil {
		t.Fatal(err)
	}
	gate, why := gates.Match(Input{ToolName: "Bash", ToolInput: `{"command": "ls", oops`})
	if gate == nil || !strings.HasPrefix(why, "evaluation error") {
		t.Errorf("unreadable Bash input: gate %v, why %q", gate, why)
	}
	if gate, why := gates.Match(Input{ToolName: "exec", ToolInput: "ls -la"}); gate != nil {
		t.Errorf("code mode's exec running ls: held (%s)", why)
	}
	if gate, _ := gates.Match(Input{ToolName: "exec", ToolInput: "rm -rf /"}); gate == nil {
		t.Error("code mode's exec running rm -rf: not held")
	}
}

// A call whose input cannot be read one way is held by the first gate
// that could match its tool whatever its input: by its class when its
// name says it, and any tool the class is not known of by name (its
// input may make it a shell).
func TestCouldMatchByClass(t *testing.T) {
	gates, err := Compile([]config.Gate{{Name: "shell", When: `tool.class == "shell" && tool.command.contains("rm")`}})
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]bool{"Bash": true, "run_shell_command": true, "exec_command": true,
		"Read": false, "Write": false, "WebFetch": false, "mcp__x__y": false, "made_up_tool": true} {
		if got := gates.CouldMatch("", tool, Input{}); got != want {
			t.Errorf("CouldMatch(%s) = %v, want %v", tool, got, want)
		}
	}
}
