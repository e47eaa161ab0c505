package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/identity"
)

// The console's sign-in routes.
const (
	LoginPath    = "/console/login"
	CallbackPath = config.ConsoleCallbackPath
	LogoutPath   = "/console/logout"
	// SignInInfoPath tells the page whether sign-in through the provider
	// is on.
	SignInInfoPath = "/console/signin.json"
)

// loginLifetime bounds the time from the redirect to the provider to the
// browser's return with a code.
const loginLifetime = 10 * time.Minute

// SessionStore keeps sessions where every replica reads them: the Redis
// store's Sessions, or the memory store's for one process. Keys are
// hashes of session ids, never the ids.
type SessionStore interface {
	PutSession(ctx context.Context, key string, data []byte, ttl time.Duration) error
	GetSession(ctx context.Context, key string) ([]byte, bool, error)
	DeleteSession(ctx context.Context, key string) error
}

// Errors of the callback, each a reason to send the person back to sign
// in again; the page is told which in a word (?error=...), never more.
var (
	ErrLoginState = errors.New("console: the sign-in's state does not match this browser's")
	ErrExchange   = errors.New("console: the provider did not exchange the code")
	ErrIDToken    = errors.New("console: the ID token was refused")
	ErrNonce      = errors.New("console: the ID token's nonce is not this sign-in's")
	ErrNoGroup    = errors.New("console: none of the person's groups has admin roles")
	ErrIssuer     = errors.New("console: the identity provider is unavailable")
)

// SignIn is the console's sign-in through the identity provider
// (identity.console): authorization code with PKCE, the code exchanged
// and the ID token verified here by maintained libraries (oauth2, go-oidc),
// and a session kept in the store under an opaque id that only an
// HttpOnly cookie holds. It is also the admin API's admin.Sessions.
type SignIn struct {
	id      config.Identity
	cs      config.ConsoleSignIn
	people  config.Approvals
	store   SessionStore
	client  *http.Client
	now     func() time.Time
	log     *slog.Logger
	secure  bool          // the redirect URL is https: cookies are Secure and __Host-
	timeout time.Duration // of each Store call

	mu       sync.Mutex
	provider *oidc.Provider // nil until discovery succeeds
}

var _ admin.Sessions = (*SignIn)(nil)

// SignInOptions configure a SignIn.
type SignInOptions struct {
	// Identity is the identity section; its Console must be set.
	Identity config.Identity
	// People are the approvers a sign-in may be (approvals.people).
	People config.Approvals
	Store  SessionStore
	// Client makes the requests to the provider (nil: one with a
	// ten-second timeout).
	Client *http.Client
	Now    func() time.Time // nil: time.Now
	Logger *slog.Logger
	// StoreTimeout bounds each call to Store (store.timeout); 0: 5s.
	StoreTimeout time.Duration
}

// NewSignIn returns the sign-in of o.Identity.
func NewSignIn(o SignInOptions) *SignIn {
	s := &SignIn{id: o.Identity, cs: *o.Identity.Console, people: o.People, store: o.Store, client: o.Client, now: o.Now, log: o.Logger,
		secure: strings.HasPrefix(o.Identity.Console.RedirectURL, "https://")}
	if s.client == nil {
		s.client = &http.Client{Timeout: 10 * time.Second}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.timeout = o.StoreTimeout; s.timeout <= 0 {
		s.timeout = 5 * time.Second
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// cookie names: with TLS the __Host- prefix pins them to this host and
// path /, so a sibling subdomain cannot plant one.
func (s *SignIn) sessionCookie() string {
	if s.secure {
		return "__Host-gk_console"
	}
	return "gk_console"
}

func (s *SignIn) loginCookie() string {
	if s.secure {
		return "__Host-gk_console_login"
	}
	return "gk_console_login"
}

func (s *SignIn) discover(ctx context.Context) (*oidc.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provider != nil {
		return s.provider, nil
	}
	// The key set lives as long as the sign-in: its fetches must not end
	// with the request that started them.
	p, err := oidc.NewProvider(oidc.ClientContext(context.WithoutCancel(ctx), s.client), s.id.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIssuer, err)
	}
	s.provider = p
	return p, nil
}

func (s *SignIn) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: s.cs.ClientID, ClientSecret: s.cs.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: s.cs.RedirectURL, Scopes: s.cs.Scopes}
}

// pendingLogin is what the login cookie holds between the redirect to the
// provider and the browser's return: this browser's state, nonce and
// PKCE verifier. Nothing is stored for a sign-in not yet done, so
// unauthenticated requests cannot fill the store.
type pendingLogin struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
}

// maxLoginCookie bounds the login cookie read back: its three values are
// 43 characters each.
const maxLoginCookie = 512

