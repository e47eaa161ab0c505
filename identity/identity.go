// Package identity owns the people who sign in through the company's
// OpenID Connect provider: the verification of the tokens they present
// (by a maintained client library: signature against the issuer's JWKS,
// issuer, audience, expiry), the person a token names, and the tenant the
// person's groups map to. The person is a trajectory.Person, the form
// records keep.
package identity

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"gatekeeper/config"
	"gatekeeper/trajectory"
)

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// The bounds on what a token may put on a record: a provider can send
// hundreds of groups, and every record, event and log line carries them.
const (
	MaxGroups   = 64
	MaxClaimLen = 256
)

// Errors of Verify.
var (
	// ErrToken: the token is not one the issuer signed for the audience,
	// or it expired; the person signs in again.
	ErrToken = errors.New("identity: token refused")
	// ErrNoTenant: the token is good but none of the person's groups maps
	// to a tenant.
	ErrNoTenant = errors.New("identity: no tenant for the person's groups")
	// ErrIssuer: the issuer's discovery document could not be read, so no
	// token can be checked yet.
	ErrIssuer = errors.New("identity: issuer unavailable")
)

// Verifier checks the tokens of one issuer. Its discovery happens on the
// first token, and again on a later one while it fails, so that a
// gatekeeper started while the provider is out serves virtual keys and
// picks people up once it is back.
type Verifier struct {
	cfg    config.Identity
	client *http.Client
	now    func() time.Time

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
}

// New is the verifier of cfg's issuer; client makes its requests to the
// issuer (nil: a client with a ten-second timeout) and now is its clock
// (nil: time.Now).
func New(cfg config.Identity, client *http.Client, now func() time.Time) *Verifier {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{cfg: cfg, client: client, now: now}
}

// Config is the identity section the verifier was built from.
func (v *Verifier) Config() config.Identity { return v.cfg }

func (v *Verifier) discovered(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	// The provider's key set lives as long as the verifier: its key
	// fetches must not end with the request that started them.
	p, err := oidc.NewProvider(oidc.ClientContext(context.WithoutCancel(ctx), v.client), v.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIssuer, err)
	}
	v.verifier = p.Verifier(&oidc.Config{ClientID: v.cfg.TokenAudience(), Now: v.now})
	return v.verifier, nil
}

// Verify checks token and returns its person and the tenant the person's
// groups map to. The error wraps ErrToken, ErrNoTenant or ErrIssuer.
func (v *Verifier) Verify(ctx context.Context, token string) (*trajectory.Person, string, error) {
	ver, err := v.discovered(ctx)
	if err != nil {
		return nil, "", err
	}
	it, err := ver.Verify(ctx, token)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrToken, err)
	}
	var claims map[string]any
	if err := it.Claims(&claims); err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrToken, err)
	}
	p := &trajectory.Person{
		Subject: it.Subject,
		Name:    clip(firstOf(stringClaim(claims, "name"), stringClaim(claims, "preferred_username"))),
		Email:   clip(stringClaim(claims, "email")),
		Groups:  groupsClaim(claims[v.cfg.GroupsClaim]),
	}
	if p.Subject == "" || len(p.Subject) > MaxClaimLen {
		return nil, "", fmt.Errorf("%w: the token's subject is empty or longer than %d bytes", ErrToken, MaxClaimLen)
	}
	if t := v.cfg.TenantOf(p.Groups); t != "" {
		return p, t, nil
	}
	return p, "", ErrNoTenant
}

// KeyHash is what scopes a person's sessions and conversations, as a
// virtual key's hash scopes a key's: the same across the person's
// refreshed tokens, apart from every key's and every other person's.
func KeyHash(issuer, subject string) [32]byte {
	return sha256.Sum256([]byte("person\x00" + issuer + "\x00" + subject))
}

// LooksLikeToken reports whether key has a JWT's shape (three base64url
// segments, a JSON header first), so that only such keys are sent to the
// issuer's verification.
func LooksLikeToken(key string) bool {
	if !strings.HasPrefix(key, "eyJ") || strings.Count(key, ".") != 2 {
		return false
	}
	for _, c := range []byte(key) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func stringClaim(claims map[string]any, name string) string {
	s, _ := claims[name].(string)
	return s
}

func clip(s string) string {
	if len(s) > MaxClaimLen {
		return strings.ToValidUTF8(s[:MaxClaimLen], "")
	}
	return s
}

// groupsClaim reads a groups claim: a list of strings, or one string (as
// some providers send a single group), at most MaxGroups of them.
func groupsClaim(v any) []string {
	var out []string
	switch g := v.(type) {
	case string:
		if g != "" {
			out = []string{clip(g)}
		}
	case []any:
		for _, e := range g {
			if s, ok := e.(string); ok && s != "" && len(out) < MaxGroups {
				out = append(out, clip(s))
			}
		}
	}
	return out
}
