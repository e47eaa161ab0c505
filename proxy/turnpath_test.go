package proxy_test

import (
	"context"
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

	"gatekeeper/proxy"
	"gatekeeper/trajectory"
)

// Other spellings of a turn path are the turn path: metered on the same
// record, halted by the same budget, refused for the same ended run; a
// spelling with no single meaning is refused before it reaches anyone.
func TestTurnPathSpellings(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	spellings := []string{"/v1/messages/", "/v1/m%65ssages", "/v1/%6D%65ssages/", "/v1/messages"}
	for i, sp := range spellings {
		resp := e.do(t, "POST", "/t/spell/anthropic"+sp, anthropicReq(i%2 == 0, "hello"), hdr()...)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", sp, resp.StatusCode, body)
		}
		waitFor(t, "the turn recorded", func() bool { return e.record(t, "spell").Turns == int64(i+1) })
	}
	for _, r := range e.mock.Requests() {
		if r.Path != "/v1/messages" || r.API == "" {
			t.Errorf("provider got %s (api %q), want the canonical /v1/messages turn", r.Path, r.API)
		}
	}
	if rec := e.record(t, "spell"); rec.Spend.InputTokens == 0 || rec.Spend.Dollars == 0 {
		t.Errorf("spelled turns not metered: %+v", rec.Spend)
	}

	// A run stopped by its budget refuses every spelling, as it does the
	// canonical one.
	rec := trajectory.New("spell-halt", "team-a", time.Now())
	rec.Budget.Turns = 1
	rec.Spend.Turns = 1
	if err := e.store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	before := len(e.mock.Requests())
	for _, sp := range spellings {
		resp := e.do(t, "POST", "/t/spell-halt/anthropic"+sp, anthropicReq(false, "more"), hdr()...)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusPaymentRequired || gjson.GetBytes(body, "error.type").String() != "budget_exceeded" {
			t.Errorf("%s on a spent budget: %d %s", sp, resp.StatusCode, body)
		}
	}
	if n := len(e.mock.Requests()); n != before {
		t.Fatalf("a halted spelling reached the provider (%d → %d)", before, n)
	}

	for _, p := range []string{"/anthropic/v1%2Fmessages", "/anthropic/v1/./messages", "/anthropic/v1/../v1/messages",
		"/anthropic//v1/messages", "/anthropic/v1/messages%00", "/anthropic/v1/a%5Cmessages"} {
		resp := e.do(t, "POST", p, anthropicReq(false, "hi"), hdr()...)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(body, "error.type").String() != "invalid_request_error" {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	if n := len(e.mock.Requests()); n != before {
		t.Fatalf("an ambiguous path reached the provider (%d → %d)", before, n)
	}
}

// Pass-through is an allowlist: whatever is not a turn, not built in and
// not allowed by the operator is refused with 404 and never reaches the
// provider; what passes is still authenticated, run-checked, body-limited
// and scheduled.
func TestPassThroughAllowlist(t *testing.T) {
	e := newEnv(t, envOpts{limits: "limits: {max_body_bytes: 4096}",
		openaiExtra: "    passthrough: [{method: GET, path: /v1/files/*}]"})
	oai := []string{"Authorization", "Bearer " + vkA, "content-type", "application/json"}
	refused := []struct{ name, method, path, body string }{
		{"legacy completions", "POST", "/openai/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"hi"}`},
		{"openai batch", "POST", "/openai/v1/batches", `{"input_file_id":"file-1","endpoint":"/v1/chat/completions"}`},
		{"openai batch read", "GET", "/openai/v1/batches/batch_1", ""},
		{"file upload", "POST", "/openai/v1/files", `{}`},
		{"file delete", "DELETE", "/openai/v1/files/file-1", ""},
		{"stored response", "GET", "/openai/v1/responses/resp_1", ""},
		{"stored response delete", "DELETE", "/openai/v1/responses/resp_1", ""},
		{"stored response items", "GET", "/openai/v1/responses/resp_1/input_items", ""},
		{"responses compact", "POST", "/openai/v1/responses/compact", `{"model":"gpt-5","input":"hi"}`},
		{"responses cancel", "POST", "/openai/v1/responses/resp_1/cancel", ""},
		{"realtime secret", "POST", "/openai/v1/realtime/client_secrets", `{}`},
		{"stored chat completion", "GET", "/openai/v1/chat/completions/chatcmpl-1", ""},
		{"responses by GET", "GET", "/openai/v1/responses", ""},
		{"anthropic batch", "POST", "/anthropic/v1/messages/batches", `{"requests":[]}`},
		{"anthropic batch results", "GET", "/anthropic/v1/messages/batches/msgbatch_1/results", ""},
		{"anthropic legacy complete", "POST", "/anthropic/v1/complete", `{"prompt":"hi"}`},
		{"anthropic files", "GET", "/anthropic/v1/files", ""},
		{"anthropic file delete", "DELETE", "/anthropic/v1/files/file_1", ""},
		{"encoded spelling of a refused path", "POST", "/openai/v1/b%61tches/", `{}`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			h := oai
			if strings.HasPrefix(tc.path, "/anthropic") {
				h = hdr()
			}
			resp := e.do(t, tc.method, tc.path, tc.body, h...)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusNotFound || gjson.GetBytes(body, "error.type").String() != "not_found_error" ||
				!strings.Contains(gjson.GetBytes(body, "error.message").String(), "providers[].passthrough") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Fatalf("%d refused pass-through requests reached the provider", n)
	}

	bg := e.do(t, "POST", "/openai/v1/responses", `{"model":"gpt-5","input":"hi","background":true}`, oai...)
	if body := readAll(t, bg); bg.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "background") {
		t.Fatalf("background response: %d %s", bg.StatusCode, body)
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Fatal("a background response reached the provider")
	}

	allowed := []struct{ method, path, body, upstream string }{
		{"GET", "/anthropic/v1/models", "", "/v1/models"},
		{"GET", "/openai/v1/models/gpt-4.1/", "", "/v1/models/gpt-4.1"},
		{"POST", "/anthropic/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`, "/v1/messages/count_tokens"},
		{"GET", "/openai/v1/files/file-1", "", "/v1/files/file-1"}, // operator-allowed
	}
	for i, a := range allowed {
		h := oai
		if strings.HasPrefix(a.path, "/anthropic") {
			h = hdr()
		}
		resp := e.do(t, a.method, a.path, a.body, h...)
		readAll(t, resp)
		reqs := e.mock.Requests()
		if len(reqs) != i+1 || reqs[i].Path != a.upstream ||
			reqs[i].Header.Get("X-Api-Key") != antKey && reqs[i].Header.Get("Authorization") != "Bearer "+oaiKey {
			t.Fatalf("%s %s: provider saw %d requests, last %+v", a.method, a.path, len(reqs), reqs[len(reqs)-1].Path)
		}
	}

	// Still authenticated, body-limited and run-checked.
	before := len(e.mock.Requests())
	resp := e.do(t, "GET", "/openai/v1/models", "")
	if readAll(t, resp); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("keyless pass-through: %d", resp.StatusCode)
	}
	resp = e.do(t, "POST", "/anthropic/v1/messages/count_tokens", anthropicReq(false, strings.Repeat("x", 5000)), hdr()...)
	if readAll(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized pass-through: %d", resp.StatusCode)
	}
	ctx := context.Background()
	ended := trajectory.New("pass-ended", "team-a", time.Now())
	paused := trajectory.New("pass-paused", "team-a", time.Now())
	pausing := trajectory.New("pass-pausing", "team-a", time.Now())
	pausing.Pending.Control = &trajectory.Control{Kind: trajectory.ControlPause, At: time.Now()}
	// A run whose subagent sub1 was killed and whose subagent sub2 is
	// paused, and sub2's own subagent sub3.
	live := trajectory.New("pass-live", "team-a", time.Now())
	sub1 := trajectory.New(proxy.ChildID("pass-live", "agent:sub1"), "team-a", time.Now())
	sub1.ParentID = "pass-live"
	sub2 := trajectory.New(proxy.ChildID("pass-live", "agent:sub2"), "team-a", time.Now())
	sub2.ParentID = "pass-live"
	sub3 := trajectory.New(proxy.ChildID(sub2.ID, "agent:sub3"), "team-a", time.Now())
	sub3.ParentID = sub2.ID
	for _, r := range []*trajectory.Record{ended, paused, pausing, live, sub1, sub2, sub3} {
		if err := e.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{sub1.ID, sub2.ID} {
		if _, err := e.store.Update(ctx, id, func(r *trajectory.Record) ([]trajectory.Event, error) {
			if id == sub2.ID {
				_, err := r.Transition(trajectory.Paused, "test", time.Now())
				return nil, err
			}
			_, err := r.Finalize(trajectory.Failed, trajectory.ExitKilled, time.Now())
			return nil, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.Update(ctx, "pass-ended", func(r *trajectory.Record) ([]trajectory.Event, error) {
		_, err := r.Finalize(trajectory.Failed, trajectory.ExitKilled, time.Now())
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Update(ctx, "pass-paused", func(r *trajectory.Record) ([]trajectory.Event, error) {
		_, err := r.Transition(trajectory.Paused, "test", time.Now())
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path   string
		hdr    []string
		status int
		typ    string
	}{
		{"/t/pass-ended/anthropic/v1/models", hdr(), 403, "trajectory_canceled"},
		{"/anthropic/v1/models", hdr("X-Gatekeeper-Trajectory", "pass-ended"), 403, "trajectory_canceled"},
		{"/t/pass-paused/anthropic/v1/models", hdr(), 503, "trajectory_paused"},
		{"/t/pass-pausing/anthropic/v1/models", hdr(), 503, "trajectory_paused"},
		{"/t/pass-live/anthropic/v1/models", hdr("X-Claude-Code-Agent-Id", "sub1"), 403, "trajectory_canceled"},
		{"/anthropic/v1/models", hdr("X-Gatekeeper-Trajectory", "pass-live", "X-Claude-Code-Agent-Id", "sub1"), 403, "trajectory_canceled"},
		{"/t/pass-live/anthropic/v1/models", hdr("X-Claude-Code-Agent-Id", "sub2"), 503, "trajectory_paused"},
		{"/t/pass-live/anthropic/v1/models", hdr("X-Claude-Code-Agent-Id", "sub3", "X-Claude-Code-Parent-Agent-Id", "sub2"), 503, "trajectory_paused"},
	} {
		resp := e.do(t, "GET", c.path, "", c.hdr...)
		body := readAll(t, resp)
		if resp.StatusCode != c.status || gjson.GetBytes(body, "error.type").String() != c.typ {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
		}
	}
	if n := len(e.mock.Requests()); n != before {
		t.Fatalf("refused pass-through reached the provider (%d → %d)", before, n)
	}
	// The run itself, and a subagent of it that was never stopped, pass.
	for _, h := range [][]string{hdr(), hdr("X-Claude-Code-Agent-Id", "sub9")} {
		resp := e.do(t, "GET", "/t/pass-live/anthropic/v1/models", "", h...)
		if readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Errorf("live run %v: %d", h, resp.StatusCode)
		}
	}
	// Team-a's ended run is nothing to team-b, whose names are its own.
	resp = e.do(t, "GET", "/t/pass-ended/anthropic/v1/models", "", "x-api-key", vkB)
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Errorf("team-b naming a run team-a ended: %d %s", resp.StatusCode, body)
	}
}

// A pass-through request takes its key through the rate-limit scheduler as
// one request: with one request a minute, the second waits and is refused.
func TestPassThroughScheduled(t *testing.T) {
	e := newEnv(t, envOpts{limits: "rate_limits: {max_wait: 1s}",
		openaiKeys: "[{name: k1, key: " + oaiKey + ", rpm: 1}]"})
	c := openai.NewClient(ooption.WithBaseURL(e.gk+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0))
	if _, err := c.Models.List(ctxT(t)); err != nil {
		t.Fatalf("first model listing: %v", err)
	}
	_, err := c.Models.List(ctxT(t))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusTooManyRequests || !strings.Contains(oe.RawJSON(), "rate_limited") {
		t.Fatalf("second listing on a key with rpm 1: %v", err)
	}
	if n := len(e.mock.Requests()); n != 1 {
		t.Fatalf("provider saw %d requests, want 1", n)
	}
}

// Header policy: the agent's cookies, organization and project never
// reach the provider; the key's own organization and project do; a
// tenant's anthropic_beta list refuses other betas, and a tenant without
// one forwards its betas verbatim.
func TestHeaderPolicy(t *testing.T) {
	e := newEnv(t, envOpts{openaiKeys: "[{name: k1, key: " + oaiKey + ", organization: org-gk, project: proj_gk}]",
		teamAExtra: "    anthropic_beta: [beta-one, beta-two]"})
	c := openai.NewClient(ooption.WithBaseURL(e.gk+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
		ooption.WithOrganization("org-agent"), ooption.WithProject("proj_agent"), ooption.WithHeader("Cookie", "session=agent"))
	if _, err := c.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}); err != nil {
		t.Fatal(err)
	}
	resp := e.do(t, "GET", "/openai/v1/models", "", "Authorization", "Bearer "+vkA, "Cookie", "a=b", "OpenAI-Organization", "org-agent")
	readAll(t, resp)
	for _, r := range e.mock.Requests() {
		if r.Header.Get("Cookie") != "" || r.Header.Get("OpenAI-Organization") != "org-gk" || r.Header.Get("OpenAI-Project") != "proj_gk" {
			t.Errorf("%s %s reached the provider with cookie %q organization %q project %q", r.Method, r.Path,
				r.Header.Get("Cookie"), r.Header.Get("OpenAI-Organization"), r.Header.Get("OpenAI-Project"))
		}
	}

	e.mock.Reset()
	ant := func(key, betas string) error {
		c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/anthropic"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0),
			aoption.WithHeader("anthropic-beta", betas))
		_, err := c.Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi " + key + betas))}})
		return err
	}
	if err := ant(vkA, "beta-one,beta-two"); err != nil {
		t.Fatalf("listed betas: %v", err)
	}
	err := ant(vkA, "beta-one, beta-three")
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.RawJSON(), "tenants[].anthropic_beta") {
		t.Fatalf("unlisted beta: %v", err)
	}
	if err := ant(vkB, "anything-2026-01-01,fine-grained-tool-streaming-2025-05-14"); err != nil {
		t.Fatalf("tenant without a list: %v", err)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Anthropic-Beta") != "beta-one,beta-two" ||
		reqs[1].Header.Get("Anthropic-Beta") != "anything-2026-01-01,fine-grained-tool-streaming-2025-05-14" {
		t.Fatalf("betas not forwarded verbatim, or a refused one forwarded: %d requests", len(reqs))
	}
}

// The members gatekeeper decides on must have their JSON type, and no
// top-level member may come twice: a provider's lenient decoder would
// read a request gatekeeper metered as another.
func TestDecisionMembersTyped(t *testing.T) {
	e := newEnv(t, envOpts{})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	refused := map[string]string{
		"stream as a string":       `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":"true",` + msgs + `}`,
		"stream as a number":       `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":1,` + msgs + `}`,
		"stream twice":             `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":false,"stream":true,` + msgs + `}`,
		"stream twice, escaped":    `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":false,"str\u0065am":true,` + msgs + `}`,
		"max_tokens as a string":   `{"model":"claude-sonnet-4-5","max_tokens":"100000",` + msgs + `}`,
		"max_tokens as a fraction": `{"model":"claude-sonnet-4-5","max_tokens":64.5,` + msgs + `}`,
		"max_tokens exponent":      `{"model":"claude-sonnet-4-5","max_tokens":1e5,` + msgs + `}`,
		"model as a number":        `{"model":5,"max_tokens":64,` + msgs + `}`,
		"messages twice":           `{"model":"claude-sonnet-4-5","max_tokens":64,` + msgs + `,` + msgs + `}`,
	}
	for name, body := range refused {
		t.Run(name, func(t *testing.T) {
			resp := e.do(t, "POST", "/anthropic/v1/messages", body, hdr()...)
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(b, "error.type").String() != "invalid_request_error" {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}
	oai := []string{"Authorization", "Bearer " + vkA}
	for _, body := range []string{`{"model":"gpt-4.1","stream":"true","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4.1","max_completion_tokens":"9","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-5","input":"hi","max_output_tokens":"9"}`, `{"model":"gpt-5","input":"hi","background":"true"}`} {
		path := "/openai/v1/chat/completions"
		if strings.Contains(body, `"input"`) {
			path = "/openai/v1/responses"
		}
		resp := e.do(t, "POST", path, body, oai...)
		if b := readAll(t, resp); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Fatalf("%d refused requests reached the provider", n)
	}
	// null reads as absent, for gatekeeper and the provider alike.
	resp := e.do(t, "POST", "/openai/v1/chat/completions", `{"model":"gpt-4.1","stream":null,"max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`, oai...)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("null members: %d %s", resp.StatusCode, b)
	}
}

// An upstream error body reaches the agent in the provider's words, with
// every fragment of the provider key redacted, on turns and pass-through.
func TestUpstreamErrorKeyRedacted(t *testing.T) {
	const wrongKey = "sk-oai-notvalid-7f3c9a1b2d4e"
	e := newEnv(t, envOpts{openaiKeys: "[{name: k1, key: " + wrongKey + "}]"})
	c := openai.NewClient(ooption.WithBaseURL(e.gk+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0))
	_, err := c.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusUnauthorized {
		t.Fatalf("turn with a key the provider refuses: %v", err)
	}
	resp := e.do(t, "GET", "/openai/v1/models", "", "Authorization", "Bearer "+vkA)
	passBody := string(readAll(t, resp))
	for _, body := range []string{oe.RawJSON(), passBody} {
		if !strings.Contains(body, "Incorrect API key provided: [redacted]") || strings.Contains(body, wrongKey[:7]) ||
			strings.Contains(body, wrongKey[len(wrongKey)-4:]) || !gjson.Valid(body) {
			t.Errorf("error body not redacted, or not the provider's: %s", body)
		}
	}
	// The provider did see the masked form: the redaction is gatekeeper's.
	raw := e.mock.Requests()
	if len(raw) != 2 {
		t.Fatalf("provider saw %d requests", len(raw))
	}
	waitFor(t, "the refused turn recorded", func() bool {
		recs, err := e.store.List(context.Background(), trajectory.Filter{})
		return err == nil && len(recs) == 1 && recs[0].LastStopReason == "error"
	})
	recs, _ := e.store.List(context.Background(), trajectory.Filter{})
	for _, ev := range e.events(t, recs[0].ID) {
		if strings.Contains(string(ev.Data), wrongKey[len(wrongKey)-4:]) {
			t.Errorf("event %s holds a key fragment: %s", ev.Type, ev.Data)
		}
	}
}
