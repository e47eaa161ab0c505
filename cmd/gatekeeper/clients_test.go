package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gatekeeper/mockprovider"
)

// The real-client tests drive unmodified agents (Claude Code, Codex CLI)
// through a gatekeeper process against the mock provider, with a gate on
// their shell tool and a decision long after the agents' own stream idle
// watchdogs (300 s) would have given up on a silent stream.
//
// The agents are found on PATH (`claude`, `codex`, `gemini`); .ci/run installs the
// pinned versions. Without them the tests skip, except under CI (CI set),
// where they fail. GATEKEEPER_CLIENT_HOLD overrides the 6 minute hold, to
// try the tests quickly or to hold longer.

const (
	clientHoldDefault = 6 * time.Minute
	clientKey         = "vk-client-test-0001"
	clientApprover    = "client-approver-token-0001"
)

// agentBinary finds an agent's executable; without it the agent's cases
// skip, and under CI the test fails.
func agentBinary(t *testing.T, name string) (string, bool) {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p, true
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not on PATH: CI must install the real agents (see .ci/run)", name)
	}
	t.Logf("SKIPPING the %s cases: %s is not on PATH", name, name)
	return "", false
}

// clientHold is how long the tests hold a call before deciding.
func clientHold(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("GATEKEEPER_CLIENT_HOLD")
	if v == "" {
		return clientHoldDefault
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("GATEKEEPER_CLIENT_HOLD=%q: want a duration like 6m", v)
	}
	return d
}

