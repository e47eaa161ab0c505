package signin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/config"
	"gatekeeper/identity"
	"gatekeeper/internal/testidp"
	"gatekeeper/signin"
	"gatekeeper/store/memory"
)

// gateway is a sign-in server in front of a real OIDC provider, on
// loopback, as Claude Code sees it.
type gateway struct {
	t    *testing.T
	idp  *testidp.IdP
	srv  *httptest.Server
	cfg  atomic.Pointer[config.Config]
	skew atomic.Int64 // added to the clock, to age tokens
}

var settingsEng = map[string]any{"permissions": map[string]any{"deny": []any{"WebFetch"}}, "env": map[string]any{"CLAUDE_CODE_ENABLE_TELEMETRY": "0"}}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	idp, err := testidp.Start(testidp.Options{AccessTokenLifetime: 10 * time.Minute},
		testidp.User{Subject: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"eng"}},
		testidp.User{Subject: "bob", Name: "Bob", Email: "bob@example.com", Groups: []string{"sales"}},
		testidp.User{Subject: "cy", Name: "Cy", Email: "cy@example.com", Groups: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	g := &gateway{t: t, idp: idp}
	cfg := &config.Config{Identity: config.Identity{Issuer: idp.Issuer(), ClientID: testidp.ClientID, GroupsClaim: testidp.GroupsClaim,
		Groups:  []config.GroupTenant{{Group: "eng", Tenant: "fleet"}, {Group: "ops", Tenant: "fleet"}},
		Gateway: config.Gateway{Enabled: true, Settings: []config.GroupSettings{{Group: "eng", Settings: settingsEng}}}}}
	g.cfg.Store(cfg)
	s := signin.New(signin.Options{Config: g.cfg.Load, Revocations: memory.NewRevocations(nil),
		Now: func() time.Time { return time.Now().Add(time.Duration(g.skew.Load())) }})
	r := chi.NewRouter()
	s.Routes(r)
	g.srv = httptest.NewServer(r)
	t.Cleanup(g.srv.Close)
	return g
}

