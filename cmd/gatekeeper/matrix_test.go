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

// The real-agent matrix: every agent gatekeeper is tried with, unmodified
// and pointed at gatekeeper by its base URL only (no run named in the
// path or a header), so that gatekeeper finds each session's run itself.
// docs/guide/agents.md holds the same list as a table.
//
// The CLIs are found on PATH (`claude` is the pinned Claude Code); the
// newest Claude Code and the two SDKs by their paths in the agents
// directory .ci/run installs into (GATEKEEPER_AGENTS_DIR, else
// $XDG_CACHE_HOME or ~/.cache, then gatekeeper-ci/agents). Without them an
// agent's case skips, and under CI fails.

// matrixPrompt is every session's first prompt: the mock answers a request
// that carries it and declares the agent's shell with a call of that shell.
const matrixPrompt = "Clean up the build directory."

// matrixAgent is one row of the matrix.
type matrixAgent struct {
	name string
	// find returns the program to run, or false when the agent is not
	// installed (the case then skips, or fails under CI).
	find func(t *testing.T) (string, bool)
	run  agentRun
	// tool is the agent's shell tool as it declares it; input is a call
	// of it that appends "ran" to ./marker.
	tool  string
	input map[string]any
	// thinking, when set, is the reply's thinking: Gemini's replies that
	// call tools carry a thought signature with the call, which the mock
	// sends with thinking, and which is how gatekeeper follows a Gemini
	// CLI session (its calls have no ids of the provider's).
	thinking string
}

func onPath(name string) func(t *testing.T) (string, bool) {
	return func(t *testing.T) (string, bool) { return agentBinary(t, name) }
}

// inAgentsDir finds a file of the agents directory; prog is what runs it
// (the file itself when prog is "").
func inAgentsDir(rel, prog string) func(t *testing.T) (string, bool) {
	return func(t *testing.T) (string, bool) {
		t.Helper()
		p := filepath.Join(agentsDir(), rel)
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed: CI must install the real agents (see .ci/run)", p)
			}
			t.Logf("SKIPPING: %s is not installed", p)
			return "", false
		}
		if prog == "" {
			return p, true
		}
		return agentBinary(t, prog)
	}
}

