package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"gatekeeper/internal/testidp"
)

// TestConsoleFiltersByPerson: runs started with two people's sign-in
// tokens and with a virtual key show their person and groups in the runs
// list; typing a person into the filter keeps that person's runs and puts
// ?person= in the address, and opening that address shows them again.
func TestConsoleFiltersByPerson(t *testing.T) {
	tab := browser(t) // skips without chromium (fails under CI)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{AccessTokenLifetime: 10 * time.Minute},
		testidp.User{Subject: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"eng", "sre"}},
		testidp.User{Subject: "bob", Name: "Bob", Email: "bob@example.com", Groups: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	base := consoleServerOf(t, consoleYAML+`identity:
  issuer: `+idp.Issuer()+`
  client_id: `+testidp.ClientID+`
  groups: [{group: eng, tenant: team-a}]
`)
	for _, run := range []struct{ id, subject string }{{"ada-run", "ada"}, {"bob-run", "bob"}, {"vk-run", ""}} {
		key := consoleKey
		if run.subject != "" {
			tok, err := idp.Token(ctx, run.subject)
			if err != nil {
				t.Fatal(err)
			}
			key = tok.AccessToken
		}
		c := anthropic.NewClient(aoption.WithBaseURL(base+"/t/"+run.id+"/anthropic"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
		if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}); err != nil {
			t.Fatalf("%s: %v", run.id, err)
		}
	}

	signIn(t, tab, base, consoleOperator)
	const rows = `[...document.querySelectorAll("#runs-table tbody tr")].map((tr) => tr.dataset.id).sort().join(" ")`
	const cell = `(id) => document.querySelector('#runs-table tbody tr[data-id="' + id + '"] td.person').textContent`
	until(t, tab, "the three runs listed", rows+` === "ada-run bob-run vk-run"`)
	for id, want := range map[string]string{"ada-run": "ada@example.com (eng, sre)", "bob-run": "bob@example.com (eng)", "vk-run": "—"} {
		if got := evaluate[string](t, tab, "("+cell+")("+strconv.Quote(id)+")"); got != want {
			t.Errorf("%s's person cell = %q, want %q", id, got, want)
		}
	}

	step(t, tab, "filter by ada", chromedp.SendKeys(chromedp.CSS("#f-person"), "ada@example.com"+kb.Enter))
	until(t, tab, "only ada's run", rows+` === "ada-run"`)
	if got := evaluate[string](t, tab, "location.search"); got != "?person=ada%40example.com" {
		t.Errorf("the address keeps the filter as %q, want ?person=ada%%40example.com", got)
	}

	// The address alone filters: a new tab on it (signed in by the token the
	// page keeps) shows bob's run only.
	step(t, tab, "open the address of bob's runs", chromedp.Navigate(base+"/console/?person=bob"))
	until(t, tab, "only bob's run, by subject", rows+` === "bob-run" && document.querySelector("#f-person").value === "bob"`)

	// Emptied (three backspaces) and entered: every run again.
	step(t, tab, "clear the filter", chromedp.SendKeys(chromedp.CSS("#f-person"), kb.End+kb.Backspace+kb.Backspace+kb.Backspace+kb.Enter))
	until(t, tab, "every run again", rows+` === "ada-run bob-run vk-run" && location.search === ""`)
}
