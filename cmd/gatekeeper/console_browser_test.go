package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/chromedp/chromedp"

	"gatekeeper/config"
)

// screenshotsEnv names a directory: when set, the console test saves a
// screenshot of each main view there (docs/ keeps them).
const screenshotsEnv = "GATEKEEPER_SCREENSHOTS"

const (
	consoleOperator = "console-operator-token-01"
	consoleApprover = "console-approver-token-01"
	consoleKey      = "vk-console-test-0001"
	gatedCommand    = "rm -rf /srv/build/cache && echo 'cleaned the build cache, as asked in the ticket'"
)

var consoleYAML = `
providers:
  - name: anthropic
    api: anthropic
    base_url: mock
    keys: [{name: main, key: sk-mock-1, rpm: 1000, input_tpm: 2000000, output_tpm: 400000}]
tenants:
  - {name: team-a, keys: [` + consoleKey + `], budget: {turns: 20, dollars: 2}}
admin:
  tokens:
    - {name: alice, token: ` + consoleOperator + `, roles: [operator]}
    - {name: carol, token: ` + consoleApprover + `, roles: ["approver:secops"]}
gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf")'
    approvers: {roles: [secops]}
`

// chromium finds the browser, or skips the test (fails it under CI,
// which installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs it")
	}
	t.Skip("SKIPPED: chromium is not installed: the console's browser tests did not run")
	return ""
}

// browser starts a headless Chromium of its own, stopped when the test
// ends, and returns a context for one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 900))
	t.Cleanup(cancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel) // closes the browser, by the process it started
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx
}

// step runs actions on the tab, bounded so that a missing element fails
// the test instead of hanging it.
func step(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func evaluate[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript condition on the page.
func until(t *testing.T, tab context.Context, what, expr string) {
	t.Helper()
	step(t, tab, what, chromedp.Action[chromedp.Void](func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(25*time.Second), chromedp.WithPollingInterval(20*time.Millisecond))(ctx, tg)
		return chromedp.Void{}, err
	}))
}

// consoleServer runs gatekeeper with the built-in mock provider and a gate.
func consoleServer(t *testing.T) string {
	t.Helper()
	return consoleServerOf(t, consoleYAML)
}

// consoleServerOf runs gatekeeper with the config yaml.
func consoleServerOf(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
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
	srv := httptest.NewServer(s.handler)
	t.Cleanup(func() {
		s.proxy.EndHolds()
		s.feed.EndSubscriptions() // as serve does on shutdown: the page's stream would hold Close
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	})
	return srv.URL
}

func consoleClient(base, run, spec string) anthropic.Client {
	opts := []aoption.RequestOption{aoption.WithBaseURL(base + "/t/" + run + "/anthropic"), aoption.WithAPIKey(consoleKey), aoption.WithMaxRetries(0)}
	if spec != "" {
		opts = append(opts, aoption.WithHeader("X-Mock-Turn", spec))
	}
	return anthropic.NewClient(opts...)
}

func userTurn(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 512,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
			Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}}}
}

// sdkCall is an SDK call running in the background.
type sdkCall struct {
	done chan struct{}
	msg  *anthropic.Message
	err  error
}

func startCall(c anthropic.Client, p anthropic.MessageNewParams) *sdkCall {
	sc := &sdkCall{done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sc.msg, sc.err = c.Messages.New(ctx, p)
	}()
	return sc
}

func (sc *sdkCall) wait(t *testing.T) *anthropic.Message {
	t.Helper()
	select {
	case <-sc.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the SDK call did not end")
	}
	if sc.err != nil {
		t.Fatalf("SDK call: %v", sc.err)
	}
	return sc.msg
}

func signIn(t *testing.T, tab context.Context, base, token string) {
	t.Helper()
	step(t, tab, "sign in",
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#runs-table")))
}

func adminStatus(t *testing.T, method, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}

func runState(t *testing.T, base, id string) (state string, turns int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/v1/trajectories/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+consoleOperator)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rec struct {
		State string `json:"state"`
		Turns int    `json:"turns"`
	}
	if err := json.NewDecoder(res.Body).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec.State, rec.Turns
}

// budgetRecord is what the budget test reads of a record.
type budgetRecord struct {
	State       string `json:"state"`
	PauseReason string `json:"pause_reason"`
	Budget      struct {
		Turns     int64   `json:"turns"`
		Dollars   float64 `json:"dollars"`
		OnExhaust string  `json:"on_exhaust"`
	} `json:"budget"`
}

