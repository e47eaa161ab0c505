package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/tidwall/gjson"

	"gatekeeper/config"
	"gatekeeper/proxy"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// forwardTenant makes team-a send its agents' own credentials on.
const forwardTenant = "    credentials: forward"

// TestForwardedCredentialsReachProvider: for a tenant with credentials:
// forward, named by its virtual key in X-Gatekeeper-Key, the agent's own
// credential reaches the provider unchanged in every API (an API key, a
// subscription's bearer token, Gemini's header and query key), turns and
// pass-through alike; no pool key and no gatekeeper header goes with it,
// and the turn is metered on its tenant as any other.
func TestForwardedCredentialsReachProvider(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: forwardTenant})
	anth := []string{"anthropic-version", "2023-06-01", "content-type", "application/json", "X-Gatekeeper-Key", vkA}
	oai := []string{"content-type", "application/json", "X-Gatekeeper-Key", vkA}
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		header, want             string // the provider header that must arrive as sent
		turn                     bool
	}{
		{"anthropic api key", "POST", "/anthropic/v1/messages", anthropicReq(true, "hi"),
			append([]string{"x-api-key", ownAntKey}, anth...), "X-Api-Key", ownAntKey, true},
		{"anthropic subscription", "POST", "/anthropic/v1/messages?beta=true", anthropicReq(true, "hi"),
			append([]string{"Authorization", "Bearer " + ownAntOAuth, "anthropic-beta", "oauth-2025-04-20,claude-code-20250219"}, anth...),
			"Authorization", "Bearer " + ownAntOAuth, true},
		{"chat", "POST", "/openai/v1/chat/completions", `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			append([]string{"Authorization", "Bearer " + ownOaiKey, "OpenAI-Organization", "org-own"}, oai...), "Authorization", "Bearer " + ownOaiKey, true},
		{"responses", "POST", "/openai/v1/responses", `{"model":"gpt-4.1","stream":true,"input":"hi"}`,
			append([]string{"Authorization", "Bearer " + ownOaiKey}, oai...), "Authorization", "Bearer " + ownOaiKey, true},
		{"gemini header", "POST", gemStream, gemBody("hi"),
			append([]string{"x-goog-api-key", ownGemKey}, oai...), "X-Goog-Api-Key", ownGemKey, true},
		{"gemini query", "POST", gemWhole + "?key=" + ownGemKey, gemBody("hi"), oai, "", "", true},
		{"anthropic models", "GET", "/anthropic/v1/models?limit=1000", "",
			append([]string{"Authorization", "Bearer " + ownAntOAuth}, anth...), "Authorization", "Bearer " + ownAntOAuth, false},
		{"gemini countTokens", "POST", "/gemini/v1beta/models/gemini-2.5-flash:countTokens", gemBody("hi"),
			append([]string{"x-goog-api-key", ownGemKey}, oai...), "X-Goog-Api-Key", ownGemKey, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.mock.Requests())
			resp := e.do(t, tc.method, tc.path, tc.body, tc.hdr...)
			body := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			reqs := e.mock.Requests()
			if len(reqs) != before+1 {
				t.Fatalf("provider saw %d requests, want 1", len(reqs)-before)
			}
			got := reqs[len(reqs)-1]
			if tc.header != "" {
				if v := got.Header.Values(tc.header); len(v) != 1 || v[0] != tc.want {
					t.Errorf("provider got %s %q, want %q as the agent sent it", tc.header, v, tc.want)
				}
			} else if !strings.Contains(got.RawQuery, "key="+ownGemKey) {
				t.Errorf("provider got query %q, want the agent's key in it", got.RawQuery)
			}
			if tc.name == "chat" && got.Header.Get("OpenAI-Organization") != "org-own" {
				t.Errorf("the agent's own organization did not reach the provider: %q", got.Header.Get("OpenAI-Organization"))
			}
			for k, vs := range got.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-gatekeeper") {
					t.Errorf("gatekeeper header %s reached the provider", k)
				}
				for _, v := range vs {
					for _, secret := range []string{vkA, antKey, oaiKey, gemKey} {
						if strings.Contains(v, secret) {
							t.Errorf("header %s carries a secret that is not the agent's own: %q", k, v)
						}
					}
				}
			}
			tid := resp.Header.Get("X-Gatekeeper-Trajectory")
			if tc.turn != (tid != "") {
				t.Fatalf("turn %v, trajectory %q", tc.turn, tid)
			}
			if tc.turn {
				waitFor(t, "the turn's record", func() bool { return e.record(t, tid).Turns == 1 })
				if rec := e.record(t, tid); rec.Tenant != "team-a" || rec.Spend.Dollars <= 0 {
					t.Errorf("record tenant %q spend %+v: a forwarded turn is metered on its tenant", rec.Tenant, rec.Spend)
				}
			}
		})
	}
}

// TestForwardedCredentialSessions: a forward tenant's turns find their run
// by the client's session id scoped to the gatekeeper key, whatever
// credential each carries; another tenant's same session id is another run.
func TestForwardedCredentialSessions(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: forwardTenant})
	run := func(vk, session string, cred ...string) string {
		t.Helper()
		h := append([]string{"X-Gatekeeper-Key", vk, "X-Claude-Code-Session-Id", session, "anthropic-version", "2023-06-01"}, cred...)
		resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"), h...)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return resp.Header.Get("X-Gatekeeper-Trajectory")
	}
	first := run(vkA, "sess-forward-1", "x-api-key", ownAntKey)
	second := run(vkA, "sess-forward-1", "Authorization", "Bearer "+ownAntOAuth)
	other := run(vkB, "sess-forward-1") // team-b, pool credentials, its key in X-Gatekeeper-Key
	if first == "" || first != second {
		t.Errorf("one session, two credentials: runs %q and %q, want one", first, second)
	}
	if other == first {
		t.Errorf("another tenant's same session id landed on run %q", other)
	}
	if got := e.mock.Requests()[2].APIKey; got != antKey {
		t.Errorf("team-b's turn, its key in X-Gatekeeper-Key, reached the provider with %q, want the pool key", got)
	}
}

// TestForwardedCredentialRefusals: what is refused before the provider
// sees anything, in the provider's error format: a forward tenant's
// request without a provider credential, with its virtual key where the
// provider's credential goes, or with the virtual key as its credential.
// A pool tenant's own credential, sent beside X-Gatekeeper-Key, is
// dropped for the pool key.
func TestForwardedCredentialRefusals(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: forwardTenant})
	anth := []string{"anthropic-version", "2023-06-01", "content-type", "application/json"}
	cases := []struct {
		name, path, body string
		hdr              []string
		errPath, want    string
	}{
		{"no credential", "/anthropic/v1/messages", anthropicReq(false, "hi"), append([]string{"X-Gatekeeper-Key", vkA}, anth...),
			"error.type", "authentication_error"},
		{"no credential gemini", gemWhole, gemBody("hi"), []string{"X-Gatekeeper-Key", vkA}, "error.status", "UNAUTHENTICATED"},
		{"virtual key as credential", "/anthropic/v1/messages", anthropicReq(false, "hi"), append([]string{"x-api-key", vkA}, anth...),
			"error.type", "authentication_error"},
		{"virtual key in both", "/openai/v1/chat/completions", `{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}`,
			[]string{"X-Gatekeeper-Key", vkA, "Authorization", "Bearer " + vkA}, "error.type", "authentication_error"},
		{"no credential pass-through", "/anthropic/v1/messages/count_tokens", anthropicReq(false, "hi"),
			append([]string{"X-Gatekeeper-Key", vkA}, anth...), "error.type", "authentication_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.mock.Requests())
			resp := e.do(t, "POST", tc.path, tc.body, tc.hdr...)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusUnauthorized || gjson.GetBytes(body, tc.errPath).String() != tc.want {
				t.Fatalf("status %d: %s, want 401 with %s %s", resp.StatusCode, body, tc.errPath, tc.want)
			}
			if strings.Contains(string(body), vkA) {
				t.Errorf("the refusal shows the virtual key: %s", body)
			}
			if n := len(e.mock.Requests()); n != before {
				t.Errorf("a refused request reached the provider")
			}
		})
	}
	t.Run("pool tenant's own credential dropped", func(t *testing.T) {
		resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
			append([]string{"X-Gatekeeper-Key", vkB, "Authorization", "Bearer " + ownAntOAuth, "x-api-key", ownAntKey}, anth...)...)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := e.mock.Requests()[len(e.mock.Requests())-1]
		if got.Header.Get("X-Api-Key") != antKey || got.Header.Get("Authorization") != "" {
			t.Errorf("provider got x-api-key %q, Authorization %q: want the pool key alone", got.Header.Get("X-Api-Key"), got.Header.Get("Authorization"))
		}
	})
}

// TestForwardedCredentialRedacted: a provider error reply that quotes the
// agent's own credential reaches the agent, and the turn's event, without
// it, as it would without a pool key's.
func TestForwardedCredentialRedacted(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` +
			r.Header.Get("X-Api-Key") + `"}}`))
	}))
	t.Cleanup(echo.Close)
	e := newEnv(t, envOpts{teamAExtra: forwardTenant, upstream: echo.URL})
	for _, path := range []string{"/t/redact-1/anthropic/v1/messages", "/anthropic/v1/messages/count_tokens"} {
		resp := e.do(t, "POST", path, anthropicReq(false, "hi"),
			"X-Gatekeeper-Key", vkA, "x-api-key", ownAntKey, "anthropic-version", "2023-06-01", "content-type", "application/json")
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "[redacted]") {
			t.Fatalf("%s: status %d: %s, want the provider's 401 redacted", path, resp.StatusCode, body)
		}
		if strings.Contains(string(body), ownAntKey[len(ownAntKey)-8:]) {
			t.Errorf("%s: the agent's credential reached the agent's error: %s", path, body)
		}
	}
	// The failed turn's event holds the provider's error as its detail.
	var evs []trajectory.Event
	waitFor(t, "the failed turn's event", func() bool {
		evs = e.events(t, "redact-1")
		return slices.ContainsFunc(evs, func(ev trajectory.Event) bool { return strings.Contains(string(ev.Data), "invalid x-api-key") })
	})
	for _, ev := range evs {
		if text := string(ev.Data) + ev.Reason; strings.Contains(text, ownAntKey[len(ownAntKey)-8:]) {
			t.Errorf("event %s holds the agent's credential: %s", ev.Type, text)
		}
	}
}

