package proxy_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"gatekeeper/config"
	"gatekeeper/internal/testidp"
	"gatekeeper/meter"
	"gatekeeper/spendlimit"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// TestPersonDailyCapClampsThenRefuses: a person's daily spend limit
// (here the default one) lowers a call's max_tokens to what is left, as a
// tenant's ceiling does, charges the person's book on the ledger at
// settle, and once too little is left refuses the call, in the
// provider's error format, naming the cap and when it frees room. The
// tenant (no limits) and a virtual key of it are not bound by it.
func TestPersonDailyCapClampsThenRefuses(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada)
	id := identityOf(idp)
	id.Limits = []config.PersonLimit{{Scope: config.LimitScope{Default: true}, Dollars: 0.05, Period: config.PeriodDaily},
		{Scope: config.LimitScope{Group: "eng"}, Dollars: 1, Period: config.PeriodWeekly}}
	e := newEnv(t, envOpts{identity: id})
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	var sent []byte
	client := func(run string) anthropic.Client {
		return anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/"+run+"/anthropic"), aoption.WithAPIKey(tok.AccessToken), aoption.WithMaxRetries(0),
			aoption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"the logs show three restarts"}`), aoption.WithMiddleware(capture(&sent)))
	}
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 16000,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("summarize the logs"))}}
	c := client("p-first")
	if _, err := c.Messages.New(ctxT(t), params); err != nil {
		t.Fatalf("the call was refused: %v", err)
	}
	want := meter.FitCall([]meter.Level{{ID: "d", Budget: trajectory.Budget{Dollars: 0.05}}}, meter.DefaultTable().Worst("claude-sonnet-4-5", int64(len(sent))), false).MaxOutput
	if got := gjson.GetBytes(lastUpstream(t, e), "max_tokens").Int(); got != want || want >= 16000 || want < 1024 {
		t.Errorf("forwarded max_tokens %d, want the person's clamp %d", got, want)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "p-first"); return rec.Turns == 1 })
	clamps := e.eventsOf(t, "p-first", trajectory.EventBudgetClamp)
	if len(clamps) != 1 || clamps[0]["to"] != float64(want) || clamps[0]["binding"] != "person "+ada.Email || clamps[0]["from"] != float64(16000) {
		t.Errorf("clamp events %v, want one to %d bound by the person", clamps, want)
	}
	book := spendlimit.Book(&trajectory.Person{Subject: ada.Subject})
	u, err := e.ledger.Usage(ctxT(t), book)
	if err != nil {
		t.Fatal(err)
	}
	if u.InFlight != 0 || u.Reserved != (tenant.Amount{}) {
		t.Errorf("after the call: %d calls in flight holding %+v", u.InFlight, u.Reserved)
	}
	if got, want := u.Day().Micros, meter.FromDollars(rec.Spend.Dollars); got != want || got == 0 {
		t.Errorf("person's day spend %d micros, the run's %d", got, want)
	}

	// Other runs of the person spent nearly all the rest.
	if err := e.ledger.Settle(ctxT(t), book, "", tenant.Amount{Micros: 50_000 - u.Day().Micros - 100}); err != nil {
		t.Fatal(err)
	}
	before := len(e.mock.Requests())
	c = client("p-second")
	_, err = c.Messages.New(ctxT(t), params)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("a call past the person's daily cap: %v, want 402", err)
	}
	var body struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(ae.RawJSON()), &body); err != nil {
		t.Fatal(err)
	}
	msg := body.Error.Message
	if body.Type != "error" || !strings.Contains(msg, "person ada@example.com has reached the default daily spend limit of $0.05 a person") ||
		!strings.Contains(msg, "it resets, as earlier spend leaves the window, at 2026-12-03T10:00:00Z") {
		t.Errorf("refusal %s", ae.RawJSON())
	}
	if got := ae.Response.Header.Get("X-Should-Retry"); got != "false" {
		t.Errorf("x-should-retry = %q", got)
	}
	if n := len(e.mock.Requests()); n != before {
		t.Errorf("the refused call reached the provider")
	}
	if u, _ := e.ledger.Usage(ctxT(t), book); u.InFlight != 0 {
		t.Errorf("the refused call holds a reservation")
	}
	// The tenant has no limits, and a virtual key is no person.
	cb := openai.NewClient(ooption.WithBaseURL(e.gk+"/openai/v1"), ooption.WithAPIKey(vkB), ooption.WithMaxRetries(0))
	if _, err := cb.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}); err != nil {
		t.Errorf("team-b's virtual key: %v", err)
	}
}

// TestGroupModelAllowlist: a person whose groups' model lists allow no
// match for the model gets a 403 in the provider's own error format, in
// all three APIs, and the provider never sees the call; an allowed model
// passes, and a virtual key is not restricted.
func TestGroupModelAllowlist(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada)
	id := identityOf(idp)
	id.Models = []config.GroupModels{{Group: "eng", Allow: []string{"claude-haiku-*", "gpt-4.1-mini", "gemini-2.5-flash"}}}
	e := newEnv(t, envOpts{identity: id})
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.mock.Requests())
	cases := []struct {
		name, path, body string
		hdr              []string
		typ              string // the error's type (Gemini: status)
		typePath         string
	}{
		{"anthropic", "/anthropic/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01"}, "permission_error", "error.type"},
		{"openai", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer " + tok.AccessToken}, "permission_error", "error.type"},
		{"gemini", "/gemini/v1beta/models/gemini-2.5-pro:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			[]string{"x-goog-api-key", tok.AccessToken}, "PERMISSION_DENIED", "error.status"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.do(t, "POST", tc.path, tc.body, append([]string{"content-type", "application/json"}, tc.hdr...)...)
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusForbidden || gjson.GetBytes(b, tc.typePath).String() != tc.typ ||
				!strings.Contains(gjson.GetBytes(b, "error.message").String(), "is not allowed for ada@example.com") {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}
	if n := len(e.mock.Requests()); n != before {
		t.Fatalf("%d refused calls reached the provider", n-before)
	}
	resp := e.do(t, "POST", "/anthropic/v1/messages", `{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
		"content-type", "application/json", "x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01")
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("an allowed model: %d %s", resp.StatusCode, b)
	}
	resp = e.do(t, "POST", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		"content-type", "application/json", "Authorization", "Bearer "+vkB)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("a virtual key: %d %s", resp.StatusCode, b)
	}
	// A reload that lists gpt-4o for eng lets the person call it.
	next := *e.cfg
	next.Identity.Models = []config.GroupModels{{Group: "eng", Allow: []string{"gpt-4o"}}}
	if err := e.px.Reload(&next, nil); err != nil {
		t.Fatal(err)
	}
	resp = e.do(t, "POST", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		"content-type", "application/json", "Authorization", "Bearer "+tok.AccessToken)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("after the reload: %d %s", resp.StatusCode, b)
	}
}

