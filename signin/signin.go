// Package signin serves Claude Code's gateway sign-in on the agent
// listener: the OAuth authorization server metadata Claude Code's /login
// reads from a gateway URL, the device authorization and token endpoints
// it calls (relayed to the company's OpenID Connect provider as the
// configured public client, so that the person signs in at the provider
// and the token Claude Code keeps is the provider's own short-lived access
// token, which gatekeeper's person path admits), token revocation, and the
// managed settings pushed to signed-in clients by group.
//
// The tokens are the provider's: a person disabled at the provider can
// refresh no more, and the access token they hold expires within its
// lifetime; a revoked token is refused by every replica at once through
// the Revocations store.
package signin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-chi/chi/v5"

	"gatekeeper/config"
	"gatekeeper/identity"
)

// The paths Claude Code calls below the gateway URL. Discovery and the
// two sign-in endpoints are fixed by the protocol (the client falls back
// to them when the metadata names others); revocation is ours to name.
const (
	MetadataPath  = "/.well-known/oauth-authorization-server"
	DevicePath    = "/oauth/device_authorization"
	TokenPath     = "/oauth/token"
	RevokePath    = "/oauth/revoke"
	SettingsPath  = "/managed/settings"
	DeviceGrant   = "urn:ietf:params:oauth:grant-type:device_code"
	RefreshGrant  = "refresh_token"
	formBodyLimit = 16 << 10  // a sign-in form is a few hundred bytes
	replyLimit    = 256 << 10 // what is read of the provider's answers
)

// ProtocolVersion is the gateway_protocol_version the metadata announces:
// the version Claude Code's own gateway announces for this protocol.
const ProtocolVersion = 1

// Revocations remembers revoked tokens until they would have expired, so
// that every replica refuses them. Implementations: store/memory and
// store/redis (Revocations).
type Revocations interface {
	// Revoke marks the token whose hash is key as revoked until until.
	Revoke(ctx context.Context, key string, until time.Time) error
	// Revoked reports whether key is marked.
	Revoked(ctx context.Context, key string) (bool, error)
}

// TokenKey is the key a token is remembered by: its SHA-256, never the
// token.
func TokenKey(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Options configure a Server.
type Options struct {
	// Config returns the running config (it changes on reload).
	Config func() *config.Config
	// Revocations keeps revoked tokens; required.
	Revocations Revocations
	// Client makes the requests to the provider (nil: a client with a
	// ten-second timeout).
	Client *http.Client
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Server serves the sign-in endpoints.
type Server struct {
	opts Options

	mu    sync.Mutex
	built config.Identity // what ver and idp were built from
	ver   *identity.Verifier
	idp   *issuer
}

// issuer is what the provider's discovery document says of its endpoints.
type issuer struct {
	device, token, revocation string
}

// New is a Server with opts.
func New(opts Options) *Server {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Server{opts: opts}
}

// Routes mounts the sign-in endpoints on r. They answer 404 while the
// running config does not enable the gateway sign-in.
func (s *Server) Routes(r chi.Router) {
	r.Get(MetadataPath, s.on(s.metadata))
	r.Post(DevicePath, s.on(s.device))
	r.Post(TokenPath, s.on(s.token))
	r.Post(RevokePath, s.on(s.revoke))
	r.Get(SettingsPath, s.on(s.settings))
}

// on serves h only while the running config enables the gateway.
func (s *Server) on(h func(http.ResponseWriter, *http.Request, *config.Config)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cfg := s.opts.Config()
		if cfg == nil || !cfg.Identity.On() || !cfg.Identity.Gateway.Enabled {
			http.NotFound(w, r)
			return
		}
		h(w, r, cfg)
	}
}

// verifier returns the verifier of cfg's identity section, made anew when
// a reload changed it.
func (s *Server) verifier(cfg *config.Config) *identity.Verifier {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ver == nil || !sameIssuer(s.built, cfg.Identity) {
		s.ver = identity.New(cfg.Identity, s.opts.Client, s.opts.Now)
		s.idp = nil
		s.built = cfg.Identity
	}
	return s.ver
}

func sameIssuer(a, b config.Identity) bool {
	if a.Issuer != b.Issuer || a.ClientID != b.ClientID || a.Audience != b.Audience || a.GroupsClaim != b.GroupsClaim || len(a.Groups) != len(b.Groups) {
		return false
	}
	for i := range a.Groups {
		if a.Groups[i] != b.Groups[i] {
			return false
		}
	}
	return true
}

// errIssuer: the provider's discovery document could not be read.
var errIssuer = errors.New("signin: identity provider unavailable")

// endpoints returns the provider's endpoints, read from its discovery
// document once (again after a failure or a reload).
func (s *Server) endpoints(ctx context.Context, cfg *config.Config) (*issuer, error) {
	s.verifier(cfg)
	s.mu.Lock()
	idp := s.idp
	s.mu.Unlock()
	if idp != nil {
		return idp, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, s.opts.Client), cfg.Identity.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errIssuer, err)
	}
	var extra struct {
		Revocation string `json:"revocation_endpoint"`
	}
	_ = p.Claims(&extra) // the revocation endpoint is optional
	ep := p.Endpoint()
	idp = &issuer{device: ep.DeviceAuthURL, token: ep.TokenURL, revocation: extra.Revocation}
	if idp.device == "" || idp.token == "" {
		return nil, fmt.Errorf("%w: %s offers no device authorization or token endpoint", errIssuer, cfg.Identity.Issuer)
	}
	s.mu.Lock()
	if sameIssuer(s.built, cfg.Identity) {
		s.idp = idp
	}
	s.mu.Unlock()
	return idp, nil
}

// base is the gateway URL the endpoints are named under: the configured
// public URL, else the scheme and host the request came to. Claude Code
// uses an endpoint only when it is on the origin it was given, so a Host
// header naming another origin only makes it fall back to the fixed paths.
func base(r *http.Request, cfg *config.Config) string {
	if u := cfg.Identity.Gateway.PublicURL; u != "" {
		return strings.TrimSuffix(u, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *Server) metadata(w http.ResponseWriter, r *http.Request, cfg *config.Config) {
	b := base(r, cfg)
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                b,
		"device_authorization_endpoint":         b + DevicePath,
		"token_endpoint":                        b + TokenPath,
		"revocation_endpoint":                   b + RevokePath,
		"grant_types_supported":                 []string{DeviceGrant, RefreshGrant},
		"response_types_supported":              []string{},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"scopes_supported":                      scopes(cfg),
		"gateway_protocol_version":              ProtocolVersion,
	})
}

func scopes(cfg *config.Config) []string {
	if len(cfg.Identity.Gateway.Scopes) > 0 {
		return cfg.Identity.Gateway.Scopes
	}
	return config.DefaultScopes
}