// agentsDir is where .ci/run installs the agents.
func agentsDir() string {
	if d := os.Getenv("GATEKEEPER_AGENTS_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "gatekeeper-ci", "agents")
}

func shellCall(arg string) map[string]any {
	return map[string]any{arg: "echo ran >> marker"}
}

var matrixAgents = []matrixAgent{
	{"claude-code", onPath("claude"), claudeRun, "Bash", shellCall("command"), ""},
	{"claude-code-newest", inAgentsDir("node_modules/claude-code-newest/bin/claude.exe", ""), claudeRun, "Bash", shellCall("command"), ""},
	{"codex", onPath("codex"), codexRun, "exec_command", shellCall("cmd"), ""},
	{"gemini-cli", onPath("gemini"), geminiRun, "run_shell_command", shellCall("command"), "The build directory holds stale files."},
	{"opencode-anthropic", onPath("opencode"), opencodeRun("anthropic"), "bash", opencodeCall(), ""},
	{"opencode-openai-compatible", onPath("opencode"), opencodeRun("openai-compatible"), "bash", opencodeCall(), ""},
	{"opencode-openai", onPath("opencode"), opencodeRun("openai"), "bash", opencodeCall(), ""},
	{"qwen-code", onPath("qwen"), qwenRun, "run_shell_command", shellCall("command"), ""},
	{"openai-agents-responses", inAgentsDir("node_modules/@openai/agents/package.json", "node"), openaiAgentsRun("responses"), "run_command", shellCall("command"), ""},
	{"openai-agents-chat", inAgentsDir("node_modules/@openai/agents/package.json", "node"), openaiAgentsRun("chat_completions"), "run_command", shellCall("command"), ""},
	{"claude-agent-sdk", inAgentsDir("node_modules/@anthropic-ai/claude-agent-sdk/package.json", "node"), claudeAgentSDKRun, "Bash", shellCall("command"), ""},
}

// opencodeCall is a call of opencode's bash tool, which wants a
// description beside the command.
func opencodeCall() map[string]any {
	return map[string]any{"command": "echo ran >> marker", "description": "Append a line to marker"}
}

// opencodeRun runs `opencode run` with one provider configured through
// OPENCODE_CONFIG_CONTENT: Anthropic (@ai-sdk/anthropic, Messages),
// OpenAI-compatible (@ai-sdk/openai-compatible, Chat Completions) or
// OpenAI (@ai-sdk/openai, Responses), every tool allowed. opencode bundles
// these providers. It stays on loopback with the models catalog fetch,
// update checks and sharing off, and npm offline: opencode installs its
// plugin package into each config directory in the background, which
// otherwise asks the package registry.
func opencodeRun(provider string) agentRun { return opencodeRunWithKey(provider, clientKey) }

// opencodeRunWithKey is opencodeRun with key as the provider's API key.
func opencodeRunWithKey(provider, key string) agentRun {
	return func(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd {
		t.Helper()
		pkg, path, model := "@ai-sdk/anthropic", "/anthropic/v1", "claude-sonnet-4-5"
		switch provider {
		case "openai-compatible":
			pkg, path, model = "@ai-sdk/openai-compatible", "/openai/v1", "gpt-4.1"
		case "openai":
			pkg, path, model = "@ai-sdk/openai", "/openai/v1", "gpt-4.1"
		}
		cfg, err := json.Marshal(map[string]any{
			"autoupdate": false, "share": "disabled",
			"model": "gk/" + model, "small_model": "gk/" + model,
			"provider": map[string]any{"gk": map[string]any{
				"npm": pkg, "name": "gatekeeper",
				"options": map[string]any{"baseURL": at.url() + path, "apiKey": key},
				"models":  map[string]any{model: map[string]any{"name": model, "tool_call": true}},
			}},
			"permission": map[string]any{"bash": "allow", "edit": "allow", "external_directory": "allow"},
		})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "run", "--format", "json", at.prompt)
		cmd.Env = agentEnv(home,
			"OPENCODE_CONFIG_CONTENT="+string(cfg),
			"OPENCODE_DISABLE_MODELS_FETCH=1",
			"OPENCODE_DISABLE_AUTOUPDATE=1",
			"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
			"OPENCODE_DISABLE_SHARE=1",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
			"OPENCODE_PURE=1",
			"npm_config_offline=true")
		return cmd
	}
}

// qwenRun runs Qwen Code headless with every tool allowed (--yolo) on its
// OpenAI-compatible sign-in: OPENAI_BASE_URL, OPENAI_API_KEY,
// OPENAI_MODEL. Its settings turn off usage statistics, telemetry and
// update checks.
func qwenRun(t *testing.T, bin string, at agentTarget, home string) *exec.Cmd {
	t.Helper()
	dir := filepath.Join(home, ".qwen")
	settings := `{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},
"general":{"enableAutoUpdate":false,"disableAutoUpdate":true,"disableUpdateNag":true},"security":{"auth":{"selectedType":"openai"},"folderTrust":{"enabled":false}}}`
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--yolo", at.prompt)
	cmd.Env = agentEnv(home,
		"OPENAI_BASE_URL="+at.url()+"/openai/v1",
		"OPENAI_API_KEY="+clientKey,
		"OPENAI_MODEL=gpt-4.1",
		"QWEN_CODE_SUPPRESS_YOLO_WARNING=1")
	return cmd
}

// openaiAgentsRun runs testdata/agents/openai-agents.mjs: an OpenAI Agents
// SDK app with one function tool, run_command, on the Responses or Chat
// Completions API.
func openaiAgentsRun(api string) agentRun {
	return func(t *testing.T, node string, at agentTarget, home string) *exec.Cmd {
		cmd := exec.Command(node, scriptPath(t, "openai-agents.mjs"), at.prompt)
		cmd.Env = agentEnv(home,
			"AGENTS_DIR="+agentsDir(),
			"AGENTS_API="+api,
			"OPENAI_BASE_URL="+at.url()+"/openai/v1",
			"OPENAI_API_KEY="+clientKey)
		return cmd
	}
}

// claudeAgentSDKRun runs testdata/agents/claude-agent-sdk.mjs: a Claude
// Agent SDK app (the SDK runs the Claude Code it bundles) with Claude
// Code's tools.
func claudeAgentSDKRun(t *testing.T, node string, at agentTarget, home string) *exec.Cmd {
	cmd := exec.Command(node, scriptPath(t, "claude-agent-sdk.mjs"), at.prompt)
	cmd.Env = agentEnv(home,
		"AGENTS_DIR="+agentsDir(),
		"ANTHROPIC_BASE_URL="+at.url()+"/anthropic",
		"ANTHROPIC_API_KEY="+clientKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"IS_SANDBOX=1")
	return cmd
}

func scriptPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "agents", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRealAgentMatrix runs each agent of the matrix through its own
// gatekeeper, with a gate holding shell calls that touch "marker", and
// three sessions that begin with the same prompt:
//
//   - sessions A and B run at once: each is its own run (two root
//     trajectories), and each run's shell call is held;
//   - B's call is denied: it never runs, B finishes on the refusal, and A's
//     identical call is still held, not refused;
//   - A's budget is lowered to the turns it has taken, then its call is
//     approved: the command runs once and the turn that brings its result
//     is refused (402) without reaching the provider; A's run fails on its
//     budget and the agent says so;
//   - session C starts after A failed: it is a new run, its call is held,
//     approved, runs once, and C finishes with the model's answer to the
//     result: a failed run never blocks a new session.
//
// The agents run in parallel, each bounded by matrixTimeout.
func TestRealAgentMatrix(t *testing.T) {
	for _, a := range matrixAgents {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			bin, ok := a.find(t)
			if !ok {
				t.Skipf("SKIPPED: %s is not installed; install it to run the real-agent matrix (see .ci/run)", a.name)
			}
			m := startMatrix(t, a)
			ctx, cancel := context.WithTimeout(context.Background(), matrixTimeout)
			defer cancel()
			if err := m.play(ctx, bin); err != nil {
				t.Fatalf("%v\n%s", err, m.report())
			}
			t.Logf("runs A %s (approved, then failed on its budget), B %s (denied), C %s (approved)", m.roots[0], m.roots[1], m.roots[2])
		})
	}
}

