package console_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/console"
	"gatekeeper/internal/testidp"
	"gatekeeper/store/memory"
)

var (
	carol = testidp.User{Subject: "u-carol", Name: "Carol Secops", Email: "carol@example.com", Groups: []string{"secops-fleet"}, Password: "carol-pw"}
	olga  = testidp.User{Subject: "u-olga", Name: "Olga Ops", Email: "olga@example.com", Groups: []string{"gk-operators"}, Password: "olga-pw"}
	nemo  = testidp.User{Subject: "u-nemo", Name: "Nemo", Email: "nemo@example.com", Groups: []string{"marketing"}, Password: "nemo-pw"}
)

// clock is a settable clock shared by the sign-in and the session store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer is a log the test reads while the server writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type rig struct {
	base   string
	idp    *testidp.IdP
	signIn *console.SignIn
	clock  *clock
	log    *syncBuffer
}

// newRig runs the console's sign-in and the admin API on one server, as
// gatekeeper does, against a real OIDC provider. client, when set, is how
// gatekeeper reaches the provider.
func newRig(t *testing.T, client *http.Client) *rig {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	idp, err := testidp.Start(testidp.Options{RedirectURIs: []string{base + console.CallbackPath}}, carol, olga, nemo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	yaml := `
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: main, key: sk-x}]}
tenants:
  - {name: fleet, keys: [vk-fleet-000000000001]}
  - {name: research, keys: [vk-research-0000000001]}
admin:
  tokens:
    - {name: ci, token: ci-token-0000000000000001, roles: [operator]}
identity:
  issuer: ` + idp.Issuer() + `
  client_id: gatekeeper-cli
  groups: [{group: secops-fleet, tenant: fleet}]
  console:
    client_id: ` + testidp.WebClientID + `
    client_secret: ${CONSOLE_SECRET}
    redirect_url: ` + base + console.CallbackPath + `
    session_lifetime: 1h
  admin_groups:
    - {group: gk-operators, roles: [operator]}
    - {group: secops-fleet, roles: ["approver:secops"], tenants: [fleet]}
approvals:
  people:
    - {name: carol, subject: u-carol, roles: [secops]}
`
	cfg, err := config.Parse([]byte(yaml), func(k string) string {
		if k == "CONSOLE_SECRET" {
			return testidp.WebClientSecret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	si := console.NewSignIn(console.SignInOptions{Identity: cfg.Identity, People: cfg.Approvals,
		Store: memory.NewSessions(0, clk.now), Client: client, Now: clk.now, Logger: log})
	r := chi.NewRouter()
	console.Routes(r, si)
	admin.New(cfg, memory.New(memory.Options{}), log, nil, admin.WithSessions(si)).Routes(r)
	srv.Config.Handler = r
	srv.Start()
	t.Cleanup(srv.Close)
	return &rig{base: base, idp: idp, signIn: si, clock: clk, log: logs}
}

// browser is a cookie-keeping client that does not follow redirects, so
// the test sees each hop.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) *http.Response {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res
}

// begin opens /console/login and returns the provider's authorization URL.
func (g *rig) begin(t *testing.T, c *http.Client) string {
	t.Helper()
	res := get(t, c, g.base+console.LoginPath)
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusFound || !strings.HasPrefix(loc, g.idp.Issuer()) {
		t.Fatalf("login: %s to %q", res.Status, loc)
	}
	u, _ := url.Parse(loc)
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		t.Fatalf("the authorization request lacks PKCE, nonce or state: %s", loc)
	}
	return loc
}

// atProvider signs user in on the provider's login form and returns the
// callback URL the provider sends the browser to.
func (g *rig) atProvider(t *testing.T, authURL string, u testidp.User) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	back, err := g.idp.SignIn(ctx, authURL, u.Subject, u.Password)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(back.String(), g.base+console.CallbackPath) {
		t.Fatalf("the provider sent the browser to %s", back)
	}
	return back.String()
}

// finish opens the callback and returns where it sends the browser.
func (g *rig) finish(t *testing.T, c *http.Client, callback string) string {
	t.Helper()
	res := get(t, c, callback)
	if res.StatusCode != http.StatusFound {
		t.Fatalf("callback: %s", res.Status)
	}
	return res.Header.Get("Location")
}

func (g *rig) whoami(t *testing.T, c *http.Client) (int, map[string]any) {
	t.Helper()
	res, err := c.Get(g.base + "/admin/v1/whoami")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func (g *rig) sessionCookie(c *http.Client) *http.Cookie {
	u, _ := url.Parse(g.base)
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == "gk_console" {
			return k
		}
	}
	return nil
}

// TestSignInThroughProvider: a person signs in through the provider's
// login form; the session cookie, not a token, signs the admin API in as
// the person approvals.people maps the subject to, with the roles and
// tenants of their groups; the code does not stay in the address bar.
func TestSignInThroughProvider(t *testing.T) {
	g := newRig(t, nil)
	c := browser(t)
	res := get(t, c, g.base+console.LoginPath)
	var loginCookie *http.Cookie
	for _, k := range res.Cookies() {
		if k.Name == "gk_console_login" {
			loginCookie = k
		}
	}
	if loginCookie == nil || !loginCookie.HttpOnly || loginCookie.SameSite != http.SameSiteLaxMode {
		t.Fatalf("login cookie %+v", loginCookie)
	}
	back := g.atProvider(t, res.Header.Get("Location"), carol)
	res = get(t, c, back)
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusFound || loc != console.Path {
		t.Fatalf("callback: %s to %q, want the console without the code", res.Status, loc)
	}
	var sess *http.Cookie
	for _, k := range res.Cookies() {
		if k.Name == "gk_console" {
			sess = k
		}
	}
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/" || sess.Secure {
		t.Fatalf("session cookie %+v (Secure only with an https redirect URL)", sess)
	}
	if strings.Contains(sess.Value, ".") {
		t.Fatal("the cookie holds a token, not an opaque id")
	}
	code, me := g.whoami(t, c)
	if code != http.StatusOK || me["name"] != "carol" || me["csrf_token"] == "" {
		t.Fatalf("whoami: %d %v", code, me)
	}
	if roles, _ := json.Marshal(me["roles"]); string(roles) != `["approver:secops"]` {
		t.Errorf("roles %s", roles)
	}
	if tenants, _ := json.Marshal(me["tenants"]); string(tenants) != `["fleet"]` {
		t.Errorf("tenants %s", tenants)
	}

	// An unmapped person is named with their subject, and holds their
	// groups' roles over every tenant.
	c2 := browser(t)
	g.finish(t, c2, g.atProvider(t, g.begin(t, c2), olga))
	if code, me := g.whoami(t, c2); code != http.StatusOK || me["name"] != "Olga Ops (u-olga)" || me["tenants"] != nil {
		t.Fatalf("olga: %d %v", code, me)
	}
}

