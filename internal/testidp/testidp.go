// Package testidp is an OpenID Connect provider for tests, run in-process on
// loopback: discovery, a JWKS whose signing key can be rotated, the device
// authorization grant (RFC 8628) with a test hook that approves a user code,
// the authorization code grant with PKCE through a login form (a web
// client, for sign-in from a browser), refresh tokens, short-lived JWT
// access tokens carrying the person's name, email and groups, and users
// that can be disabled (their refresh and sign-in then fail). The protocol is the op package of a maintained provider library;
// this package only stores users, grants and keys.
package testidp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
)

// ClientID is the public client the provider knows: a native application
// allowed the device grant and refresh tokens, with JWT access tokens.
const ClientID = "gatekeeper-cli"

// GroupsClaim is the claim the provider puts a person's groups in.
const GroupsClaim = "groups"

// User is a person the provider can sign in.
type User struct {
	Subject string
	Name    string
	Email   string
	Groups  []string
	// Password is what the login form takes; empty: the user cannot sign
	// in through the form (the device grant's Approve still works).
	Password string
}

// Options tune a provider; the zero value gives five-minute access tokens.
type Options struct {
	// AccessTokenLifetime is how long an access token is valid.
	AccessTokenLifetime time.Duration
	// RedirectURIs are the redirect URIs WebClientID may use.
	RedirectURIs []string
}

// IdP is a running provider. Close stops it.
type IdP struct {
	srv      *httptest.Server
	issuer   string
	st       *storage
	provider op.OpenIDProvider
}

// Start runs a provider on a loopback port with users.
func Start(opts Options, users ...User) (*IdP, error) {
	if opts.AccessTokenLifetime <= 0 {
		opts.AccessTokenLifetime = 5 * time.Minute
	}
	st := &storage{
		lifetime: opts.AccessTokenLifetime,
		users:    make(map[string]*userState),
		devices:  make(map[string]*op.DeviceAuthorizationState),
		codes:    make(map[string]string),
		refresh:  make(map[string]*refreshGrant),
		revoked:  make(map[string]bool),

		redirects: opts.RedirectURIs,
		auths:     make(map[string]*authRequest),
		authCodes: make(map[string]string),
	}
	for _, u := range users {
		st.users[u.Subject] = &userState{User: u}
	}
	if err := st.rotate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testidp: listen: %w", err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Listener.Close()
	srv.Listener = ln
	issuer := "http://" + ln.Addr().String()
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		ln.Close()
		return nil, err
	}
	cfg := &op.Config{
		CryptoKey:             key,
		GrantTypeRefreshToken: true,
		CodeMethodS256:        true,
		SupportedScopes:       []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess, GroupsClaim},
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime:     5 * time.Minute,
			PollInterval: time.Second,
			UserFormPath: "/device",
			UserCode:     op.UserCodeBase20,
		},
	}
	provider, err := op.NewProvider(cfg, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("testidp: %w", err)
	}
	mux := http.NewServeMux()
	idp := &IdP{srv: srv, issuer: issuer, st: st, provider: provider}
	mux.HandleFunc("/device", idp.deviceForm)
	mux.HandleFunc("/login", idp.login)
	mux.Handle("/", provider)
	srv.Config.Handler = mux
	srv.Start()
	return idp, nil
}

// Issuer is the provider's issuer URL (its discovery document is below it).
func (p *IdP) Issuer() string { return p.issuer }

// Close stops the provider.
func (p *IdP) Close() { p.srv.Close() }

// Approve signs subject in on the device authorization whose user code is
// userCode, as the person would on the verification page.
func (p *IdP) Approve(userCode, subject string) error {
	return p.st.approve(userCode, subject)
}

// Disable stops subject from signing in or refreshing; access tokens
// already issued stay valid until they expire, as with a real provider.
func (p *IdP) Disable(subject string) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if u := p.st.users[subject]; u != nil {
		u.disabled = true
	}
}

// RotateKey makes a new signing key current; the JWKS keeps the old one
// while retain is true, so tokens it signed still verify, and drops it
// otherwise.
func (p *IdP) RotateKey(retain bool) error {
	p.st.mu.Lock()
	if !retain {
		p.st.keys = p.st.keys[:0]
	}
	p.st.mu.Unlock()
	return p.st.rotate()
}

// Token runs the device grant for subject from start to end, as a client
// and its person would, and returns the token response: what tests that
// need a signed-in person's tokens start from.
func (p *IdP) Token(ctx context.Context, subject string) (*oauth2.Token, error) {
	conf := p.OAuth2()
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.Approve(da.UserCode, subject); err != nil {
		return nil, err
	}
	return conf.DeviceAccessToken(ctx, da)
}

// OAuth2 is the client configuration of ClientID on this provider, with
// the scopes a signed-in command line asks for.
func (p *IdP) OAuth2() *oauth2.Config {
	return &oauth2.Config{
		ClientID: ClientID,
		Endpoint: oauth2.Endpoint{
			DeviceAuthURL: p.issuer + "/device_authorization",
			TokenURL:      p.issuer + "/oauth/token",
			AuthStyle:     oauth2.AuthStyleInParams,
		},
		Scopes: []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess, GroupsClaim},
	}
}

// deviceForm is the verification page, reduced to what a test drives:
// GET or POST user_code and user approve that user code as that user.
func (p *IdP) deviceForm(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	code, user := r.Form.Get("user_code"), r.Form.Get("user")
	if code == "" || user == "" {
		http.Error(w, "send user_code and user", http.StatusBadRequest)
		return
	}
	if err := p.Approve(code, user); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	fmt.Fprintln(w, "signed in; return to your terminal")
}

var (
	errUnknownUser = errors.New("testidp: unknown or disabled user")
	errNotFound    = errors.New("testidp: not found")
)

type userState struct {
	User
	disabled bool
}

type refreshGrant struct {
	subject  string
	clientID string
	scopes   []string
	authTime time.Time
	amr      []string
}

func (g *refreshGrant) GetAMR() []string            { return g.amr }
func (g *refreshGrant) GetAudience() []string       { return []string{g.clientID} }
func (g *refreshGrant) GetAuthTime() time.Time      { return g.authTime }
func (g *refreshGrant) GetClientID() string         { return g.clientID }
func (g *refreshGrant) GetScopes() []string         { return g.scopes }
func (g *refreshGrant) GetSubject() string          { return g.subject }
func (g *refreshGrant) SetCurrentScopes(s []string) { g.scopes = s }

var _ op.RefreshTokenRequest = (*refreshGrant)(nil)

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Key() any                                    { return k.key }
func (k *signingKey) ID() string                                  { return k.id }

type publicKey struct{ *signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

var (
	_ op.SigningKey = (*signingKey)(nil)
	_ op.Key        = publicKey{}
)
