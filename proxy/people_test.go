package proxy_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
	"golang.org/x/oauth2"

	"gatekeeper/config"
	"gatekeeper/internal/testidp"
	"gatekeeper/trajectory"
)

var (
	ada   = testidp.User{Subject: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"everyone", "eng"}}
	grace = testidp.User{Subject: "grace", Name: "Grace Hopper", Email: "grace@example.com", Groups: []string{"sales"}}
)

func startIdP(t *testing.T, opts testidp.Options, users ...testidp.User) *testidp.IdP {
	t.Helper()
	idp, err := testidp.Start(opts, users...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	return idp
}

func identityOf(idp *testidp.IdP) config.Identity {
	return config.Identity{Issuer: idp.Issuer(), ClientID: testidp.ClientID, GroupsClaim: testidp.GroupsClaim,
		Groups: []config.GroupTenant{{Group: "eng", Tenant: "team-b"}}}
}

// TestPersonTokenAdmitted: an agent that sends a person's access token
// where it sends its key (x-api-key, Authorization: Bearer) is admitted as
// the tenant the person's group maps to, and the run it starts names the
// person, in the record, the admin API and the turn's log line; a virtual
// key keeps working beside it.
func TestPersonTokenAdmitted(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada, grace)
	var logs syncBuffer
	e := newEnv(t, envOpts{identity: identityOf(idp), log: &logs})
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}

	c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/ada-run/anthropic"), aoption.WithAPIKey(tok.AccessToken), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	if _, err := c.Messages.New(ctxT(t), params); err != nil {
		t.Fatal(err)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "ada-run"); return rec.Turns == 1 })
	want := &trajectory.Person{Subject: "ada", Name: ada.Name, Email: ada.Email, Groups: ada.Groups}
	if rec.Tenant != "team-b" || !samePerson(rec.Person, want) {
		t.Fatalf("record tenant %q person %+v, want team-b %+v", rec.Tenant, rec.Person, want)
	}
	if n := len(e.mock.Requests()); n != 1 {
		t.Fatalf("%d provider requests", n)
	} else if h := e.mock.Requests()[0].Header; h.Get("X-Api-Key") != antKey || strings.Contains(strings.Join(slices.Concat(h.Values("Authorization"), h.Values("X-Api-Key")), " "), tok.AccessToken) {
		t.Fatalf("the provider got the person's token or not its own key: %v", h)
	}

	// Another conversation on the run is a thread of its own, a child
	// record, which names the person who started it too.
	const child = `{"model":"claude-sonnet-4-5","max_tokens":256,"system":"You are an explore subagent.","messages":[{"role":"user","content":"find it"}]}`
	resp := e.do(t, "POST", "/t/ada-run/anthropic/v1/messages", child,
		"x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01", "content-type", "application/json")
	readAll(t, resp)
	cid := resp.Header.Get("X-Gatekeeper-Trajectory")
	if resp.StatusCode != 200 || !strings.HasPrefix(cid, "ada-run/") {
		t.Fatalf("the subagent's turn: %d on %q", resp.StatusCode, cid)
	}
	waitFor(t, "the thread's turn recorded", func() bool { rec = e.record(t, cid); return rec.Turns == 1 })
	if !samePerson(rec.Person, want) {
		t.Fatalf("thread record person %+v", rec.Person)
	}

	// The admin API's record carries the person.
	resp = e.do(t, "GET", "/admin/v1/trajectories/team-b/ada-run", "", "Authorization", "Bearer "+adminToken)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || gjson.GetBytes(body, "person.email").String() != ada.Email || gjson.GetBytes(body, "person.groups.1").String() != "eng" {
		t.Fatalf("admin record %d: %s", resp.StatusCode, body)
	}

	// The turn's log line names the person and the groups.
	var lines []map[string]any
	waitFor(t, "the turn's log line", func() bool { lines = logs.lines("turn"); return len(lines) > 0 })
	if l := lines[0]; l["person"] != ada.Email || l["groups"] != "everyone,eng" || l["tenant"] != "team-b" {
		t.Fatalf("turn log line %v", l)
	}
	logs.mu.Lock()
	leaked := bytes.Contains(logs.b.Bytes(), []byte(tok.AccessToken))
	logs.mu.Unlock()
	if leaked {
		t.Fatal("the log holds the person's token")
	}

	// Bearer, as the OpenAI SDKs send their key, admits the person too.
	oc := openai.NewClient(ooption.WithBaseURL(e.gk+"/t/ada-chat/openai/v1"), ooption.WithAPIKey(tok.AccessToken), ooption.WithMaxRetries(0))
	if _, err := oc.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the chat turn recorded", func() bool { rec = e.record(t, "ada-chat"); return rec.Turns == 1 })
	if rec.Person == nil || rec.Person.Subject != "ada" {
		t.Fatalf("chat record person %+v", rec.Person)
	}

	// A virtual key's run names no person.
	resp = e.do(t, "POST", "/t/key-run/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("virtual key: %d", resp.StatusCode)
	}
	waitFor(t, "the key's turn recorded", func() bool { rec = e.record(t, "key-run"); return rec.Turns == 1 })
	if rec.Person != nil || rec.Tenant != "team-a" {
		t.Fatalf("virtual key's record: tenant %q person %+v", rec.Tenant, rec.Person)
	}
}