// matrixTimeout bounds one agent's three sessions.
const matrixTimeout = 6 * time.Minute

// matrixCase is one agent's gatekeeper, mock provider and sessions.
type matrixCase struct {
	agent    matrixAgent
	mock     *mockprovider.Server
	gk       *replica
	t        *testing.T
	sessions []*agentProc
	roots    [3]string
}

func startMatrix(t *testing.T, a matrixAgent) *matrixCase {
	t.Helper()
	m := &matrixCase{agent: a, t: t}
	m.mock = mockprovider.New(mockprovider.Options{Script: clientScript(a)})
	ms := httptest.NewServer(m.mock)
	t.Cleanup(ms.Close)
	m.gk = startReplica(t, matrixConfig(t, ms.URL))
	return m
}

func matrixConfig(t *testing.T, mockURL string) string {
	t.Helper()
	text := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: anthropic, api: anthropic, base_url: %[1]q, keys: [{name: k, key: sk-upstream-0001}]}
  - {name: openai, api: openai, base_url: %[1]q, keys: [{name: k, key: sk-upstream-0002}]}
  - {name: gemini, api: gemini, base_url: %[1]q, keys: [{name: k, key: goog-upstream-0003}]}
tenants:
  - {name: agents, keys: [%[2]s]}
# Session A's budget is lowered to 105%% of its spend: below these
# stages, so that its held call is still released, and below the cost of
# its next turn's input.
budget_stages: {steer: 0.97, restrict: 0.98, halt: 1.0}
gates:
  - name: shell-marker
    when: 'tool.class == "shell" && tool.command.contains("marker")'
    approvers: {roles: [secops]}
    expiry: 1h
admin:
  tokens:
    - {name: carol, token: %[3]s, roles: [operator, "approver:secops"]}