// TestCallbackRefusals: each way a callback can be wrong ends without a
// session, for the reason the test set up.
func TestCallbackRefusals(t *testing.T) {
	cases := []struct {
		name   string
		run    func(t *testing.T, g *rig, c *http.Client) string // returns where the callback sent the browser
		reason string                                            // the page's error word
		log    string                                            // what gatekeeper's log names
	}{
		{"bad state", func(t *testing.T, g *rig, c *http.Client) string {
			back := g.atProvider(t, g.begin(t, c), carol)
			return g.finish(t, c, strings.Replace(back, "state=", "state=x", 1))
		}, "state", "state does not match"},
		{"another browser's callback", func(t *testing.T, g *rig, c *http.Client) string {
			back := g.atProvider(t, g.begin(t, c), carol)
			return g.finish(t, browser(t), back)
		}, "state", "state does not match"},
		{"bad nonce", func(t *testing.T, g *rig, c *http.Client) string {
			back := g.atProvider(t, g.begin(t, c), carol)
			// This browser's login, but with another nonce than the one the
			// provider put in the ID token: a token replayed from elsewhere.
			u, _ := url.Parse(g.base)
			var lc *http.Cookie
			for _, k := range c.Jar.Cookies(u) {
				if k.Name == "gk_console_login" {
					lc = k
				}
			}
			raw, _ := base64.RawURLEncoding.DecodeString(lc.Value)
			var pl map[string]string
			if err := json.Unmarshal(raw, &pl); err != nil || pl["n"] == "" {
				t.Fatalf("login cookie %q: %v", raw, err)
			}
			pl["n"] = "another-nonce"
			raw, _ = json.Marshal(pl)
			c.Jar.SetCookies(u, []*http.Cookie{{Name: "gk_console_login", Value: base64.RawURLEncoding.EncodeToString(raw), Path: "/"}})
			return g.finish(t, c, back)
		}, "refused", "nonce is not this sign-in's"},
		{"expired code", func(t *testing.T, g *rig, c *http.Client) string {
			back := g.atProvider(t, g.begin(t, c), carol)
			g.idp.ExpireCodes()
			return g.finish(t, c, back)
		}, "refused", "did not exchange the code"},
		{"spent code", func(t *testing.T, g *rig, c *http.Client) string {
			back := g.atProvider(t, g.begin(t, c), carol)
			// Another browser holding this one's login cookie: the same
			// state, nonce and verifier, with a code already spent.
			u, _ := url.Parse(g.base)
			other := browser(t)
			other.Jar.SetCookies(u, c.Jar.Cookies(u))
			g.finish(t, c, back)
			return g.finish(t, other, back)
		}, "refused", "did not exchange the code"},
		{"no admin group", func(t *testing.T, g *rig, c *http.Client) string {
			return g.finish(t, c, g.atProvider(t, g.begin(t, c), nemo))
		}, "no_role", "none of the person's groups"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, nil)
			c := browser(t)
			loc := tc.run(t, g, c)
			if loc != console.Path+"?error="+tc.reason {
				t.Fatalf("sent to %q, want the console with error %q", loc, tc.reason)
			}
			if tc.name == "spent code" {
				return // the first browser signed in with the code
			}
			if code, _ := g.whoami(t, c); code != http.StatusUnauthorized {
				t.Fatalf("whoami after a refused sign-in: %d", code)
			}
			if !strings.Contains(g.log.String(), tc.log) {
				t.Fatalf("the log does not say %q:\n%s", tc.log, g.log.String())
			}
		})
	}
}