func runBudget(t *testing.T, base, id string) budgetRecord {
	t.Helper()
	var rec budgetRecord
	consoleAdmin(t, http.MethodGet, base+"/admin/v1/trajectories/"+id, consoleOperator, "", &rec)
	return rec
}

// consoleAdmin calls the admin API, fails the test unless it answers 2xx, and
// decodes the answer into out when out is not nil.
func consoleAdmin(t *testing.T, method, url, token, body string, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s", method, url, res.Status)
	}
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleInBrowser drives the console in a real headless Chromium
// against a real gatekeeper, with the official SDK as the agent.
func TestConsoleInBrowser(t *testing.T) {
	tab := browser(t)
	base := consoleServer(t)
	signIn(t, tab, base, consoleOperator)
	if who := evaluate[string](t, tab, `document.querySelector("#who").textContent`); !strings.Contains(who, "alice") {
		t.Fatalf("signed in as %q", who)
	}
	// The token is in the tab's session only: not in the URL, not in a cookie.
	if got := evaluate[string](t, tab, `location.href + "|" + document.cookie + "|" + (localStorage.length)`); strings.Contains(got, consoleOperator) || !strings.HasSuffix(got, "||0") {
		t.Errorf("the token leaked: %q", got)
	}
	// A marker on the page proves later updates came without a reload.
	evaluate[bool](t, tab, `window.__noReload = true`)

	var first *anthropic.Message // the run's first reply
	t.Run("a run started by the SDK appears live", func(t *testing.T) {
		started := time.Now()
		c := consoleClient(base, "run-live", "")
		var err error
		if first, err = c.Messages.New(context.Background(), userTurn("hello")); err != nil {
			t.Fatal(err)
		}
		until(t, tab, "the run's row", `!!document.querySelector('#runs-table tr[data-id="run-live"]')`)
		t.Logf("the run's row appeared %v after the SDK call started (ending with it)", time.Since(started).Round(time.Millisecond))
		// cells[7]: the Turns column, after Person.
		until(t, tab, "the row shows the turn", `document.querySelector('#runs-table tr[data-id="run-live"]').cells[7].textContent === "1"`)
		if !evaluate[bool](t, tab, `window.__noReload === true`) {
			t.Fatal("the page reloaded")
		}
		if st, turns := runState(t, base, "run-live"); turns != 1 || st == "" {
			t.Fatalf("record: %s, %d turns", st, turns)
		}
	})

	t.Run("pause from the console holds the next call", func(t *testing.T) {
		step(t, tab, "open the run", chromedp.Click(chromedp.CSS(`#runs-table tr[data-id="run-live"] a`)),
			chromedp.WaitVisible(chromedp.CSS(`#run-controls button[data-verb="pause"]`)))
		step(t, tab, "pause", chromedp.Click(chromedp.CSS(`#run-controls button[data-verb="pause"]`)))
		until(t, tab, "the state shows PAUSED", `document.querySelector("#run-summary .state").textContent.startsWith("PAUSED")`)
		if st, _ := runState(t, base, "run-live"); st != "PAUSED" {
			t.Fatalf("state after the console's pause: %s", st)
		}
		// The same conversation, one turn on: the same thread, run-live's own.
		next := userTurn("hello")
		next.Messages = append(next.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("and again")))
		held := startCall(consoleClient(base, "run-live", ""), next)
		// While paused, the call gets no answer and the run no turn.
		select {
		case <-held.done:
			t.Fatalf("the call of a paused run was answered: %v", held.err)
		case <-time.After(500 * time.Millisecond):
		}
		if _, turns := runState(t, base, "run-live"); turns != 1 {
			t.Fatalf("a paused run took a turn (%d)", turns)
		}
		step(t, tab, "resume", chromedp.Click(chromedp.CSS(`#run-controls button[data-verb="resume"]`)))
		held.wait(t)
		until(t, tab, "the timeline shows the second turn", `[...document.querySelectorAll("#run-timeline li.turn")].length === 2`)
	})

	t.Run("an operator raises a paused run's dollars from the console", func(t *testing.T) {
		// A budget too small for any call, paused rather than failed when spent.
		consoleAdmin(t, http.MethodPost, base+"/admin/v1/trajectories", consoleOperator,
			`{"id":"run-raise","tenant":"team-a","budget":{"turns":20,"dollars":0.0001,"on_exhaust":"pause"}}`, nil)
		held := startCall(consoleClient(base, "run-raise", ""), userTurn("one more step"))
		var rec budgetRecord
		for i := 0; i < 200 && rec.State != "PAUSED"; i++ {
			if i > 0 {
				time.Sleep(25 * time.Millisecond)
			}
			rec = runBudget(t, base, "run-raise")
		}
		if rec.State != "PAUSED" || rec.PauseReason != "BUDGET" {
			t.Fatalf("run-raise is %s (%q), want PAUSED for its budget", rec.State, rec.PauseReason)
		}
		step(t, tab, "open run-raise", chromedp.Navigate(base+"/console/#/run/run-raise"),
			chromedp.WaitVisible(chromedp.CSS("#budget-form #b-dollars")))
		until(t, tab, "the form prefilled with the ceiling", `document.querySelector("#b-dollars").value === "0.0001" && document.querySelector("#b-exhaust").value === "pause"`)
		// Keyboard only: type the new ceiling and a reason, submit with Enter.
		step(t, tab, "raise the dollars",
			chromedp.Focus(chromedp.CSS("#b-dollars")), chromedp.Evaluate[chromedp.Void](`document.querySelector("#b-dollars").select()`),
			chromedp.SendKeys(chromedp.CSS("#b-dollars"), "1.5"),
			chromedp.SendKeys(chromedp.CSS("#b-reason"), "the migration needs more\r"))
		held.wait(t)
		rec = runBudget(t, base, "run-raise")
		if rec.Budget.Dollars != 1.5 || rec.Budget.Turns != 20 || rec.Budget.OnExhaust != "pause" {
			t.Fatalf("budget after the console's raise: %+v, want dollars 1.5 and the rest unchanged", rec.Budget)
		}
		until(t, tab, "the result says so", `document.querySelector("#budget-result").textContent.startsWith("Budget set: dollars")`)
		// The budget event comes from the stream (the page does not reload the
		// timeline), and the dollars bar shows the new ceiling.
		until(t, tab, "the timeline shows the raise", `[...document.querySelectorAll("#run-timeline li.budget")].some((li) => li.textContent.includes("budget by alice") && li.textContent.includes("the migration needs more") && li.textContent.includes("resumed"))`)
		until(t, tab, "the dollars bar shows the new ceiling", `[...document.querySelectorAll("#run-budget .bar .label")].some((l) => l.textContent.startsWith("dollars") && l.textContent.includes("/ $1.5000"))`)
		// The summary follows the stream to the released call's turn.
		until(t, tab, "the summary counts the released turn", `[...document.querySelectorAll("#run-summary .summary div")].some((d) => d.querySelector("dt").textContent === "Turns" && d.querySelector("dd").textContent === "1")`)
		if os.Getenv(screenshotsEnv) != "" {
			step(t, tab, "the page's top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
			screenshot(t, tab, "console-run.png")
		}
		// A value that is no whole number is refused in the page, past the
		// browser's own checks, and nothing is sent.
		step(t, tab, "a bad value", chromedp.Evaluate[chromedp.Void](`(() => {
			const f = document.querySelector("#b-turns");
			f.value = "2.5";
			f.dispatchEvent(new Event("input", { bubbles: true }));
			document.querySelector("#budget-form").dispatchEvent(new Event("submit", { cancelable: true }));
		})()`))
		until(t, tab, "the error in the page", `(document.querySelector("#budget-result.error") || {}).textContent === "turns must be a whole number of 0 or more (0: no ceiling)."`)
		if rec := runBudget(t, base, "run-raise"); rec.Budget.Turns != 20 {
			t.Fatalf("turns became %d after a refused value", rec.Budget.Turns)
		}
	})

	var approval *sdkCall
	t.Run("a gated call appears in the inbox with its full command", func(t *testing.T) {
		spec := fmt.Sprintf(`{"kind":"tool","first_only":true,"text":"Cleaning up.","tools":[{"name":"Bash","input":{"command":%q}}]}`, gatedCommand)
		approval = startCall(consoleClient(base, "run-gated", spec), userTurn("clean the build cache"))
		step(t, tab, "open the inbox", chromedp.Navigate(base+"/console/#/approvals"))
		until(t, tab, "the request's card", `!!document.querySelector("#inbox article.request")`)
		shown := evaluate[string](t, tab, `document.querySelector("#inbox article.request pre.call").textContent`)
		var input map[string]string
		if err := json.Unmarshal([]byte(shown), &input); err != nil || input["command"] != gatedCommand {
			t.Fatalf("the inbox shows %q (%v), want the whole command %q", shown, err, gatedCommand)
		}
		// The operator holds no approver role: no buttons to vote with.
		if evaluate[bool](t, tab, `!!document.querySelector("#inbox button.approve")`) {
			t.Error("the operator is offered Approve without an approver role")
		}
	})

	t.Run("an approver approves; a token without the operator role sees no controls", func(t *testing.T) {
		step(t, tab, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
		signIn(t, tab, base, consoleApprover)
		step(t, tab, "open the run", chromedp.Navigate(base+"/console/#/run/run-live"),
			chromedp.WaitVisible(chromedp.CSS("#run-summary .state")))
		if evaluate[bool](t, tab, `[...document.querySelectorAll("#run-controls button")].some((b) => b.offsetParent !== null)`) {
			t.Error("a token without the operator role is offered control buttons")
		}
		if code := adminStatus(t, http.MethodPost, base+"/admin/v1/trajectories/run-live/pause", consoleApprover); code != http.StatusForbidden {
			t.Errorf("the API answered %d to the approver's pause, want 403", code)
		}
		if evaluate[bool](t, tab, `document.querySelector("#budget-form").offsetParent !== null`) {
			t.Error("a token without the operator role is offered the budget form")
		}
		if code := adminStatus(t, http.MethodPatch, base+"/admin/v1/trajectories/run-live/budget", consoleApprover); code != http.StatusForbidden {
			t.Errorf("the API answered %d to the approver's budget change, want 403", code)
		}
		step(t, tab, "open the inbox", chromedp.Navigate(base+"/console/#/approvals"),
			chromedp.WaitVisible(chromedp.CSS("#inbox button.approve")))
		screenshot(t, tab, "console-approvals.png")
		step(t, tab, "approve", chromedp.SendKeys(chromedp.CSS("#inbox article.request input"), "checked with the ticket"),
			chromedp.Click(chromedp.CSS("#inbox button.approve")))
		msg := approval.wait(t)
		var cmd string
		for _, b := range msg.Content {
			if b.Type == "tool_use" {
				var in map[string]string
				_ = json.Unmarshal(b.Input, &in)
				cmd = in["command"]
			}
		}
		if cmd != gatedCommand {
			t.Fatalf("the released reply carries the command %q, want %q", cmd, gatedCommand)
		}
		until(t, tab, "the history shows the approval", `document.querySelector("#history tbody").textContent.includes("approved")`)
	})

	t.Run("subagents show as a tree and as links from their run", func(t *testing.T) {
		subagents(t, base)
		step(t, tab, "runs", chromedp.Navigate(base+"/console/#/runs"), chromedp.WaitVisible(chromedp.CSS("#runs-table")))
		until(t, tab, "run-fleet's two children under it", `(() => {
			const ids = [...document.querySelectorAll("#runs-table tbody tr")].map((tr) => tr.dataset.id);
			const i = ids.indexOf("run-fleet");
			return i >= 0 && ids.slice(i + 1, i + 3).every((id) => id && id.startsWith("run-fleet/"));
		})()`)
		step(t, tab, "open run-budget", chromedp.Navigate(base+"/console/#/run/run-budget"), chromedp.WaitVisible(chromedp.CSS("#run-budget .bar")))
		until(t, tab, "links to its two children", `document.querySelectorAll('#run-summary a[href^="#/run/run-budget/"]').length === 2`)
	})

	if os.Getenv(screenshotsEnv) != "" {
		step(t, tab, "keys", chromedp.Navigate(base+"/console/#/keys"), chromedp.WaitVisible(chromedp.CSS("#keys-table")))
		until(t, tab, "headroom", `!!document.querySelector("#keys-table .meter")`)
		screenshot(t, tab, "console-keys.png")
		step(t, tab, "runs", chromedp.Navigate(base+"/console/#/runs"), chromedp.WaitVisible(chromedp.CSS("#runs-table")))
		screenshot(t, tab, "console-runs.png")
		step(t, tab, "a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/console/#/run/run-budget"),
			chromedp.WaitVisible(chromedp.CSS("#run-budget .bar")))
		screenshot(t, tab, "console-phone.png")
	}
}

// subagents adds runs with subagents (other conversations of the same
// trajectory), one of them under a budget that presses.
func subagents(t *testing.T, base string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/admin/v1/trajectories", strings.NewReader(`{"id":"run-budget","tenant":"team-a","budget":{"turns":4,"dollars":0.01}}`))
	req.Header.Set("Authorization", "Bearer "+consoleOperator)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	for _, c := range []struct{ run, prompt string }{
		{"run-fleet", "plan the migration"}, {"run-fleet", "review the schema"}, {"run-fleet", "write the tests"},
		{"run-budget", "one"}, {"run-budget", "two"}, {"run-budget", "three"},
	} {
		cl := consoleClient(base, c.run, "")
		if _, err := cl.Messages.New(context.Background(), userTurn(c.prompt)); err != nil {
			t.Fatalf("%s: %v", c.run, err)
		}
	}
}