// encodeLogin is a login cookie's value.
func encodeLogin(pl pendingLogin) string {
	v, _ := json.Marshal(pl)
	return base64.RawURLEncoding.EncodeToString(v)
}

// parseLogin reads a login cookie's value; false unless it holds a state,
// a nonce and a verifier.
func parseLogin(v string) (pendingLogin, bool) {
	var pl pendingLogin
	if len(v) > maxLoginCookie {
		return pl, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || json.Unmarshal(raw, &pl) != nil {
		return pendingLogin{}, false
	}
	if pl.State == "" || pl.Nonce == "" || pl.Verifier == "" {
		return pendingLogin{}, false
	}
	return pl, true
}

func random() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// login sends the browser to the provider's authorization endpoint.
func (s *SignIn) login(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	p, err := s.discover(r.Context())
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "console sign-in: provider discovery failed", slog.String("error", err.Error()))
		http.Error(w, "the identity provider is unavailable; try again shortly", http.StatusServiceUnavailable)
		return
	}
	pl := pendingLogin{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier()}
	http.SetCookie(w, &http.Cookie{Name: s.loginCookie(), Value: encodeLogin(pl), Path: "/",
		MaxAge: int(loginLifetime.Seconds()), HttpOnly: true, Secure: s.secure,
		// Lax: the provider's redirect back is a cross-site top-level
		// navigation, which must carry it.
		SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, s.oauth2(p).AuthCodeURL(pl.State, oidc.Nonce(pl.Nonce), oauth2.S256ChallengeOption(pl.Verifier)), http.StatusFound)
}

// Session is what the store keeps of one sign-in.
type Session struct {
	Principal admin.Principal `json:"principal"`
	Expires   time.Time       `json:"expires"`
}

// callback takes the browser back from the provider: it checks the
// state against this browser's login cookie, exchanges the code with the
// PKCE verifier, verifies the ID token and its nonce, maps the person's
// groups to roles, and starts a session.
func (s *SignIn) callback(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	// The login cookie is spent whatever happens.
	http.SetCookie(w, &http.Cookie{Name: s.loginCookie(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	sess, err := s.finish(ctx, r)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "console sign-in refused", slog.String("error", err.Error()))
		http.Redirect(w, r, Path+"?error="+url.QueryEscape(reason(err)), http.StatusFound)
		return
	}
	id := random()
	data, _ := json.Marshal(sess)
	sctx, scancel := context.WithTimeout(ctx, s.timeout)
	err = s.store.PutSession(sctx, sessionKey(id), data, sess.Expires.Sub(s.now()))
	scancel()
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "console session not stored", slog.String("error", err.Error()))
		http.Redirect(w, r, Path+"?error=unavailable", http.StatusFound)
		return
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "console sign-in", slog.String("name", sess.Principal.Name),
		slog.String("subject", sess.Principal.Person.Subject), slog.Any("roles", sess.Principal.Roles))
	http.SetCookie(w, &http.Cookie{Name: s.sessionCookie(), Value: id, Path: "/", Expires: sess.Expires,
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
	// Off the callback's URL: the code leaves the address bar and history.
	http.Redirect(w, r, Path, http.StatusFound)
}

// reason is the word the page shows a refused sign-in with.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrNoGroup):
		return "no_role"
	case errors.Is(err, ErrIssuer):
		return "unavailable"
	case errors.Is(err, ErrLoginState):
		return "state"
	}
	return "refused"
}

func (s *SignIn) finish(ctx context.Context, r *http.Request) (*Session, error) {
	q := r.URL.Query()
	c, err := r.Cookie(s.loginCookie())
	if err != nil {
		return nil, ErrLoginState
	}
	pl, ok := parseLogin(c.Value)
	st := q.Get("state")
	if !ok || st == "" || subtle.ConstantTimeCompare([]byte(st), []byte(pl.State)) != 1 {
		return nil, ErrLoginState
	}
	if e := q.Get("error"); e != "" {
		return nil, fmt.Errorf("%w: the provider answered %s", ErrExchange, clip(e+": "+q.Get("error_description"), 200))
	}
	p, err := s.discover(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := s.oauth2(p).Exchange(oidc.ClientContext(ctx, s.client), q.Get("code"), oauth2.VerifierOption(pl.Verifier))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrExchange, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, fmt.Errorf("%w: the token response holds no id_token", ErrIDToken)
	}
	it, err := p.Verifier(&oidc.Config{ClientID: s.cs.ClientID, Now: s.now}).Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIDToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(it.Nonce), []byte(pl.Nonce)) != 1 {
		return nil, ErrNonce
	}
	var claims map[string]any
	if err := it.Claims(&claims); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIDToken, err)
	}
	if it.Subject == "" || len(it.Subject) > identity.MaxClaimLen {
		return nil, fmt.Errorf("%w: the subject is empty or longer than %d bytes", ErrIDToken, identity.MaxClaimLen)
	}
	person := approvals.SignedIn{Subject: it.Subject, Name: clip(firstOf(str(claims, "name"), str(claims, "preferred_username"), str(claims, "email"), it.Subject), identity.MaxClaimLen),
		Email: clip(str(claims, "email"), identity.MaxClaimLen)}
	// A provider that says nothing of the email's verification is taken
	// at its word; one that says false is not.
	person.EmailVerified = claims["email_verified"] != false
	roles, tenants, ok := s.rolesOf(groups(claims[s.id.GroupsClaim]))
	if !ok {
		return nil, fmt.Errorf("%w (subject %s)", ErrNoGroup, it.Subject)
	}
	pr := admin.Principal{Roles: roles, Tenants: tenants, Person: person, CSRF: random()}
	// The name records and votes carry (approvals.Directory.SignIn).
	pr.Name = approvals.NewDirectory(s.people).SignIn(person, roles).Name
	return &Session{Principal: pr, Expires: s.now().Add(s.cs.SessionLifetime.Std())}, nil
}

