package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/chromedp/chromedp"

	"gatekeeper/config"
)

const (
	scopedConsoleToken = "console-team-a-token-0001"
	rootConsoleToken   = "console-root-token-000001"
	teamBKey           = "vk-console-team-b-0001"
)

// TestConsoleScopedToken signs in to the console in a real Chromium with a
// token scoped to team-a while team-a and team-b both run agents and wait
// on approvals: the runs table, the inbox and a run's page show team-a's
// alone, before and after live changes of both tenants, and team-b's run
// is as absent as one that never existed.
func TestConsoleScopedToken(t *testing.T) {
	tab := browser(t)
	yaml := strings.Replace(consoleYAML, "admin:\n  tokens:\n", "admin:\n  tokens:\n"+
		`    - {name: ann, token: `+scopedConsoleToken+`, roles: [operator, "approver:secops"], tenants: [team-a]}
    - {name: root, token: `+rootConsoleToken+`, roles: [operator, "approver:secops"]}
`, 1)
	yaml = strings.Replace(yaml, "tenants:\n", "tenants:\n  - {name: team-b, keys: ["+teamBKey+"]}\n", 1)
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
		s.feed.EndSubscriptions()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	})
	base := srv.URL
	agent := func(key, run, spec string) anthropic.Client {
		opts := []aoption.RequestOption{aoption.WithBaseURL(base + "/t/" + run + "/anthropic"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)}
		if spec != "" {
			opts = append(opts, aoption.WithHeader("X-Mock-Turn", spec))
		}
		return anthropic.NewClient(opts...)
	}
	turn := func(key, run string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := agent(key, run, "")
		if _, err := c.Messages.New(ctx, userTurn("hello")); err != nil {
			t.Fatalf("%s: %v", run, err)
		}
	}
	gated := func(key, run, dir string) *sdkCall {
		spec := fmt.Sprintf(`{"kind":"tool","first_only":true,"text":"Cleaning.","tools":[{"name":"Bash","input":{"command":"rm -rf /srv/%s"}}]}`, dir)
		return startCall(agent(key, run, spec), userTurn("clean up"))
	}
	turn(consoleKey, "a-1")
	turn(teamBKey, "b-1")
	heldA, heldB := gated(consoleKey, "a-held", "team-a-cache"), gated(teamBKey, "b-held", "team-b-cache")
	pending := func() int {
		var out struct {
			Approvals []any `json:"approvals"`
		}
		consoleAdmin(t, http.MethodGet, base+"/admin/v1/approvals?state=pending", rootConsoleToken, "", &out)
		return len(out.Approvals)
	}
	for deadline := time.Now().Add(30 * time.Second); pending() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two gated calls were not held")
		}
	}

	signIn(t, tab, base, scopedConsoleToken)
	if who := evaluate[string](t, tab, `document.querySelector("#who").textContent`); !strings.Contains(who, "ann") || !strings.Contains(who, "team-a") {
		t.Errorf("signed in as %q", who)
	}
	noTeamB := func(where string) {
		t.Helper()
		if txt := evaluate[string](t, tab, `document.body.innerText + document.body.innerHTML`); strings.Contains(txt, "team-b") || strings.Contains(txt, "b-1") || strings.Contains(txt, "b-held") || strings.Contains(txt, "b-2") {
			t.Errorf("%s shows team-b's objects to a team-a token", where)
		}
	}
	until(t, tab, "team-a's runs", `!!document.querySelector('#runs-table tr[data-id="a-1"]') && !!document.querySelector('#runs-table tr[data-id="a-held"]')`)
	noTeamB("the runs table")

	// Both tenants change while the page follows the stream.
	turn(teamBKey, "b-2")
	consoleAdmin(t, http.MethodPost, base+"/admin/v1/trajectories/b-1/pause", rootConsoleToken, "{}", nil)
	turn(consoleKey, "a-2")
	until(t, tab, "team-a's new run, live", `!!document.querySelector('#runs-table tr[data-id="a-2"]')`)
	noTeamB("the runs table after live changes")

	step(t, tab, "open the inbox", chromedp.Navigate(base+"/console/#/approvals"))
	until(t, tab, "team-a's request", `document.querySelectorAll("#inbox article.request").length === 1 && document.querySelector("#inbox article.request pre.call").textContent.includes("team-a-cache")`)
	noTeamB("the inbox")

	step(t, tab, "open team-b's run by its id", chromedp.Navigate(base+"/console/#/run/b-1"))
	until(t, tab, "the run is absent", `(document.querySelector("#run-summary .error") || {}).textContent === "no such trajectory"`)
	// The page names the id asked for, and nothing else of it.
	if txt := evaluate[string](t, tab, `document.body.innerText + document.body.innerHTML`); strings.Contains(txt, "team-b") {
		t.Error("team-b's run page shows the run's tenant to a team-a token")
	}
	if txt := evaluate[string](t, tab, `document.body.innerText`); strings.Contains(txt, "PAUSED") {
		t.Error("team-b's run page shows the run to a team-a token")
	}

	// The holds end: both denied by the unscoped token.
	for _, h := range []struct {
		call *sdkCall
		dir  string
	}{{heldA, "team-a-cache"}, {heldB, "team-b-cache"}} {
		var out struct {
			Approvals []struct {
				ID   string `json:"id"`
				Call struct {
					Input any `json:"input"`
				} `json:"call"`
			} `json:"approvals"`
		}
		consoleAdmin(t, http.MethodGet, base+"/admin/v1/approvals?state=pending", rootConsoleToken, "", &out)
		for _, a := range out.Approvals {
			if strings.Contains(fmt.Sprint(a.Call.Input), h.dir) {
				consoleAdmin(t, http.MethodPost, base+"/admin/v1/approvals/"+a.ID+"/deny", rootConsoleToken, "{}", nil)
			}
		}
		h.call.wait(t)
	}
}