// agentRun is one agent process: its command line and environment for
// the gatekeeper at, with home as its own home directory.
type agentRun func(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd

// agentTarget is where an agent is pointed and what it is asked.
type agentTarget struct {
	base   string // gatekeeper's root URL
	traj   string // the run's name in the path (/t/<traj>/...); "" leaves the run to gatekeeper to find
	prompt string
}

// url is the root an agent's provider path goes under: the base, or the
// base and the run's name.
func (a agentTarget) url() string {
	if a.traj == "" {
		return a.base
	}
	return a.base + "/t/" + a.traj
}

// claudeRun runs Claude Code in print mode with default settings; as root
// it needs IS_SANDBOX to skip permission prompts. Non-essential traffic is
// off because the mock would answer the session's title request, which
// declares no tools, with the scripted shell call; the stream watchdog's
// settings are Claude Code's defaults.
func claudeRun(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd {
	cmd := exec.Command(bin, "-p", at.prompt,
		"--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions", "--model", "claude-sonnet-4-5")
	cmd.Env = agentEnv(home,
		"ANTHROPIC_BASE_URL="+at.url()+"/anthropic",
		"ANTHROPIC_API_KEY="+clientKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"IS_SANDBOX=1")
	return cmd
}

// codexRun runs Codex CLI's exec mode on a custom provider (HTTP
// streaming) with default stream settings.
func codexRun(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd {
	t.Helper()
	cfg := fmt.Sprintf(`model = "gpt-5.1-codex"
model_provider = "gatekeeper"

[model_providers.gatekeeper]
name = "gatekeeper"
base_url = "%s/openai/v1"
env_key = "GATEKEEPER_KEY"
wire_api = "responses"
`, at.url())
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", at.prompt)
	cmd.Env = agentEnv(home, "CODEX_HOME="+home, "GATEKEEPER_KEY="+clientKey)
	return cmd
}

// codexBuiltinRun runs Codex CLI's exec mode on its built-in provider
// pointed at gatekeeper: a WebSocket attempt (refused), then HTTP
// streaming.
func codexBuiltinRun(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd {
	t.Helper()
	cfg := fmt.Sprintf("model = \"gpt-5.1-codex\"\nopenai_base_url = \"%s/openai/v1\"\n", at.url())
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", at.prompt)
	cmd.Env = agentEnv(home, "CODEX_HOME="+home, "CODEX_API_KEY="+clientKey)
	return cmd
}

// geminiRun runs Gemini CLI non-interactively with every tool allowed
// (--yolo), pointed at gatekeeper by GOOGLE_GEMINI_BASE_URL with the
// virtual key as GEMINI_API_KEY. Its settings turn off what would leave
// the machine (usage statistics, telemetry, update checks) and trust the
// working directory.
func geminiRun(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd {
	t.Helper()
	dir := filepath.Join(home, ".gemini")
	settings := `{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},
"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false},"security":{"auth":{"selectedType":"gemini-api-key"},"folderTrust":{"enabled":false}}}`
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", at.prompt, "--yolo", "--model", "gemini-2.5-flash",
		"--output-format", "json")
	cmd.Env = agentEnv(home,
		"GOOGLE_GEMINI_BASE_URL="+at.url()+"/gemini",
		"GEMINI_API_KEY="+clientKey,
		"GEMINI_CLI_TRUST_WORKSPACE=true",
		"GEMINI_CLI_NO_RELAUNCH=true")
	return cmd
}

// agentEnv is the agent's environment: this process's PATH, a home of its
// own, no provider settings of the machine it runs on.
func agentEnv(home string, kv ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + os.TempDir(), "LANG=C.UTF-8", "TERM=dumb"}
	return append(env, kv...)
}

// clientScript makes the mock answer the agent's first turn (the prompt,
// the agent's shell declared, no tool results) with a call of its shell
// (a.input), and every later turn, and side calls that declare no tools
// (session titles), with its default text.
func clientScript(a matrixAgent) *mockprovider.Script {
	no := false
	return &mockprovider.Script{Rules: []mockprovider.Rule{{
		When: mockprovider.Match{LastUserContains: matrixPrompt, DeclaresTool: a.tool, HasToolResults: &no},
		Turn: mockprovider.TurnRef{Name: "held"},
	}}, Turns: map[string]mockprovider.TurnSpec{
		"held": {Kind: mockprovider.KindTool, Text: "Cleaning up the build directory now.", Thinking: a.thinking,
			Tools: []mockprovider.ToolCall{{Name: a.tool, Input: a.input}}},
	}}
}

func clientConfig(t *testing.T, mockURL string) string {
	t.Helper()
	text := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: anthropic, api: anthropic, base_url: %[1]q, keys: [{name: k, key: sk-upstream-0001}]}
  - {name: openai, api: openai, base_url: %[1]q, keys: [{name: k, key: sk-upstream-0002}]}
  - {name: gemini, api: gemini, base_url: %[1]q, keys: [{name: k, key: goog-upstream-0003}]}
tenants:
  - {name: agents, keys: [%[2]s]}
gates:
  - name: shell-marker
    when: 'tool.class == "shell" && tool.command.contains("marker")'
    approvers: {roles: [secops]}
    expiry: 1h
admin:
  tokens:
    - {name: carol, token: %[3]s, roles: ["approver:secops"]}
log: {level: info, format: json}
`, mockURL, clientKey, clientApprover)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRealClientsHoldPastWatchdog: Claude Code and Codex CLI, unmodified,
// propose a shell command that a gate holds; the decision comes after 6
// minutes, past both agents' 300 s stream idle timeouts. Approved, the
// command runs exactly once; denied, it never runs and the agent finishes
// on the refusal continuation. The agent exits 0 and the model is called
// once for the held turn.
//
// Every case is set up on the test's goroutine, then all holds run at once
// (they mostly wait): subtests with t.Parallel would run only -parallel
// (GOMAXPROCS) of them at a time and multiply the test's duration.
func TestRealClientsHoldPastWatchdog(t *testing.T) {
	claude, codex, gemini, opencode := matrixAgents[0], matrixAgents[2], matrixAgents[3], matrixAgents[4]
	codexBuiltin := codex
	codexBuiltin.run = codexBuiltinRun
	cases := []struct {
		name    string
		agent   matrixAgent
		approve bool
	}{
		{"claude approve", claude, true},
		{"claude deny", claude, false},
		{"codex approve", codex, true},
		{"codex deny", codex, false},
		{"codex builtin approve", codexBuiltin, true},
		{"gemini approve", gemini, true},
		{"gemini deny", gemini, false},
		{"opencode approve", opencode, true},
		{"opencode deny", opencode, false},
	}
	hold := clientHold(t)
	held := make([]*heldCase, len(cases))
	done := make([]chan error, len(cases))
	for i, tc := range cases {
		done[i] = make(chan error, 1)
		bin, ok := tc.agent.find(t)
		if !ok {
			continue
		}
		traj := strings.ReplaceAll(tc.name, " ", "-")
		held[i] = startHeldCase(t, bin, tc.agent, traj)
		go func() { done[i] <- held[i].decide(tc.approve, hold) }()
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if held[i] == nil {
				t.Skipf("SKIPPED: %s is not installed; install it to run the real-client tests (see .ci/run)", tc.agent.name)
			}
			if err := <-done[i]; err != nil {
				t.Fatalf("%v\n%s", err, held[i].report())
			}
			t.Logf("%s after a %s hold: exit 0, the command ran %d times", map[bool]string{true: "approved", false: "denied"}[tc.approve], hold, held[i].ran)
		})
	}
}

// heldCase is one agent run through its own gatekeeper and mock provider.
type heldCase struct {
	mock           *mockprovider.Server
	gk             *replica
	traj, marker   string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan error
	ran            int // lines the command wrote to marker
}

// startHeldCase starts the mock, gatekeeper and the agent; the test's
// cleanup stops all three, the agent by its process group.
func startHeldCase(t *testing.T, bin string, a matrixAgent, traj string) *heldCase {
	t.Helper()
	dir, home := t.TempDir(), t.TempDir()
	c := &heldCase{traj: traj, marker: filepath.Join(dir, "marker"), stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	c.mock = mockprovider.New(mockprovider.Options{Script: clientScript(a)})
	ms := httptest.NewServer(c.mock)
	t.Cleanup(ms.Close)
	c.gk = startReplica(t, clientConfig(t, ms.URL))
	c.cmd = a.run(t, bin, agentTarget{base: c.gk.base, traj: traj, prompt: matrixPrompt}, home)
	c.cmd.Dir = dir
	c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wait := make(chan error, 1)
	go func() { wait <- c.cmd.Wait() }()
	go func() {
		err := <-wait
		c.exited <- err
		close(c.exited)
	}()
	t.Cleanup(func() {
		// The agent's process group, by its id: the agent and the
		// commands it started. Killing a group that already exited
		// finds nothing.
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	})
	return c
}

func (c *heldCase) report() string {
	return fmt.Sprintf("agent stdout:\n%s\nagent stderr:\n%s\ngatekeeper:\n%s", tail(c.stdout.String()), tail(c.stderr.String()), tail(c.gk.logs.String()))
}

// decide waits for the agent's call to be held, holds it for hold, then
// approves or denies it and checks what the agent and the model did.
func (c *heldCase) decide(approve bool, hold time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), hold+5*time.Minute)
	defer cancel()

	// The call is held.
	var list struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	for i := 0; i < 240 && len(list.Approvals) == 0; i++ {
		select {
		case err := <-c.exited:
			return fmt.Errorf("the agent exited (%v) before its call was held", err)
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := adminJSON(ctx, "GET", c.gk.base+"/admin/v1/approvals?state=pending&root="+c.traj, &list); err != nil {
			return err
		}
	}
	if len(list.Approvals) != 1 {
		return fmt.Errorf("pending requests %+v, want 1", list.Approvals)
	}

	// Past the agents' watchdogs, the agent still waits.
	select {
	case err := <-c.exited:
		return fmt.Errorf("the agent gave up on the held turn (%v)", err)
	case <-time.After(hold):
	}
	if _, err := os.Stat(c.marker); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the command ran before the decision (%v)", err)
	}
	verb := "deny"
	if approve {
		verb = "approve"
	}
	if code, err := adminJSON(ctx, "POST", c.gk.base+"/admin/v1/approvals/"+list.Approvals[0].ID+"/"+verb, nil); err != nil || code != 200 {
		return fmt.Errorf("%s: %d %v", verb, code, err)
	}

	select {
	case err := <-c.exited:
		if err != nil {
			return fmt.Errorf("the agent failed: %v", err)
		}
	case <-ctx.Done():
		return errors.New("the agent did not finish after the decision")
	}
	out, err := os.ReadFile(c.marker)
	c.ran = strings.Count(string(out), "ran\n")
	switch {
	case approve && string(out) != "ran\n":
		return fmt.Errorf("approved: the command ran %d times (marker %q, %v)", c.ran, out, err)
	case !approve && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("denied: the command ran (marker %q, %v)", out, err)
	}

	// The model was called once for the held turn; then the agent's next
	// turn with the command's result (approved) or gatekeeper's refusal
	// continuation (denied), and nothing else with a tool result.
	var held, refused, results int
	for _, r := range c.mock.Requests() {
		switch {
		case r.API == "":
		case r.Turn == "held":
			held++
		case r.Turn == "default_tool_results" && bytes.Contains(r.Body, []byte("APPROVAL_DENIED")):
			refused++
		case r.Turn == "default_tool_results":
			results++
		}
	}
	want := [3]int{1, 0, 1}
	if !approve {
		want = [3]int{1, 1, 0}
	}
	if got := [3]int{held, refused, results}; got != want {
		return fmt.Errorf("model calls (held turn, refusal continuation, agent's next turn) = %v, want %v", got, want)
	}
	return nil
}

// adminJSON sends an admin API request as the approver and decodes a 200
// answer into out.
func adminJSON(ctx context.Context, method, url string, out any) (int, error) {
	return adminJSONAs(ctx, clientApprover, method, url, out)
}

// adminJSONAs is adminJSON with the admin token token.
func adminJSONAs(ctx context.Context, token, method, url string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w: %s", method, url, err, b)
		}
	}
	return resp.StatusCode, nil
}

// tail is the end of a long log.
func tail(s string) string {
	const max = 6000
	if len(s) > max {
		return "…" + s[len(s)-max:]
	}
	return s
}