// TestForeignIssuer: an ID token from another provider, answered on the
// configured provider's token endpoint (a mix-up, or a path through
// someone else's server), is refused by the signature and issuer checks.
func TestForeignIssuer(t *testing.T) {
	var other *testidp.IdP
	var ready sync.WaitGroup
	ready.Add(1)
	var issuer string
	// gatekeeper's requests to its provider's token endpoint go to the
	// other provider instead.
	client := &http.Client{Timeout: 10 * time.Second, Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "/oauth/token") && "http://"+r.URL.Host == issuer {
			ready.Wait()
			o, _ := url.Parse(other.Issuer())
			r = r.Clone(r.Context())
			r.URL.Host, r.Host = o.Host, o.Host
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	g := newRig(t, client)
	issuer = g.idp.Issuer()
	var err error
	other, err = testidp.Start(testidp.Options{RedirectURIs: []string{g.base + console.CallbackPath}}, carol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	ready.Done()
	c := browser(t)
	auth := g.begin(t, c)
	// The same authorization request (state, nonce, challenge), signed in
	// at the other provider.
	au, _ := url.Parse(auth)
	ou, _ := url.Parse(other.Issuer())
	au.Host = ou.Host
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backURL, err := other.SignIn(ctx, au.String(), carol.Subject, carol.Password)
	if err != nil {
		t.Fatal(err)
	}
	back := backURL.String()
	if loc := g.finish(t, c, back); loc != console.Path+"?error=refused" {
		t.Fatalf("sent to %q", loc)
	}
	if code, _ := g.whoami(t, c); code != http.StatusUnauthorized {
		t.Fatalf("whoami: %d", code)
	}
	if l := g.log.String(); !strings.Contains(l, "ID token was refused") {
		t.Fatalf("the log:\n%s", l)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSessionExpiryAndLogout: a session ends at its lifetime; sign-out
// needs the session's CSRF token and ends the session on the server, so a
// copy of the cookie signs nobody in afterwards.
func TestSessionExpiryAndLogout(t *testing.T) {
	g := newRig(t, nil)
	c := browser(t)
	g.finish(t, c, g.atProvider(t, g.begin(t, c), olga))
	code, me := g.whoami(t, c)
	if code != http.StatusOK {
		t.Fatalf("whoami: %d", code)
	}
	csrf, _ := me["csrf_token"].(string)
	stolen := g.sessionCookie(c)

	post := func(csrf string) int {
		req, _ := http.NewRequest(http.MethodPost, g.base+console.LogoutPath, nil)
		if csrf != "" {
			req.Header.Set(admin.CSRFHeader, csrf)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post(""); code != http.StatusForbidden {
		t.Fatalf("sign-out without the CSRF token: %d", code)
	}
	if code, _ := g.whoami(t, c); code != http.StatusOK {
		t.Fatalf("a refused sign-out ended the session: %d", code)
	}
	if code := post(csrf); code != http.StatusNoContent {
		t.Fatalf("sign-out: %d", code)
	}
	if code, _ := g.whoami(t, c); code != http.StatusUnauthorized {
		t.Fatalf("whoami after sign-out: %d", code)
	}
	replay := browser(t)
	u, _ := url.Parse(g.base)
	replay.Jar.SetCookies(u, []*http.Cookie{stolen})
	if code, _ := g.whoami(t, replay); code != http.StatusUnauthorized {
		t.Fatalf("the cookie of an ended session still signs in: %d", code)
	}

	// Expiry: fine a minute before the lifetime, gone at it.
	g.finish(t, c, g.atProvider(t, g.begin(t, c), olga))
	g.clock.add(59 * time.Minute)
	if code, _ := g.whoami(t, c); code != http.StatusOK {
		t.Fatalf("before expiry: %d", code)
	}
	g.clock.add(time.Minute)
	if code, _ := g.whoami(t, c); code != http.StatusUnauthorized {
		t.Fatalf("at expiry: %d", code)
	}
}

// TestSessionCSRF: a session's state-changing admin call needs its CSRF
// token; a bearer header is never mixed with the cookie.
func TestSessionCSRF(t *testing.T) {
	g := newRig(t, nil)
	c := browser(t)
	g.finish(t, c, g.atProvider(t, g.begin(t, c), olga))
	_, me := g.whoami(t, c)
	csrf, _ := me["csrf_token"].(string)
	create := func(id string, hdr map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, g.base+"/admin/v1/trajectories", strings.NewReader(`{"id":"`+id+`","tenant":"fleet"}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := create("r1", nil); code != http.StatusForbidden {
		t.Errorf("a session's POST without the CSRF token: %d, want 403", code)
	}
	if code := create("r1", map[string]string{admin.CSRFHeader: "wrong"}); code != http.StatusForbidden {
		t.Errorf("with a wrong CSRF token: %d, want 403", code)
	}
	if code := create("r1", map[string]string{"Authorization": "Bearer not-a-token-00000000000"}); code != http.StatusUnauthorized {
		t.Errorf("a bad bearer token beside a good cookie: %d, want 401", code)
	}
	if code := create("r1", map[string]string{admin.CSRFHeader: csrf}); code != http.StatusCreated {
		t.Errorf("with the CSRF token: %d, want 201", code)
	}
	// Bearer tokens keep working, cookie or not.
	if code := create("r2", map[string]string{"Authorization": "Bearer ci-token-0000000000000001"}); code != http.StatusCreated {
		t.Errorf("with the ci token: %d, want 201", code)
	}
}
