package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gatekeeper/internal/gkproc"
	"gatekeeper/internal/testidp"
	"gatekeeper/mockprovider"
)

const signinPrompt = "Run the sign-in probe."

// TestClaudeCodeGatewaySignIn signs unmodified Claude Code (the pinned
// release and the newest) in to gatekeeper through its own /login, typed
// into a terminal (tmux) as a developer would: Claude Code reads the
// gateway URL from its managed settings, fetches gatekeeper's discovery
// document, is told to trust the gateway, shows a device code, which is
// approved on the test identity provider's verification page, and keeps
// the token. It then runs a tool round trip against the mock provider
// with no API key anywhere, and the run, its turns and dollars are found
// under the person's name in the record, the event stream and the cost
// report.
//
// Claude Code reads forceLoginMethod and forceLoginGatewayUrl only from
// the system's managed settings (/etc/claude-code/managed-settings.json
// on Linux; its public builds honour no override), so each agent runs in
// a mount namespace of its own where /etc is an overlay holding that file:
// nothing outside the agent's processes sees it. That needs root (or the
// capability to mount) and tmux; without them the test skips, and fails
// under CI.
func TestClaudeCodeGatewaySignIn(t *testing.T) {
	if testing.Short() {
		t.Skip("drives real agents")
	}
	needSignInTools(t)
	for _, a := range []matrixAgent{matrixAgents[0], matrixAgents[1]} {
		t.Run(a.name, func(t *testing.T) {
			bin, ok := a.find(t)
			if !ok {
				return
			}
			claudeGatewaySignIn(t, bin)
		})
	}
}

// needSignInTools skips (fails under CI) unless tmux runs and this
// process may make a mount namespace with an overlay on /etc.
func needSignInTools(t *testing.T) {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("the gateway sign-in test cannot run: %s", why)
		}
		t.Skipf("SKIPPING the gateway sign-in test: %s", why)
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		skip("tmux is not installed")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		skip("unshare is not installed")
	}
	dir := t.TempDir()
	up, work := filepath.Join(dir, "up"), filepath.Join(dir, "work")
	_ = os.MkdirAll(up, 0o755)
	_ = os.MkdirAll(work, 0o755)
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		overlayEtc(up, work)+" && test -d /etc").CombinedOutput(); err != nil {
		skip(fmt.Sprintf("cannot overlay /etc in a mount namespace (needs root): %v %s", err, out))
	}
}

func overlayEtc(up, work string) string {
	return fmt.Sprintf("mount -t overlay overlay -o lowerdir=/etc,upperdir=%s,workdir=%s /etc", up, work)
}

func claudeGatewaySignIn(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{AccessTokenLifetime: 10 * time.Minute},
		testidp.User{Subject: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	no := false
	mock := mockprovider.New(mockprovider.Options{Script: &mockprovider.Script{Rules: []mockprovider.Rule{{
		When: mockprovider.Match{LastUserContains: signinPrompt, DeclaresTool: "Bash", HasToolResults: &no},
		Turn: mockprovider.TurnRef{Name: "probe"},
	}}, Turns: map[string]mockprovider.TurnSpec{
		"probe": {Kind: mockprovider.KindTool, Text: "Running the probe.",
			Tools: []mockprovider.ToolCall{{Name: "Bash", Input: map[string]any{"command": "echo ran >> marker"}}}},
	}}})
	ms := httptest.NewServer(mock)
	defer ms.Close()

	dir := t.TempDir()
	const adminTok = "signin-test-admin-token-0001"
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-signin}]}
tenants:
  - name: fleet
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
identity:
  issuer: %s
  client_id: %s
  groups: [{group: eng, tenant: fleet}]
  gateway:
    enabled: true
    settings:
      - group: eng
        settings: {cleanupPeriodDays: 21}
