package testidp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's state, in memory: what op.Storage and
// op.DeviceAuthorizationStorage ask of a provider's store. The flows this
// provider does not serve (client credentials, token exchange) answer
// errors; the authorization code grant is in signin.go.
type storage struct {
	lifetime time.Duration

	mu      sync.Mutex
	keys    []*signingKey // current last
	users   map[string]*userState
	devices map[string]*op.DeviceAuthorizationState // by device code
	codes   map[string]string                       // user code to device code
	refresh map[string]*refreshGrant
	revoked map[string]bool // access token ids

	redirects []string                // WebClientID's redirect URIs
	auths     map[string]*authRequest // authorization requests by id
	authCodes map[string]string       // code to authorization request id
}

var (
	_ op.Storage                    = (*storage)(nil)
	_ op.DeviceAuthorizationStorage = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest  = (*storage)(nil)
)

func (s *storage) rotate() error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("testidp: key: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, &signingKey{id: randomID(), key: k})
	return nil
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *storage) approve(userCode, subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[subject]
	if u == nil || u.disabled {
		return errUnknownUser
	}
	st := s.devices[s.codes[userCode]]
	if st == nil || time.Now().After(st.Expires) {
		return fmt.Errorf("testidp: user code %q: %w", userCode, errNotFound)
	}
	st.Done, st.Subject, st.AuthTime, st.AMR = true, subject, time.Now(), []string{"pwd"}
	return nil
}

// activeUser is subject's user unless unknown or disabled.
func (s *storage) activeUser(subject string) (*userState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[subject]
	if u == nil || u.disabled {
		return nil, errUnknownUser
	}
	return u, nil
}

// StoreDeviceAuthorization keeps a new device authorization.
func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.codes[userCode]; ok {
		return op.ErrDuplicateUserCode
	}
	s.devices[deviceCode] = &op.DeviceAuthorizationState{ClientID: clientID, Scopes: scopes, Expires: expires}
	s.codes[userCode] = deviceCode
	return nil
}

// GetDeviceAuthorizatonState is polled by the device's token requests.
func (s *storage) GetDeviceAuthorizatonState(_ context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.devices[deviceCode]
	if st == nil || st.ClientID != clientID {
		return nil, errNotFound
	}
	c := *st
	if st.Done {
		// A device code is redeemed once.
		delete(s.devices, deviceCode)
	}
	return &c, nil
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	if _, err := s.activeUser(req.GetSubject()); err != nil {
		return "", time.Time{}, err
	}
	return randomID(), time.Now().Add(s.lifetime), nil
}

func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	if _, err := s.activeUser(req.GetSubject()); err != nil {
		return "", "", time.Time{}, err
	}
	g := &refreshGrant{subject: req.GetSubject(), scopes: req.GetScopes()}
	if r, ok := req.(op.IDTokenRequest); ok {
		g.clientID, g.authTime, g.amr = r.GetClientID(), r.GetAuthTime(), r.GetAMR()
	}
	token := randomID() + randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if current != "" {
		// Refresh tokens rotate: the one just used is spent.
		delete(s.refresh, current)
	}
	s.refresh[token] = g
	return randomID(), token, time.Now().Add(s.lifetime), nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	g := s.refresh[token]
	s.mu.Unlock()
	if g == nil {
		return nil, op.ErrInvalidRefreshToken
	}
	if _, err := s.activeUser(g.subject); err != nil {
		return nil, err
	}
	c := *g
	return &c, nil
}

func (s *storage) RevokeToken(_ context.Context, tokenOrID, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refresh, tokenOrID)
	s.revoked[tokenOrID] = true
	return nil
}

func (s *storage) GetRefreshTokenInfo(_ context.Context, _ string, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.refresh[token]
	if g == nil {
		return "", "", op.ErrInvalidRefreshToken
	}
	return g.subject, token, nil
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1], nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		keys[i] = publicKey{k}
	}
	return keys, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	switch id {
	case ClientID:
		return cliClient{}, nil
	case WebClientID:
		return webClient{redirects: s.redirects}, nil
	}
	return nil, errNotFound
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	if id != WebClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(WebClientSecret)) != 1 {
		return oidc.ErrInvalidClient().WithDescription("unknown client or wrong secret")
	}
	return nil
}

// SetUserinfoFromScopes is deprecated in favour of SetUserinfoFromRequest.
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	return s.userinfo(info, req.GetSubject(), scopes)
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, _, subject, _ string) error {
	return s.userinfo(info, subject, []string{oidc.ScopeProfile, oidc.ScopeEmail, GroupsClaim})
}

func (s *storage) userinfo(info *oidc.UserInfo, subject string, scopes []string) error {
	u, err := s.activeUser(subject)
	if err != nil {
		return err
	}
	info.Subject = u.Subject
	if slices.Contains(scopes, oidc.ScopeProfile) {
		info.Name = u.Name
	}
	if slices.Contains(scopes, oidc.ScopeEmail) {
		info.Email, info.EmailVerified = u.Email, true
	}
	if slices.Contains(scopes, GroupsClaim) {
		info.AppendClaims(GroupsClaim, u.Groups)
	}
	return nil
}

func (s *storage) SetIntrospectionFromToken(_ context.Context, resp *oidc.IntrospectionResponse, _, subject, clientID string) error {
	u, err := s.activeUser(subject)
	if err != nil {
		return err
	}
	resp.Subject, resp.ClientID, resp.Active = u.Subject, clientID, true
	return nil
}

// GetPrivateClaimsFromScopes puts the person's name, email and groups in
// the JWT access token, as providers configured for an API audience do:
// the token a gateway is sent is then all it needs.
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, subject, _ string, _ []string) (map[string]any, error) {
	u, err := s.activeUser(subject)
	if err != nil {
		return nil, err
	}
	return map[string]any{"name": u.Name, "email": u.Email, GroupsClaim: u.Groups}, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotFound
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errNotFound
}

func (s *storage) Health(context.Context) error { return nil }

// cliClient is ClientID: a public native client of the device grant.
type cliClient struct{}

var _ op.Client = cliClient{}

func (cliClient) GetID() string                       { return ClientID }
func (cliClient) RedirectURIs() []string              { return nil }
func (cliClient) PostLogoutRedirectURIs() []string    { return nil }
func (cliClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeNative }
func (cliClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodNone }
func (cliClient) ResponseTypes() []oidc.ResponseType  { return nil }
func (cliClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeDeviceCode, oidc.GrantTypeRefreshToken}
}
func (cliClient) LoginURL(string) string              { return "" }
func (cliClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (cliClient) IDTokenLifetime() time.Duration      { return time.Hour }
func (cliClient) DevMode() bool                       { return false }
func (cliClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (cliClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (cliClient) IsScopeAllowed(scope string) bool     { return scope == GroupsClaim }
func (cliClient) IDTokenUserinfoClaimsAssertion() bool { return true }
func (cliClient) ClockSkew() time.Duration             { return 0 }
