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
	"gatekeeper/console"
	"gatekeeper/internal/testidp"
)

// TestConsoleSignInThroughIdP signs an approver in to the console in a real
// Chromium through the test provider's login page (authorization code
// with PKCE), while agents of two tenants wait on approvals. The
// approver's group is scoped to fleet: the page shows fleet's runs and
// request alone, and the approval is recorded under the person
// approvals.people maps the sign-in to, the same person as their Slack
// user. Nothing the sign-in gave is in the URL or in the page's storage.
func TestConsoleSignInThroughIdP(t *testing.T) {
	tab := browser(t)
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	carol := testidp.User{Subject: "u-carol", Name: "Carol Secops", Email: "carol@example.com", Groups: []string{"secops-fleet"}, Password: "carol-password"}
	idp, err := testidp.Start(testidp.Options{RedirectURIs: []string{base + console.CallbackPath}}, carol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	const (
		fleetKey    = "vk-signin-fleet-00001"
		researchKey = "vk-signin-research-01"
		rootToken   = "signin-root-token-00001"
	)
	yaml := `
providers:
  - name: anthropic
    api: anthropic
    base_url: mock
    keys: [{name: main, key: sk-mock-1, rpm: 1000, input_tpm: 2000000, output_tpm: 400000}]
tenants:
  - {name: fleet, keys: [` + fleetKey + `]}
  - {name: research, keys: [` + researchKey + `]}
admin:
  tokens:
    - {name: root, token: ` + rootToken + `, roles: [operator, "approver:secops"]}
identity:
  issuer: ` + idp.Issuer() + `
  client_id: gatekeeper-cli
  groups: [{group: secops-fleet, tenant: fleet}]
  console:
    client_id: ` + testidp.WebClientID + `
    client_secret: ${CONSOLE_SECRET}
    redirect_url: ` + base + console.CallbackPath + `
  admin_groups:
    - {group: secops-fleet, roles: ["approver:secops"], tenants: [fleet]}
gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf")'
    approvers: {roles: [secops]}
approvals:
  people:
    - {name: carol, subject: u-carol, slack_id: U0CAROL, roles: [secops]}
`
	cfg, err := config.Parse([]byte(yaml), env("CONSOLE_SECRET", testidp.WebClientSecret))
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
	srv.Config.Handler = s.handler
	srv.Start()
	t.Cleanup(func() {
		s.proxy.EndHolds()
		s.feed.EndSubscriptions()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	})

	agent := func(key, run, spec string) anthropic.Client {
		opts := []aoption.RequestOption{aoption.WithBaseURL(base + "/t/" + run + "/anthropic"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)}
		if spec != "" {
			opts = append(opts, aoption.WithHeader("X-Mock-Turn", spec))
		}
		return anthropic.NewClient(opts...)
	}
	gated := func(key, run, dir string) *sdkCall {
		spec := fmt.Sprintf(`{"kind":"tool","first_only":true,"text":"Cleaning.","tools":[{"name":"Bash","input":{"command":"rm -rf /srv/%s"}}]}`, dir)
		return startCall(agent(key, run, spec), userTurn("clean up"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for key, run := range map[string]string{fleetKey: "fleet-1", researchKey: "research-1"} {
		c := agent(key, run, "")
		if _, err := c.Messages.New(ctx, userTurn("hello")); err != nil {
			t.Fatalf("%s: %v", run, err)
		}
	}
	heldFleet, heldResearch := gated(fleetKey, "fleet-held", "fleet-cache"), gated(researchKey, "research-held", "research-cache")
	type approval struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Call  struct {
			Input any `json:"input"`
		} `json:"call"`
		Votes []struct {
			Approver   string `json:"approver"`
			Via        string `json:"via"`
			Credential string `json:"credential"`
		} `json:"votes"`
	}
	list := func(state string) []approval {
		var out struct {
			Approvals []approval `json:"approvals"`
		}
		consoleAdmin(t, http.MethodGet, base+"/admin/v1/approvals?state="+state, rootToken, "", &out)
		return out.Approvals
	}
	for deadline := time.Now().Add(30 * time.Second); len(list("pending")) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two gated calls were not held")
		}
	}

	step(t, tab, "open the console", chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#signin-sso")))
	step(t, tab, "sign in through the provider", chromedp.Click(chromedp.CSS("#signin-sso")),
		chromedp.WaitVisible(chromedp.CSS("#username")))
	if u := evaluate[string](t, tab, `location.href`); !strings.HasPrefix(u, idp.Issuer()+"/login") {
		t.Fatalf("the sign-in went to %s, not the provider's login page", u)
	}
	step(t, tab, "the provider's login form",
		chromedp.SendKeys(chromedp.CSS("#username"), carol.Subject),
		chromedp.SendKeys(chromedp.CSS("#password"), carol.Password),
		chromedp.Click(chromedp.CSS("#submit")),
		chromedp.WaitVisible(chromedp.CSS("#runs-table")))
	if who := evaluate[string](t, tab, `document.querySelector("#who").textContent`); !strings.Contains(who, "carol") || !strings.Contains(who, "fleet") {
		t.Errorf("signed in as %q", who)
	}
	// Nothing of the sign-in in the URL, the page's storage or a cookie it
	// can read.
	if got := evaluate[string](t, tab, `location.href + "|" + document.cookie + "|" + localStorage.length + "|" + sessionStorage.length`); got != base+"/console/||0|0" {
		t.Errorf("the page holds something of the sign-in: %q", got)
	}
	until(t, tab, "fleet's runs", `!!document.querySelector('#runs-table tr[data-id="fleet-1"]') && !!document.querySelector('#runs-table tr[data-id="fleet-held"]')`)
	if txt := evaluate[string](t, tab, `document.body.innerText + document.body.innerHTML`); strings.Contains(txt, "research") {
		t.Error("the runs table shows research's runs to a fleet approver")
	}
	step(t, tab, "open the inbox", chromedp.Navigate(base+"/console/#/approvals"))
	until(t, tab, "fleet's request alone", `document.querySelectorAll("#inbox article.request").length === 1 && document.querySelector("#inbox article.request pre.call").textContent.includes("fleet-cache")`)
	if txt := evaluate[string](t, tab, `document.body.innerText + document.body.innerHTML`); strings.Contains(txt, "research") {
		t.Error("the inbox shows research's request to a fleet approver")
	}
	step(t, tab, "approve", chromedp.WaitVisible(chromedp.CSS("#inbox button.approve")),
		chromedp.SendKeys(chromedp.CSS("#inbox article.request input"), "checked"),
		chromedp.Click(chromedp.CSS("#inbox button.approve")))
	heldFleet.wait(t)
	var decided *approval
	for _, a := range list("approved") {
		if strings.Contains(fmt.Sprint(a.Call.Input), "fleet-cache") {
			decided = &a
		}
	}
	if decided == nil || len(decided.Votes) != 1 || decided.Votes[0].Approver != "carol" || decided.Votes[0].Credential != "console sign-in u-carol" {
		t.Fatalf("the fleet request after the console's approval: %+v", decided)
	}

	// Signing out ends the session: the page is back at sign-in, and the
	// API refuses the page's cookie.
	step(t, tab, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#signin-sso")))
	// Each poll asks again: the page's sign-out call may still be on its way.
	until(t, tab, "the session is gone", `window.__whoami === 401 || (fetch("/admin/v1/whoami").then((r) => { window.__whoami = r.status; }), false)`)

	for _, a := range list("pending") {
		if strings.Contains(fmt.Sprint(a.Call.Input), "research-cache") {
			consoleAdmin(t, http.MethodPost, base+"/admin/v1/approvals/"+a.ID+"/deny", rootToken, "{}", nil)
		}
	}
	heldResearch.wait(t)
}