// TestChatGPTSignInRefused: a request signed in with a ChatGPT account
// (Codex's chatgpt-account-id beside its bearer token) is refused with a
// message saying why, for any tenant, before the provider sees it.
func TestChatGPTSignInRefused(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: forwardTenant})
	body := `{"model":"gpt-5.1-codex","stream":true,"input":"hi"}`
	for _, vk := range []string{vkA, vkB} {
		resp := e.do(t, "POST", "/openai/v1/responses", body, "X-Gatekeeper-Key", vk, "Authorization", "Bearer eyJhbGciOi.chatgpt.token",
			"chatgpt-account-id", "acct-1234", "content-type", "application/json")
		got := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(gjson.GetBytes(got, "error.message").String(), "ChatGPT sign-in") {
			t.Errorf("%s: status %d: %s, want 400 naming the ChatGPT sign-in", vk, resp.StatusCode, got)
		}
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Errorf("the provider saw %d requests", n)
	}
}

// TestForwardOnlyWithoutPoolKeys: when every tenant forwards its agents'
// credentials, a provider may have no key at all, and its turns and
// pass-through are served with the agents' own.
func TestForwardOnlyWithoutPoolKeys(t *testing.T) {
	mock, mockURL := newMock(t, false, nil)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: anthropic, api: anthropic, base_url: %q}
tenants:
  - {name: team-a, keys: [%s], credentials: forward}
`, mockURL, vkA)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Options{Config: cfg, Store: memory.New(memory.Options{}), Ledger: memory.NewLedger(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	px.Routes(r)
	gk := httptest.NewServer(r)
	t.Cleanup(func() {
		gk.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		px.Close(ctx)
	})
	e := &env{gk: gk.URL, mock: mock}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/anthropic/v1/messages", anthropicReq(true, "hi")},
		{"GET", "/anthropic/v1/models", ""},
	} {
		resp := e.do(t, c.method, c.path, c.body, "X-Gatekeeper-Key", vkA, "x-api-key", ownAntKey, "anthropic-version", "2023-06-01")
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, resp.StatusCode, body)
		}
		if got := mock.Requests()[len(mock.Requests())-1].APIKey; got != ownAntKey {
			t.Errorf("%s %s reached the provider with %q", c.method, c.path, got)
		}
	}
}