// TestSpendLimitsAdminAPI: a limit set through the admin API, in the
// shape of Anthropic's Admin API spend limits (sent with x-api-key, as
// its clients send their key), binds the person's next call once the
// replica reads the limits again; deleting it lifts it; config's limits
// are listed beside it, and bad bodies are refused.
func TestSpendLimitsAdminAPI(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada)
	id := identityOf(idp)
	id.Limits = []config.PersonLimit{{Scope: config.LimitScope{Group: "eng"}, Dollars: 100, Period: config.PeriodMonthly}}
	e := newEnv(t, envOpts{identity: id})
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	turn := func() (int, []byte) {
		resp := e.do(t, "POST", "/anthropic/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`,
			"content-type", "application/json", "x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01")
		b := readAll(t, resp)
		return resp.StatusCode, b
	}
	if code, b := turn(); code != 200 {
		t.Fatalf("before any API limit: %d %s", code, b)
	}
	admin := func(method, path, body string) (int, []byte) {
		resp := e.do(t, method, "/admin/v1/organizations/spend_limits"+path, body, "x-api-key", adminToken, "content-type", "application/json")
		b := readAll(t, resp)
		return resp.StatusCode, b
	}
	code, b := admin("POST", "", `{"scope":{"type":"user","user_id":"ada"},"amount":"1","period":"weekly"}`)
	lid := gjson.GetBytes(b, "id").String()
	if code != 200 || !strings.HasPrefix(lid, "spl_") || gjson.GetBytes(b, "amount").String() != "1" || gjson.GetBytes(b, "type").String() != "spend_limit" ||
		gjson.GetBytes(b, "scope.user_id").String() != "ada" || gjson.GetBytes(b, "currency").String() != "USD" || gjson.GetBytes(b, "source").String() != "api" {
		t.Fatalf("set: %d %s", code, b)
	}
	code, b = admin("GET", "", "")
	if code != 200 || gjson.GetBytes(b, "data.#").Int() != 2 || gjson.GetBytes(b, "data.0.source").String() != "config" ||
		gjson.GetBytes(b, "data.0.scope.rbac_group_id").String() != "eng" || gjson.GetBytes(b, "data.0.amount").String() != "10000" || gjson.GetBytes(b, "data.1.id").String() != lid {
		t.Fatalf("list: %d %s", code, b)
	}
	cfgID := gjson.GetBytes(b, "data.0.id").String()
	// The replica reads the limits again after PersonLimitsTTL.
	e.clk.advance(3 * time.Second)
	code, b = turn()
	if code != http.StatusPaymentRequired || !strings.Contains(gjson.GetBytes(b, "error.message").String(), "their own weekly spend limit of $0.01") {
		t.Fatalf("past the API's limit: %d %s", code, b)
	}
	if code, b := admin("DELETE", "/"+lid, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	e.clk.advance(3 * time.Second)
	if code, b := turn(); code != 200 {
		t.Fatalf("after the delete: %d %s", code, b)
	}
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
	}{
		{"amount not cents", "POST", "", `{"scope":{"type":"organization"},"amount":"1.5","period":"daily"}`, 400},
		{"amount a number", "POST", "", `{"scope":{"type":"organization"},"amount":150,"period":"daily"}`, 400},
		{"period unknown", "POST", "", `{"scope":{"type":"organization"},"amount":"150","period":"hourly"}`, 400},
		{"scope unsupported", "POST", "", `{"scope":{"type":"workspace"},"amount":"150","period":"daily"}`, 400},
		{"user without id", "POST", "", `{"scope":{"type":"user"},"amount":"150","period":"daily"}`, 400},
		{"unknown field", "POST", "", `{"scope":{"type":"organization"},"amount":"150","period":"daily","x":1}`, 400},
		{"unknown tenant", "POST", "", `{"scope":{"type":"organization"},"amount":"150","period":"daily","tenant":"team-z"}`, 404},
		{"config limit deleted", "DELETE", "/" + cfgID, "", 409},
		{"no such limit", "GET", "/spl_nothing", "", 404},
	} {
		if code, b := admin(tc.method, tc.path, tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, b, tc.code)
		}
	}
	resp := e.do(t, "POST", "/admin/v1/organizations/spend_limits", `{"scope":{"type":"organization"},"amount":"150","period":"daily"}`, "Authorization", "Bearer "+readToken)
	if readAll(t, resp); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an approver set a limit: %d", resp.StatusCode)
	}
}