// rolesOf maps the person's groups to admin roles and tenants through
// identity.admin_groups: the roles of every group the person is in, and
// the tenants of all of them (every tenant when one of them names none).
// False when none of the groups is mapped.
func (s *SignIn) rolesOf(groups []string) (roles, tenants []string, ok bool) {
	all := false
	for _, g := range s.id.AdminGroups {
		if !slices.Contains(groups, g.Group) {
			continue
		}
		ok = true
		for _, r := range g.Roles {
			if !slices.Contains(roles, r) {
				roles = append(roles, r)
			}
		}
		if g.Tenants == nil {
			all = true
		}
		for _, t := range g.Tenants {
			if !slices.Contains(tenants, t) {
				tenants = append(tenants, t)
			}
		}
	}
	if all {
		tenants = nil
	}
	return roles, tenants, ok
}

// sessionKey is what the store keeps a session under: a hash of its id,
// so that the store's contents sign nobody in.
func sessionKey(id string) string {
	h := sha256.Sum256([]byte("console-session\x00" + id))
	return hex.EncodeToString(h[:])
}

// Principal is the person of the request's session cookie (admin.Sessions).
func (s *SignIn) Principal(r *http.Request) (admin.Principal, bool, error) {
	c, err := r.Cookie(s.sessionCookie())
	if err != nil || len(c.Value) != 43 {
		return admin.Principal{}, false, nil
	}
	sess, ok, err := s.session(r.Context(), c.Value)
	if err != nil || !ok {
		return admin.Principal{}, false, err
	}
	return sess.Principal, true, nil
}

func (s *SignIn) session(ctx context.Context, id string) (*Session, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	data, ok, err := s.store.GetSession(ctx, sessionKey(id))
	if err != nil || !ok {
		return nil, false, err
	}
	var sess Session
	if err := json.Unmarshal(data, &sess); err != nil {
		return nil, false, fmt.Errorf("console: a stored session does not decode: %w", err)
	}
	// The store's expiry is the session's; this also holds where a
	// store's clock runs behind.
	if !s.now().Before(sess.Expires) {
		return nil, false, nil
	}
	return &sess, true, nil
}

// logout ends the session: it needs the session's CSRF token, so that
// another site cannot sign a person out.
func (s *SignIn) logout(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	c, err := r.Cookie(s.sessionCookie())
	if err != nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	sess, ok, err := s.session(r.Context(), c.Value)
	switch {
	case err != nil:
		http.Error(w, "the session store could not answer", http.StatusServiceUnavailable)
		return
	case ok && subtle.ConstantTimeCompare([]byte(r.Header.Get(admin.CSRFHeader)), []byte(sess.Principal.CSRF)) != 1:
		http.Error(w, "sign-out needs the session's CSRF token in "+admin.CSRFHeader, http.StatusForbidden)
		return
	case ok:
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		if err := s.store.DeleteSession(ctx, sessionKey(c.Value)); err != nil {
			http.Error(w, "the session store could not answer", http.StatusServiceUnavailable)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: s.sessionCookie(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func str(claims map[string]any, name string) string {
	v, _ := claims[name].(string)
	return v
}

func clip(s string, n int) string {
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "")
	}
	return s
}

// groups reads a groups claim: a list of strings, or one string, at most
// identity.MaxGroups of them.
func groups(v any) []string {
	var out []string
	switch g := v.(type) {
	case string:
		out = []string{g}
	case []any:
		for _, e := range g {
			if s, ok := e.(string); ok && s != "" && len(out) < identity.MaxGroups {
				out = append(out, s)
			}
		}
	}
	return out
}