// form posts a form as Claude Code does and decodes the JSON answer.
func (g *gateway) form(path string, f url.Values) (int, map[string]any) {
	g.t.Helper()
	resp, err := http.Post(g.srv.URL+path, "application/x-www-form-urlencoded", strings.NewReader(f.Encode()))
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			g.t.Fatalf("%s answered %d, not JSON: %s", path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, m
}

// signIn runs the device flow for subject: the empty-form device request
// Claude Code sends, one poll before the approval, the approval on the
// provider, and the poll that gets the tokens.
func (g *gateway) signIn(subject string) (int, map[string]any) {
	g.t.Helper()
	st, da := g.form(signin.DevicePath, url.Values{"surface": {"claude_code"}})
	if st != 200 || da["device_code"] == "" || da["user_code"] == "" || !strings.HasPrefix(da["verification_uri"].(string), g.idp.Issuer()) {
		g.t.Fatalf("device authorization: %d %v", st, da)
	}
	poll := url.Values{"grant_type": {signin.DeviceGrant}, "device_code": {da["device_code"].(string)}}
	if st, e := g.form(signin.TokenPath, poll); st != 400 || e["error"] != "authorization_pending" {
		g.t.Fatalf("poll before approval: %d %v", st, e)
	}
	if err := g.idp.Approve(da["user_code"].(string), subject); err != nil {
		g.t.Fatal(err)
	}
	return g.form(signin.TokenPath, poll)
}

func (g *gateway) settings(token, ifNoneMatch string) (*http.Response, []byte) {
	g.t.Helper()
	req, _ := http.NewRequest("GET", g.srv.URL+signin.SettingsPath, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", ifNoneMatch)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestMetadata(t *testing.T) {
	g := newGateway(t)
	resp, err := http.Get(g.srv.URL + signin.MetadataPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Claude Code uses each endpoint only on the origin it was given.
	for k, want := range map[string]string{"issuer": g.srv.URL, "device_authorization_endpoint": g.srv.URL + signin.DevicePath,
		"token_endpoint": g.srv.URL + signin.TokenPath, "revocation_endpoint": g.srv.URL + signin.RevokePath} {
		if m[k] != want {
			t.Errorf("%s = %v, want %s", k, m[k], want)
		}
	}
	if m["gateway_protocol_version"] != float64(signin.ProtocolVersion) || m["authorization_endpoint"] != nil {
		t.Errorf("metadata %v", m)
	}

	// A configured public URL names the endpoints, whatever Host says.
	cfg := *g.cfg.Load()
	cfg.Identity.Gateway.PublicURL = "https://gk.corp.example.com"
	g.cfg.Store(&cfg)
	req, _ := http.NewRequest("GET", g.srv.URL+signin.MetadataPath, nil)
	req.Host = "evil.example.com"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	m = nil
	_ = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if m["token_endpoint"] != "https://gk.corp.example.com/oauth/token" {
		t.Errorf("with public_url: %v", m)
	}

	// Off, the sign-in is not there.
	cfg.Identity.Gateway.Enabled = false
	g.cfg.Store(&cfg)
	for _, p := range []string{signin.MetadataPath, signin.SettingsPath} {
		resp, err := http.Get(g.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET %s with the gateway off: %d", p, resp.StatusCode)
		}
	}
}

// TestDeviceFlow signs a person in, refreshes, reads the managed
// settings, and revokes: each step as Claude Code does it.
func TestDeviceFlow(t *testing.T) {
	g := newGateway(t)
	st, tok := g.signIn("ada")
	if st != 200 || tok["token_type"] != "Bearer" || tok["access_token"] == "" || tok["refresh_token"] == "" || tok["expires_in"].(float64) <= 0 {
		t.Fatalf("token: %d %v", st, tok)
	}
	access, refresh := tok["access_token"].(string), tok["refresh_token"].(string)
	// The token is the provider's, and gatekeeper's person path admits it.
	v := identity.New(g.cfg.Load().Identity, nil, nil)
	p, tenant, err := v.Verify(context.Background(), access)
	if err != nil || p.Subject != "ada" || p.Email != "ada@example.com" || tenant != "fleet" {
		t.Fatalf("the issued token: %+v %s %v", p, tenant, err)
	}

	// A device code works once.
	st, e := g.form(signin.TokenPath, url.Values{"grant_type": {signin.DeviceGrant}, "device_code": {"no-such-code"}})
	if st != 400 || e["error"] == nil {
		t.Errorf("unknown device code: %d %v", st, e)
	}

	// Managed settings: the group's, with the checksum Claude Code computes.
	resp, body := g.settings(access, "")
	var doc struct {
		UUID, Checksum string
		Settings       map[string]any
	}
	if err := json.Unmarshal(body, &doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("settings: %d %s", resp.StatusCode, body)
	}
	want, _ := signin.Checksum(settingsEng)
	if doc.Checksum != want || resp.Header.Get("ETag") != `"`+want+`"` || doc.UUID == "" || doc.Settings["permissions"] == nil {
		t.Fatalf("settings doc %+v etag %s", doc, resp.Header.Get("ETag"))
	}
	if resp, _ := g.settings(access, `"`+want+`"`); resp.StatusCode != 304 {
		t.Errorf("If-None-Match with the checksum: %d, want 304", resp.StatusCode)
	}
	if resp, _ := g.settings(access, `"sha256:00"`); resp.StatusCode != 200 {
		t.Errorf("If-None-Match with another checksum: %d, want 200", resp.StatusCode)
	}
	if resp, body := g.settings("", ""); resp.StatusCode != 401 || !strings.Contains(string(body), `"authentication_error"`) {
		t.Errorf("settings without a token: %d %s", resp.StatusCode, body)
	}

	// Refresh: a new access token, admitted.
	st, tok = g.form(signin.TokenPath, url.Values{"grant_type": {signin.RefreshGrant}, "refresh_token": {refresh}})
	if st != 200 || tok["access_token"] == "" || tok["access_token"] == access || tok["refresh_token"] == "" {
		t.Fatalf("refresh: %d %v", st, tok)
	}
	access2, refresh2 := tok["access_token"].(string), tok["refresh_token"].(string)

	// Revocation: the access token is refused at once (final, in
	// Anthropic's error format), the refresh token renews nothing.
	if st, _ := g.form(signin.RevokePath, url.Values{"token": {access2}}); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	resp, body = g.settings(access2, "")
	if resp.StatusCode != 401 || resp.Header.Get("X-Should-Retry") != "false" || !strings.Contains(string(body), `"type":"error"`) {
		t.Errorf("settings with a revoked token: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if st, _ := g.form(signin.RevokePath, url.Values{"token": {refresh2}, "token_type_hint": {"refresh_token"}}); st != 200 {
		t.Fatalf("revoke refresh: %d", st)
	}
	if st, e := g.form(signin.TokenPath, url.Values{"grant_type": {signin.RefreshGrant}, "refresh_token": {refresh2}}); st != 401 || e["error"] != "invalid_grant" {
		t.Errorf("refresh with a revoked refresh token: %d %v", st, e)
	}
}

// TestRefusals: the person the provider disabled, the person with no
// tenant, an expired token, and malformed requests.
func TestRefusals(t *testing.T) {
	g := newGateway(t)

	// No group maps to a tenant: refused at sign-in, not at the first turn.
	if st, e := g.signIn("bob"); st != 400 || e["error"] != "access_denied" || !strings.Contains(e["error_description"].(string), "bob@example.com") {
		t.Errorf("bob: %d %v", st, e)
	}

	// Cy is admitted, but no settings are configured for ops: 404.
	st, tok := g.signIn("cy")
	if st != 200 {
		t.Fatalf("cy: %d %v", st, tok)
	}
	if resp, _ := g.settings(tok["access_token"].(string), ""); resp.StatusCode != 404 {
		t.Errorf("settings for a group with none: %d", resp.StatusCode)
	}

	// Disabled at the provider: the refresh is the deprovisioning hook.
	st, tok = g.signIn("ada")
	if st != 200 {
		t.Fatalf("ada: %d %v", st, tok)
	}
	g.idp.Disable("ada")
	if st, e := g.form(signin.TokenPath, url.Values{"grant_type": {signin.RefreshGrant}, "refresh_token": {tok["refresh_token"].(string)}}); st != 401 || e["error"] != "invalid_grant" {
		t.Errorf("refresh of a disabled person: %d %v", st, e)
	}

	// Expired: the same token an hour later.
	g.skew.Store(int64(time.Hour))
	resp, body := g.settings(tok["access_token"].(string), "")
	if resp.StatusCode != 401 || resp.Header.Get("X-Should-Retry") != "false" || !strings.Contains(string(body), "authentication_error") {
		t.Errorf("an expired token: %d %s", resp.StatusCode, body)
	}
	g.skew.Store(0)

	for name, f := range map[string]url.Values{
		"unsupported grant": {"grant_type": {"password"}},
		"no device code":    {"grant_type": {signin.DeviceGrant}},
		"repeated grant":    {"grant_type": {signin.DeviceGrant, signin.RefreshGrant}, "device_code": {"x"}},
		"no refresh token":  {"grant_type": {signin.RefreshGrant}},
	} {
		if st, e := g.form(signin.TokenPath, f); st != 400 || e["error"] == nil {
			t.Errorf("%s: %d %v", name, st, e)
		}
	}
	big := url.Values{"grant_type": {signin.DeviceGrant}, "device_code": {strings.Repeat("a", 20<<10)}}
	if st, e := g.form(signin.TokenPath, big); st != 400 || e["error"] != "invalid_request" {
		t.Errorf("a form over the limit: %d %v", st, e)
	}
}

// TestProviderDown: the provider unreachable is a retryable 503, not a
// refusal that would sign the person out.
func TestProviderDown(t *testing.T) {
	g := newGateway(t)
	st, tok := g.signIn("ada")
	if st != 200 {
		t.Fatal(st, tok)
	}
	g.idp.Close()
	if st, e := g.form(signin.TokenPath, url.Values{"grant_type": {signin.RefreshGrant}, "refresh_token": {tok["refresh_token"].(string)}}); st != 503 || e["error"] != "temporarily_unavailable" {
		t.Errorf("refresh with the provider down: %d %v", st, e)
	}
}

// TestChecksum: the checksum is the one JavaScript's JSON.stringify of the
// key-sorted settings gives (computed with node for this input: HTML
// characters and non-ASCII unescaped).
func TestChecksum(t *testing.T) {
	s := map[string]any{"permissions": map[string]any{"deny": []any{"Bash(rm -rf *)", "WebFetch"}},
		"env": map[string]any{"CLAUDE_CODE_ENABLE_TELEMETRY": "0", "NOTE": "a<b & c>d é"}, "model": "claude-sonnet-4-5", "cleanupPeriodDays": 30}
	got, err := signin.Checksum(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:13a60131ebee9e0c5c2ecfc74880f41fc72110a942784ac13419d02c5be786f7"; got != want {
		t.Errorf("Checksum = %s, want %s", got, want)
	}
}
