package testidp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// WebClientID is the confidential web application the provider knows: the
// authorization code grant (with PKCE when the client sends a challenge),
// its secret WebClientSecret, and the redirect URIs of Options.RedirectURIs.
const (
	WebClientID     = "gatekeeper-console"
	WebClientSecret = "console-secret-for-tests"
)

// codeLifetime is how long an authorization code may be exchanged.
const codeLifetime = time.Minute

// authRequest is one authorization request, from the client's redirect
// to the code's exchange.
type authRequest struct {
	id        string
	req       oidc.AuthRequest
	subject   string
	authTime  time.Time
	done      bool
	codeUntil time.Time // set with the code
}

var _ op.AuthRequest = (*authRequest)(nil)

func (a *authRequest) GetID() string          { return a.id }
func (a *authRequest) GetACR() string         { return "" }
func (a *authRequest) GetAMR() []string       { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string  { return []string{a.req.ClientID} }
func (a *authRequest) GetAuthTime() time.Time { return a.authTime }
func (a *authRequest) GetClientID() string    { return a.req.ClientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.req.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.req.CodeChallenge, Method: a.req.CodeChallengeMethod}
}
func (a *authRequest) GetNonce() string                   { return a.req.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.req.RedirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.req.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.req.ResponseMode }
func (a *authRequest) GetScopes() []string                { return a.req.Scopes }
func (a *authRequest) GetState() string                   { return a.req.State }
func (a *authRequest) GetSubject() string                 { return a.subject }
func (a *authRequest) Done() bool                         { return a.done }

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	if slices.Contains(req.Prompt, oidc.PromptNone) {
		return nil, oidc.ErrLoginRequired()
	}
	a := &authRequest{id: randomID(), req: *req}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auths[a.id] = a
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.auths[id]
	if a == nil {
		return nil, errNotFound
	}
	return a, nil
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.auths[s.authCodes[code]]
	if a == nil || time.Now().After(a.codeUntil) {
		return nil, oidc.ErrInvalidGrant().WithDescription("the code is unknown, spent or expired")
	}
	return a, nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.auths[id]
	if a == nil {
		return errNotFound
	}
	a.codeUntil = time.Now().Add(codeLifetime)
	s.authCodes[code] = id
	return nil
}

// DeleteAuthRequest spends the request and its code: a code is exchanged
// once.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.auths, id)
	for code, a := range s.authCodes {
		if a == id {
			delete(s.authCodes, code)
		}
	}
	return nil
}

// signIn marks the authorization request id signed in as subject, if the
// password is the user's.
func (s *storage) signIn(id, subject, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[subject]
	if u == nil || u.disabled || u.Password == "" || subtle.ConstantTimeCompare([]byte(u.Password), []byte(password)) != 1 {
		return errUnknownUser
	}
	a := s.auths[id]
	if a == nil {
		return errNotFound
	}
	a.subject, a.authTime, a.done = subject, time.Now(), true
	return nil
}

// ExpireCodes makes every authorization code issued so far expired, as
// if the person's browser had taken too long to come back.
func (p *IdP) ExpireCodes() {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	for _, a := range p.st.auths {
		if !a.codeUntil.IsZero() {
			a.codeUntil = time.Now().Add(-time.Second)
		}
	}
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in</title></head>
<body>
<h1>Sign in</h1>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="id" value="{{.ID}}">
<label for="username">Username</label> <input id="username" name="username" autocomplete="username" required>
<label for="password">Password</label> <input id="password" name="password" type="password" autocomplete="current-password" required>
<button id="submit" type="submit">Sign in</button>
</form>
</body></html>
`))

// login is the provider's login page: the form a person signs in with,
// after which the provider sends the browser back to the client with a
// code (op.AuthorizeCallback).
func (p *IdP) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.Method {
	case http.MethodGet:
		_ = loginPage.Execute(w, map[string]string{"ID": r.Form.Get("authRequestID")})
	case http.MethodPost:
		id := r.PostForm.Get("id")
		if err := p.st.signIn(id, r.PostForm.Get("username"), r.PostForm.Get("password")); err != nil {
			w.WriteHeader(http.StatusForbidden)
			_ = loginPage.Execute(w, map[string]string{"ID": id, "Error": "Wrong username or password."})
			return
		}
		http.Redirect(w, r, op.AuthCallbackURL(p.provider)(r.Context(), id), http.StatusFound)
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

// webClient is WebClientID: a confidential web application of the
// authorization code grant.
type webClient struct{ redirects []string }

var _ op.Client = webClient{}

func (webClient) GetID() string                       { return WebClientID }
func (c webClient) RedirectURIs() []string            { return c.redirects }
func (webClient) PostLogoutRedirectURIs() []string    { return nil }
func (webClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (webClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (webClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (webClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}
func (webClient) LoginURL(id string) string           { return "/login?authRequestID=" + id }
func (webClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (webClient) IDTokenLifetime() time.Duration      { return time.Hour }

// DevMode lets the redirect URIs be http: the tests run on loopback.
func (webClient) DevMode() bool { return true }
func (webClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (webClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (webClient) IsScopeAllowed(scope string) bool     { return scope == GroupsClaim }
func (webClient) IDTokenUserinfoClaimsAssertion() bool { return true }
func (webClient) ClockSkew() time.Duration             { return 0 }

// SignIn does what a person's browser does with authURL, an authorization
// request to this provider: it opens it, fills in the login form with
// username and password, and returns where the provider then sends the
// browser back to (the client's redirect URI, with code and state, or an
// error), without following it.
func (p *IdP) SignIn(ctx context.Context, authURL, username, password string) (*url.URL, error) {
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	next, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	var form url.Values
	for range 10 {
		var req *http.Request
		if form != nil {
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, next.String(), strings.NewReader(form.Encode()))
			if err == nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			form = nil
		} else {
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, next.String(), nil)
		}
		if err != nil {
			return nil, err
		}
		res, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		_ = res.Body.Close()
		switch {
		case res.StatusCode == http.StatusFound || res.StatusCode == http.StatusSeeOther:
			loc, err := next.Parse(res.Header.Get("Location"))
			if err != nil {
				return nil, err
			}
			if loc.Host != next.Host || !strings.HasPrefix(loc.String(), p.issuer) {
				return loc, nil // back to the client
			}
			next = loc
		case res.StatusCode == http.StatusOK && next.Path == "/login":
			form = url.Values{"id": {next.Query().Get("authRequestID")}, "username": {username}, "password": {password}}
			next = next.ResolveReference(&url.URL{Path: "/login"})
		default:
			return nil, fmt.Errorf("testidp: %s answered %s", next.Path, res.Status)
		}
	}
	return nil, errors.New("testidp: too many redirects")
}