`, ms.URL, adminTok, idp.Issuer(), testidp.ClientID)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gk := gkproc.Start(t, gkproc.Build(t), cfgPath, nil)

	// The machine's managed settings, seen only inside the agent's mount
	// namespace; the home and the working directory are the agent's own,
	// onboarding done and the directory trusted, so /login is the first
	// screen that matters.
	home, work := filepath.Join(dir, "home"), filepath.Join(dir, "work")
	up, ovWork := filepath.Join(dir, "etc-up"), filepath.Join(dir, "etc-work")
	for _, d := range []string{home, work, filepath.Join(up, "claude-code"), ovWork} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	managed, _ := json.Marshal(map[string]any{"forceLoginMethod": "gateway", "forceLoginGatewayUrl": gk.Base})
	if err := os.WriteFile(filepath.Join(up, "claude-code", "managed-settings.json"), managed, 0o644); err != nil {
		t.Fatal(err)
	}
	state, _ := json.Marshal(map[string]any{"hasCompletedOnboarding": true, "theme": "dark", "bypassPermissionsModeAccepted": true,
		"projects": map[string]any{work: map[string]any{"hasTrustDialogAccepted": true}}})
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), state, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + os.TempDir(), "LANG=C.UTF-8", "TERM=xterm-256color",
		"IS_SANDBOX=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "BROWSER=true"}
	// After a gateway sign-in Claude Code relaunches itself; under this
	// terminal the relaunched process ends at once (exit 0), so the
	// session starts Claude Code again, as the developer would, and the
	// second start finds the stored sign-in.
	inner := fmt.Sprintf("%s && for i in 1 2; do clear; env -i %s %s --dangerously-skip-permissions --model claude-sonnet-4-5; echo \"claude exited: $?\"; done; sleep 600",
		overlayEtc(up, ovWork), shellQuote(env...), shellQuote(bin))
	session := fmt.Sprintf("gk-signin-%d", os.Getpid())
	tm := &tmuxPane{t: t, ctx: ctx, name: session + "-" + filepath.Base(filepath.Dir(dir))}
	tm.start(work, "unshare --mount --propagation private sh -c "+shellQuote(inner))

	// /login: the gateway URL comes from the managed settings.
	tm.waitFor(`(?i)not logged in`, time.Minute)
	tm.send("/login")
	time.Sleep(time.Second)
	tm.keys("Enter")
	tm.waitFor(`Enter to connect`, time.Minute)
	if !strings.Contains(tm.capture(), strings.TrimPrefix(gk.Base, "http://")) {
		t.Fatalf("the login screen does not show gatekeeper's URL:\n%s", tm.capture())
	}
	tm.keys("Enter")
	// First contact: trust the gateway (the cursor starts on "No").
	tm.waitFor(`Trust gateway`, time.Minute)
	tm.keys("Up")
	time.Sleep(300 * time.Millisecond)
	tm.keys("Enter")
	screen := tm.waitFor(`[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}`, time.Minute)
	userCode := regexp.MustCompile(`[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}`).FindString(screen)
	// The person approves the code in the browser, on the provider's page.
	resp, err := http.PostForm(idp.Issuer()+"/device", url.Values{"user_code": {userCode}, "user": {"ada"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("approving %s on the provider's page: %s", userCode, resp.Status)
	}
	// Signed in: Claude Code says so and waits for a key (then relaunches
	// itself); the prompt comes back with no login screen.
	tm.waitFor(`Connected to Cloud gateway`, time.Minute)
	tm.keys("Enter")
	ready := regexp.MustCompile(`(?m)^❯[\s\x{a0}]*$`)
	login := regexp.MustCompile(`(?i)not logged in|Trust gateway|Enter to co|Login\s*$`)
	for i := 0; ; i++ {
		s := tm.capture()
		if ready.MatchString(s) && !login.MatchString(s) {
			break
		}
		if i == 400 {
			t.Fatalf("Claude Code did not come back signed in:\n%s", s)
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)

	events := followPersonEvents(ctx, t, gk.Base, adminTok)
	tm.send(signinPrompt)
	time.Sleep(500 * time.Millisecond)
	tm.keys("Enter")
	marker := filepath.Join(work, "marker")
	for i := 0; i < 600; i++ {
		if b, err := os.ReadFile(marker); err == nil && strings.Count(string(b), "ran") == 1 {
			break
		}
		if i == 599 {
			t.Fatalf("the tool never ran\nscreen:\n%s\ngatekeeper:\n%s", tm.capture(), tail(gk.Log()))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The record: the run under the person's name, its turns and dollars.
	type record struct {
		ID, Tenant string
		Turns      int64
		Spend      struct{ Dollars float64 }
		Person     *struct {
			Subject, Name, Email string
			Groups               []string
		}
	}
	var run record
	for i := 0; i < 300; i++ {
		var list struct{ Trajectories []record }
		adminGetAs(t, ctx, gk.Base+"/admin/v1/trajectories?tenant=fleet", adminTok, &list)
		for _, r := range list.Trajectories {
			if r.Person != nil && r.Turns >= 2 { // the conversation with the tool round trip
				run = r
			}
		}
		if run.ID != "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if run.ID == "" || run.Person.Subject != "ada" || run.Person.Email != "ada@example.com" || run.Person.Name != "Ada Lovelace" ||
		len(run.Person.Groups) != 1 || run.Spend.Dollars <= 0 {
		t.Fatalf("no run with the tool round trip under ada: %+v\nscreen:\n%s\ngatekeeper:\n%s", run, tm.capture(), tail(gk.Log()))
	}
	// The run it belongs to is the person's too, and carries its dollars.
	rootID, _, _ := strings.Cut(run.ID, "/")
	var root record
	adminGetAs(t, ctx, gk.Base+"/admin/v1/trajectories/"+url.PathEscape(rootID), adminTok, &root)
	if root.Person == nil || root.Person.Subject != "ada" || root.Spend.Dollars < run.Spend.Dollars {
		t.Errorf("the run %s: %+v", rootID, root)
	}
	// No API key went anywhere: the provider got gatekeeper's key, and
	// every turn came with the person's token.
	for _, r := range mock.Requests() {
		if k := r.Header.Get("X-Api-Key"); k != "sk-upstream-signin" {
			t.Errorf("the provider got key %q", k)
		}
	}
	// The event stream carried the record under the person.
	if !events.saw(run.ID, "ada") {
		t.Errorf("no record event of %s under ada", run.ID)
	}
	// The cost report counts the run once it is judged.
	signinPost(ctx, t, gk.Base+"/admin/v1/trajectories/"+url.PathEscape(rootID)+"/finish", adminTok, `{"reason":"done"}`)
	signinPost(ctx, t, gk.Base+"/admin/v1/trajectories/"+url.PathEscape(rootID)+"/outcome", adminTok, `{"accepted":true,"task_class":"signin"}`)
	var rep struct {
		Runs    int
		Classes []struct {
			Class string
			Runs  int
		}
	}
	adminGetAs(t, ctx, gk.Base+"/admin/v1/reports/costs?tenant=fleet&since=1d", adminTok, &rep)
	if rep.Runs != 1 || len(rep.Classes) != 1 || rep.Classes[0].Class != "signin" {
		t.Errorf("cost report: %+v", rep)
	}
	// /metrics and the spend report by person name her, with at least
	// the conversation's turns and the run's dollars (Claude Code's side
	// calls count too).
	if turns, dollars := personSeries(ctx, t, gk.Base, "ada@example.com", "eng"); turns < float64(run.Turns) || dollars < root.Spend.Dollars-1e-9 {
		t.Errorf("ada's metrics: %v turns, $%v; her conversation alone made %d turns, her run $%v", turns, dollars, run.Turns, root.Spend.Dollars)
	}
	var spend struct {
		Rows []struct {
			Kind, Key string
			Turns     int64
			Dollars   float64
		}
	}
	adminGetAs(t, ctx, gk.Base+"/admin/v1/reports/costs?tenant=fleet&since=1d&by=person", adminTok, &spend)
	if len(spend.Rows) != 1 || spend.Rows[0].Kind != "person" || spend.Rows[0].Key != "ada" ||
		spend.Rows[0].Turns < run.Turns || spend.Rows[0].Dollars < root.Spend.Dollars-1e-9 {
		t.Errorf("spend by person: %+v, want one row for ada with at least her conversation's %d turns and her run's $%v", spend.Rows, run.Turns, root.Spend.Dollars)
	}
	t.Logf("%s: run %s ($%.6f), conversation %s: %d turns, $%.6f, under %s", bin, rootID, root.Spend.Dollars, run.ID, run.Turns, run.Spend.Dollars, run.Person.Email)
}

// tmuxPane is one detached tmux session running a command: keys in,
// screen out, each wait bounded.
type tmuxPane struct {
	t    *testing.T
	ctx  context.Context
	name string
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.CommandContext(p.ctx, "tmux", args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v %s", args, err, out)
	}
	return string(out)
}

func (p *tmuxPane) start(dir, command string) {
	p.t.Helper()
	p.tmux("new-session", "-d", "-s", p.name, "-x", "200", "-y", "50", "-c", dir, command)
	pid, err := strconv.Atoi(strings.TrimSpace(p.tmux("display-message", "-p", "-t", p.name, "#{pane_pid}")))
	if err != nil {
		p.t.Fatal(err)
	}
	// The pane's process group (the agent and what it started), by its
	// id, then the session; the cleanup waits for the pane's process to
	// be gone, so its files can be removed.
	p.t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = exec.Command("tmux", "kill-session", "-t", p.name).Run()
		for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func (p *tmuxPane) send(text string) { p.tmux("send-keys", "-t", p.name, "-l", text) }
func (p *tmuxPane) keys(k string)    { p.tmux("send-keys", "-t", p.name, k) }
func (p *tmuxPane) capture() string {
	out, _ := exec.CommandContext(p.ctx, "tmux", "capture-pane", "-p", "-t", p.name).CombinedOutput()
	return string(out)
}

// waitFor polls the screen until pattern shows, and returns the screen.
func (p *tmuxPane) waitFor(pattern string, within time.Duration) string {
	p.t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(within)
	for {
		s := p.capture()
		if re.MatchString(s) {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waited %v for %q; the screen:\n%s", within, pattern, s)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func shellQuote(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func signinPost(ctx context.Context, t *testing.T, u, tok, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s", u, resp.Status)
	}
}

// personEvents follows the event stream's record events and keeps which
// trajectory each person's records were seen under.
type personEvents struct {
	mu   sync.Mutex
	seen map[string]bool // trajectory + "\x00" + subject
}

func (e *personEvents) saw(traj, subject string) bool {
	for i := 0; i < 50; i++ {
		e.mu.Lock()
		ok := e.seen[traj+"\x00"+subject]
		e.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func followPersonEvents(ctx context.Context, t *testing.T, base, tok string) *personEvents {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/v1/stream?kind=record&tenant=fleet", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	e := &personEvents{seen: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Trajectory string
				Data       struct {
					Record struct {
						Person *struct{ Subject string }
					}
				}
			}
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Data.Record.Person != nil {
				e.mu.Lock()
				e.seen[ev.Trajectory+"\x00"+ev.Data.Record.Person.Subject] = true
				e.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close(); <-done })
	return e
}