// TestPersonTokenRefused: tokens gatekeeper must not admit get the
// provider's error form and never reach the provider.
func TestPersonTokenRefused(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada, grace)
	other := startIdP(t, testidp.Options{}, ada)
	e := newEnv(t, envOpts{identity: identityOf(idp)})
	good, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	unmapped, err := idp.Token(ctxT(t), "grace")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good.AccessToken, ".")
	claims, _ := json.Marshal(map[string]any{"iss": idp.Issuer(), "aud": testidp.ClientID, "sub": "ada", "exp": time.Now().Add(time.Hour).Unix(), "groups": []string{"eng"}})
	forged := parts[0] + "." + b64(claims) + "." + parts[2]

	for _, tc := range []struct {
		name, token string
		status      int
		typ         string
	}{
		{"another issuer's token", foreign.AccessToken, 401, "authentication_error"},
		{"claims changed under the signature", forged, 401, "authentication_error"},
		{"signature cut", parts[0] + "." + parts[1] + ".", 401, "authentication_error"},
		{"no group mapped", unmapped.AccessToken, 403, "permission_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.mock.Requests())
			resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
				"x-api-key", tc.token, "anthropic-version", "2023-06-01", "content-type", "application/json")
			body := readAll(t, resp)
			if resp.StatusCode != tc.status || gjson.GetBytes(body, "type").String() != "error" || gjson.GetBytes(body, "error.type").String() != tc.typ {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, body, tc.status, tc.typ)
			}
			if bytes.Contains(body, []byte(tc.token)) {
				t.Fatal("the error echoes the token")
			}
			if len(e.mock.Requests()) != before {
				t.Fatal("a refused request reached the provider")
			}
		})
	}
}

// TestDisabledPersonStops: once the provider disables a person, refresh
// fails, and the access token they hold stops working when it expires:
// within one token lifetime, their requests get 401.
func TestDisabledPersonStops(t *testing.T) {
	const lifetime = 2 * time.Second
	idp := startIdP(t, testidp.Options{AccessTokenLifetime: lifetime}, ada)
	e := newEnv(t, envOpts{identity: identityOf(idp)})
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	send := func() int {
		resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
			"x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01", "content-type", "application/json")
		readAll(t, resp)
		return resp.StatusCode
	}
	if s := send(); s != 200 {
		t.Fatalf("before disabling: %d", s)
	}
	idp.Disable("ada")
	if _, err := idp.OAuth2().TokenSource(ctxT(t), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
		t.Fatal("a disabled person refreshed")
	}
	deadline := time.Now().Add(lifetime + 5*time.Second)
	for s := send(); s != 401; s = send() {
		if s != 200 || time.Now().After(deadline) {
			t.Fatalf("status %d; the token still works past its lifetime", s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func samePerson(a, b *trajectory.Person) bool {
	return a != nil && b != nil && a.Subject == b.Subject && a.Name == b.Name && a.Email == b.Email && slices.Equal(a.Groups, b.Groups)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestIssuerDown: while the issuer cannot be reached, a person's token gets
// 503 with Retry-After (the agent retries) and virtual keys work as ever.
func TestIssuerDown(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada)
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{identity: identityOf(idp)})
	idp.Close()
	resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
		"x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01", "content-type", "application/json")
	body := readAll(t, resp)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || gjson.GetBytes(body, "type").String() != "error" {
		t.Fatalf("%d retry-after %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp = e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("a virtual key while the issuer is down: %d", resp.StatusCode)
	}
}

// TestIdentityReload: a reload that changes the group mapping applies to
// the next request, and one that drops the identity section refuses
// people's tokens while virtual keys go on.
func TestIdentityReload(t *testing.T) {
	idp := startIdP(t, testidp.Options{}, ada)
	e := newEnv(t, envOpts{identity: identityOf(idp)})
	tok, err := idp.Token(ctxT(t), "ada")
	if err != nil {
		t.Fatal(err)
	}
	send := func(run string) (int, string) {
		resp := e.do(t, "POST", "/t/"+run+"/anthropic/v1/messages", anthropicReq(false, "hi"),
			"x-api-key", tok.AccessToken, "anthropic-version", "2023-06-01", "content-type", "application/json")
		readAll(t, resp)
		return resp.StatusCode, resp.Header.Get("X-Gatekeeper-Trajectory")
	}
	if s, _ := send("before"); s != 200 {
		t.Fatalf("before the reload: %d", s)
	}
	waitFor(t, "the first run recorded", func() bool { return e.record(t, "before").Turns == 1 })
	if rec := e.record(t, "before"); rec.Tenant != "team-b" {
		t.Fatalf("tenant %s", rec.Tenant)
	}

	next := *e.cfg
	next.Identity.Groups = []config.GroupTenant{{Group: "eng", Tenant: "team-a"}}
	if err := e.px.Reload(&next, nil); err != nil {
		t.Fatal(err)
	}
	if s, _ := send("after"); s != 200 {
		t.Fatalf("after the remapping: %d", s)
	}
	waitFor(t, "the second run recorded", func() bool { return e.record(t, "after").Turns == 1 })
	if rec := e.record(t, "after"); rec.Tenant != "team-a" {
		t.Fatalf("after the remapping, tenant %s", rec.Tenant)
	}

	off := *e.cfg
	off.Identity = config.Identity{GroupsClaim: config.DefaultGroupsClaim}
	if err := e.px.Reload(&off, nil); err != nil {
		t.Fatal(err)
	}
	if s, _ := send("off"); s != 401 {
		t.Fatalf("a person's token with identity off: %d", s)
	}
	resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("a virtual key after the reload: %d", resp.StatusCode)
	}
}