log: {level: info, format: json}
`, mockURL, clientKey, clientApprover)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// matrixApproval is a pending request as the admin API lists it.
type matrixApproval struct {
	ID         string `json:"id"`
	Trajectory string `json:"trajectory"`
	Root       string `json:"root"`
}

// play runs the three sessions (see TestRealAgentMatrix).
func (m *matrixCase) play(ctx context.Context, bin string) error {
	began := time.Now()
	a := m.start(bin)
	b := m.start(bin)
	pending, err := m.waitPending(ctx, 2, nil, a, b)
	if err != nil {
		return err
	}
	m.t.Logf("two sessions held after %s", time.Since(began).Round(time.Millisecond))
	if pending[0].Root == pending[1].Root {
		return fmt.Errorf("two sessions with the same first prompt share one run: %+v", pending)
	}
	// The admin API does not say which session's process a request is
	// of: deny one, and the session that finishes is the denied one (the
	// other is still held; were it not, the checks below fail).
	deny, keep := pending[1], pending[0]
	if code, err := adminJSON(ctx, "POST", m.gk.base+"/admin/v1/approvals/"+deny.ID+"/deny", nil); err != nil || code != 200 {
		return fmt.Errorf("deny: %d %v", code, err)
	}
	var denied, approved *agentProc
	select {
	case <-a.exited:
		denied, approved = a, b
	case <-b.exited:
		denied, approved = b, a
	case <-ctx.Done():
		return errors.New("neither session finished after one call was denied")
	}
	if err := denied.err; err != nil {
		return fmt.Errorf("the denied session failed: %v", err)
	}
	if _, err := os.Stat(denied.marker()); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("denied: the command ran (%v)", err)
	}
	still, err := m.pending(ctx)
	if err != nil {
		return err
	}
	if len(still) != 1 || still[0].ID != keep.ID {
		return fmt.Errorf("after denying %s, pending %+v, want only %s: a denial in one run refused a call of another", deny.ID, still, keep.ID)
	}
	select {
	case <-approved.exited:
		return fmt.Errorf("the other session exited (%v) while its call was held", approved.err)
	default:
	}

	// Session A: its budget lowered to a little more than it has spent,
	// less than its next turn's input costs, then its call approved.
	var rec struct {
		Spend struct {
			Dollars float64 `json:"dollars"`
		} `json:"spend"`
	}
	if code, err := adminJSON(ctx, "GET", m.gk.base+"/admin/v1/trajectories/"+keep.Root, &rec); err != nil || code != 200 || rec.Spend.Dollars <= 0 {
		return fmt.Errorf("run %s: %d %v %+v", keep.Root, code, err, rec)
	}
	body := fmt.Sprintf(`{"dollars":%g,"reason":"matrix: no turn after this call"}`, rec.Spend.Dollars*1.05)
	if code, err := adminBody(ctx, "PATCH", m.gk.base+"/admin/v1/trajectories/"+keep.Root+"/budget", body); err != nil || code != 200 {
		return fmt.Errorf("budget: %d %v", code, err)
	}
	before := m.resultTurns()
	if code, err := adminJSON(ctx, "POST", m.gk.base+"/admin/v1/approvals/"+keep.ID+"/approve", nil); err != nil || code != 200 {
		return fmt.Errorf("approve: %d %v", code, err)
	}
	select {
	case <-approved.exited:
	case <-ctx.Done():
		return errors.New("the approved session did not finish after its budget ran out")
	}
	if out, err := os.ReadFile(approved.marker()); string(out) != "ran\n" {
		return fmt.Errorf("approved: marker %q (%v), want the command run once", out, err)
	}
	if !strings.Contains(strings.ToLower(approved.stdout.String()+approved.stderr.String()), "budget") {
		return fmt.Errorf("the agent did not report its budget refusal (exit %v)", approved.err)
	}
	if n := m.resultTurns() - before; n != 0 {
		return fmt.Errorf("%d turns with tool results reached the provider after the budget ran out", n)
	}
	m.t.Logf("denied and budget-refused sessions finished after %s", time.Since(began).Round(time.Millisecond))
	var failed struct {
		State      string  `json:"state"`
		ExitReason *string `json:"exit_reason"`
	}
	if code, err := adminJSON(ctx, "GET", m.gk.base+"/admin/v1/trajectories/"+keep.Root, &failed); err != nil || code != 200 ||
		failed.State != "FAILED" || failed.ExitReason == nil || *failed.ExitReason != "BUDGET_EXCEEDED" {
		return fmt.Errorf("run %s after its budget: %d %v %+v", keep.Root, code, err, failed)
	}

	// Session C, after A failed.
	c := m.start(bin)
	next, err := m.waitPending(ctx, 1, []string{keep.Root, deny.Root}, c)
	if err != nil {
		return err
	}
	m.t.Logf("a third session held after %s", time.Since(began).Round(time.Millisecond))
	if code, err := adminJSON(ctx, "POST", m.gk.base+"/admin/v1/approvals/"+next[0].ID+"/approve", nil); err != nil || code != 200 {
		return fmt.Errorf("approve C: %d %v", code, err)
	}
	select {
	case <-c.exited:
		if c.err != nil {
			return fmt.Errorf("the new session failed: %v", c.err)
		}
	case <-ctx.Done():
		return errors.New("the new session did not finish after its call was approved")
	}
	if out, err := os.ReadFile(c.marker()); string(out) != "ran\n" {
		return fmt.Errorf("new session: marker %q (%v), want the command run once", out, err)
	}
	if n := m.resultTurns() - before; n != 1 {
		return fmt.Errorf("the new session's result reached the provider %d times, want 1", n)
	}
	m.roots = [3]string{keep.Root, deny.Root, next[0].Root}
	return nil
}

// start starts a session in a directory of its own.
func (m *matrixCase) start(bin string) *agentProc {
	m.t.Helper()
	home := m.t.TempDir()
	cmd := m.agent.run(m.t, bin, agentTarget{base: m.gk.base, prompt: matrixPrompt}, home)
	p := startAgent(m.t, cmd, m.t.TempDir())
	m.sessions = append(m.sessions, p)
	return p
}

// pending lists the gatekeeper's pending approval requests.
func (m *matrixCase) pending(ctx context.Context) ([]matrixApproval, error) {
	var list struct {
		Approvals []matrixApproval `json:"approvals"`
	}
	if code, err := adminJSON(ctx, "GET", m.gk.base+"/admin/v1/approvals?state=pending", &list); err != nil || code != 200 {
		return nil, fmt.Errorf("approvals: %d %v", code, err)
	}
	return list.Approvals, nil
}

// waitPending waits for n pending requests of runs other than those in
// not; it fails when one of the sessions exits first or more are pending.
func (m *matrixCase) waitPending(ctx context.Context, n int, not []string, sessions ...*agentProc) ([]matrixApproval, error) {
	for i := 0; i < 600; i++ {
		list, err := m.pending(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range list {
			for _, root := range not {
				if r.Root == root {
					return nil, fmt.Errorf("a new session's call was held on the old run %s: %+v", root, r)
				}
			}
		}
		switch {
		case len(list) == n:
			return list, nil
		case len(list) > n:
			return nil, fmt.Errorf("pending %+v, want %d", list, n)
		}
		for _, s := range sessions {
			select {
			case <-s.exited:
				return nil, fmt.Errorf("a session exited (%v) before its call was held", s.err)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d calls held, want %d: %w", len(list), n, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("%d calls not held in time", n)
}

// resultTurns counts the turns with the agents' tool results the provider
// got, gatekeeper's refusal continuations aside.
func (m *matrixCase) resultTurns() int {
	n := 0
	for _, r := range m.mock.Requests() {
		if r.Turn == "default_tool_results" && !bytes.Contains(r.Body, []byte("APPROVAL_DENIED")) {
			n++
		}
	}
	return n
}

func (m *matrixCase) report() string {
	var b strings.Builder
	for i, s := range m.sessions {
		fmt.Fprintf(&b, "session %d (%s) stdout:\n%s\nstderr:\n%s\n", i, s.dir, tail(s.stdout.String()), tail(s.stderr.String()))
	}
	var turns []string
	for _, r := range m.mock.Requests() {
		turns = append(turns, fmt.Sprintf("%s %s %s %d", r.Method, r.Path, r.Turn, r.Status))
	}
	fmt.Fprintf(&b, "provider requests:\n%s\ngatekeeper:\n%s", strings.Join(turns, "\n"), tail(m.gk.logs.String()))
	return b.String()
}

// adminBody sends an admin API request with a JSON body as the approver.
func adminBody(ctx context.Context, method, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+clientApprover)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s %s: %s", method, url, b)
	}
	return resp.StatusCode, nil
}

// agentProc is one agent process in a directory of its own; exited is
// closed when it has exited, with err its exit.
type agentProc struct {
	dir            string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan struct{}
	err            error
}

func (p *agentProc) marker() string { return filepath.Join(p.dir, "marker") }

// startAgent starts cmd in dir, in a process group of its own; the test's
// cleanup kills the group by its id and waits.
func startAgent(t *testing.T, cmd *exec.Cmd, dir string) *agentProc {
	t.Helper()
	p := &agentProc{dir: dir, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		// The agent's process group, by its id: the agent and the
		// commands it started. A group that already exited is not found.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	return p
}