// TestSweptCallChargedToPerson: a call of a person's taken for lost is
// charged to the person's book under the call's id, as its own settle
// would have been, and its reservation there released; a settle from its
// replica coming after changes nothing.
func TestSweptCallChargedToPerson(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada)
	id := identityOf(idp)
	id.Limits = []config.PersonLimit{{Scope: config.LimitScope{Default: true}, Dollars: 5, Period: config.PeriodDaily}}
	e := newEnv(t, envOpts{identity: id})
	e.px.StartSwept()
	ctx := ctxT(t)
	person := &trajectory.Person{Subject: ada.Subject, Email: ada.Email, Groups: []string{"eng"}}
	book := spendlimit.Book(person)
	lim := tenant.Limits{MicrosPerDay: 5_000_000}
	if ok, err := e.ledger.Reserve(ctx, book, "call-lost", tenant.Amount{Micros: 120000, Tokens: 9000}, lim, time.Hour); err != nil || !ok {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	e.strand(t, "swept-person", "", "replica-gone", "call-lost", e.clk.Now().Add(-time.Hour), trajectory.Reservation{Calls: 1, Tokens: 9000, Micros: 120000})
	if _, err := e.store.Update(ctx, "swept-person", func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.Person = person
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := e.px.SweepCalls(ctx, false); n != 1 {
		t.Fatalf("sweep reclaimed %d calls, want 1", n)
	}
	want := meter.DefaultTable().Cost("claude-sonnet-4-5", trajectory.Usage{InputTokens: 1000, OutputTokens: 250}).Micros
	u, err := e.ledger.Usage(ctx, book)
	if err != nil {
		t.Fatal(err)
	}
	if u.InFlight != 0 || u.Reserved != (tenant.Amount{}) || u.Day().Micros != want || want <= 0 {
		t.Errorf("the person's book after the sweep: %d in flight holding %+v, day %+v; want %d µ$ and nothing held",
			u.InFlight, u.Reserved, u.Day(), want)
	}
	if err := e.ledger.Settle(ctx, book, "call-lost", tenant.Amount{Micros: 999}); err != nil {
		t.Fatal(err)
	}
	if again, _ := e.ledger.Usage(ctx, book); again.Day() != u.Day() {
		t.Errorf("a late settle of the swept call charged the person again: %+v → %+v", u.Day(), again.Day())
	}
}
