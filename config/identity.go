package config

import (
	"net/url"
	"slices"
	"strings"
	"time"
)

// Identity lets people sign in with the company's OpenID Connect provider
// (docs/guide/identity.md): an agent request whose key is an access token
// the issuer signed for Audience is admitted as the tenant its person's
// groups map to, with the person attached. Unset (no issuer), only virtual
// keys are accepted.
type Identity struct {
	// Issuer is the provider's issuer URL; its discovery document is read
	// from below it.
	Issuer string `yaml:"issuer" json:"issuer"`
	// ClientID is the public client `gatekeeper login` runs the device
	// grant as.
	ClientID string `yaml:"client_id" json:"client_id"`
	// Audience is the aud a token must carry; default ClientID.
	Audience string `yaml:"audience" json:"audience"`
	// GroupsClaim names the claim holding the person's groups; default
	// "groups".
	GroupsClaim string `yaml:"groups_claim" json:"groups_claim"`
	// Groups maps the provider's groups to tenants, first match wins: a
	// person in none of them is refused.
	Groups []GroupTenant `yaml:"groups" json:"groups"`
	// Console, when set, lets operators and approvers sign in to the
	// console through the provider (authorization code with PKCE).
	Console *ConsoleSignIn `yaml:"console" json:"console,omitempty"`
	// AdminGroups gives the people of provider groups admin roles and
	// tenant scopes in the console; a person in several groups holds the
	// roles and sees the tenants of all of them, and a person in none
	// cannot sign in to the console.
	AdminGroups []AdminGroup `yaml:"admin_groups" json:"admin_groups,omitempty"`
}

// ConsoleSignIn is the console's application at the provider: a web
// client of the authorization code grant.
type ConsoleSignIn struct {
	ClientID string `yaml:"client_id" json:"client_id"`
	// ClientSecret is the confidential client's secret (write it as
	// ${ENV}); empty for a public client, which PKCE alone protects.
	ClientSecret string `yaml:"client_secret" json:"client_secret,omitempty"`
	// RedirectURL is gatekeeper's callback as the browser reaches it: the
	// console's public address followed by /console/callback. Its scheme
	// decides whether the session cookie is Secure.
	RedirectURL string `yaml:"redirect_url" json:"redirect_url"`
	// SessionLifetime is how long a sign-in lasts; default 8h.
	SessionLifetime Duration `yaml:"session_lifetime" json:"session_lifetime"`
	// Scopes asked for; default openid, profile, email and the groups
	// claim's name.
	Scopes []string `yaml:"scopes" json:"scopes,omitempty"`
}

// AdminGroup gives one provider group's people roles (as admin.tokens'
// roles) and, when set, limits what they see to tenants.
type AdminGroup struct {
	Group   string   `yaml:"group" json:"group"`
	Roles   []string `yaml:"roles" json:"roles"`
	Tenants []string `yaml:"tenants" json:"tenants,omitempty"`
}

// ConsoleCallbackPath is where the console's sign-in callback is served.
const ConsoleCallbackPath = "/console/callback"

// DefaultSessionLifetime is how long a console sign-in lasts unless
// identity.console.session_lifetime says otherwise.
const DefaultSessionLifetime = 8 * time.Hour

// GroupTenant maps one provider group to one tenant.
type GroupTenant struct {
	Group  string `yaml:"group" json:"group"`
	Tenant string `yaml:"tenant" json:"tenant"`
}

// The identity section's defaults.
const DefaultGroupsClaim = "groups"

// DefaultScopes are the scopes `gatekeeper login` asks for unless told
// others: an ID token, the person's name and email, and a refresh token.
var DefaultScopes = []string{"openid", "profile", "email", "offline_access"}

// On reports whether people may sign in.
func (id Identity) On() bool { return id.Issuer != "" }

// TokenAudience is the audience a person's token must carry.
func (id Identity) TokenAudience() string {
	if id.Audience != "" {
		return id.Audience
	}
	return id.ClientID
}

// mappedTenants are the tenants some group maps to.
func (id Identity) mappedTenants() map[string]bool {
	m := map[string]bool{}
	for _, g := range id.Groups {
		m[g.Tenant] = true
	}
	return m
}

func (v *validator) identity(id Identity, tenants []Tenant) {
	if !id.On() {
		if id.ClientID != "" || id.Audience != "" || len(id.Groups) > 0 || id.Console != nil || len(id.AdminGroups) > 0 {
			v.add("identity.issuer", "required when the identity section sets anything else")
		}
		return
	}
	u, err := url.Parse(id.Issuer)
	switch {
	case err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		v.add("identity.issuer", "must be an absolute URL without query or fragment")
	case u.Scheme != "https" && !isLoopbackHost(u.Hostname()):
		v.add("identity.issuer", "must be https (http only on a loopback host)")
	}
	if id.ClientID == "" {
		v.add("identity.client_id", "required")
	}
	if id.GroupsClaim == "" {
		v.add("identity.groups_claim", "empty")
	}
	if len(id.Groups) == 0 {
		v.add("identity.groups", "map at least one group to a tenant")
	}
	seen := map[string]bool{}
	for i, g := range id.Groups {
		at := indexPath("identity.groups", i)
		if g.Group == "" {
			v.add(fieldPath(at, "group"), "empty")
		} else if seen[g.Group] {
			v.add(fieldPath(at, "group"), "duplicate group %q", g.Group)
		}
		seen[g.Group] = true
		if !slices.ContainsFunc(tenants, func(t Tenant) bool { return t.Name == g.Tenant }) {
			v.add(fieldPath(at, "tenant"), "no tenant named %q", g.Tenant)
		}
	}
	v.consoleSignIn(id)
}

// consoleSignIn checks identity.console and identity.admin_groups (their
// roles and tenants as admin.tokens' are checked).
func (v *validator) consoleSignIn(id Identity) {
	c := id.Console
	if c == nil {
		if len(id.AdminGroups) > 0 {
			v.add("identity.console", "required when identity.admin_groups is set")
		}
		return
	}
	if c.ClientID == "" {
		v.add("identity.console.client_id", "required")
	}
	u, err := url.Parse(c.RedirectURL)
	switch {
	case c.RedirectURL == "":
		v.add("identity.console.redirect_url", "required: the console's public address followed by %s", ConsoleCallbackPath)
	case err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		v.add("identity.console.redirect_url", "must be an absolute URL without query or fragment")
	case u.Scheme != "https" && !isLoopbackHost(u.Hostname()):
		v.add("identity.console.redirect_url", "must be https (http only on a loopback host)")
	case !strings.HasSuffix(u.Path, ConsoleCallbackPath):
		v.add("identity.console.redirect_url", "must end with %s, where gatekeeper serves the callback", ConsoleCallbackPath)
	}
	if c.SessionLifetime.Std() < time.Minute || c.SessionLifetime.Std() > 7*24*time.Hour {
		v.add("identity.console.session_lifetime", "must be between 1m and 168h")
	}
	if len(id.AdminGroups) == 0 {
		v.add("identity.admin_groups", "map at least one group to admin roles: nobody could sign in to the console")
	}
	seen := map[string]bool{}
	for i, g := range id.AdminGroups {
		at := indexPath("identity.admin_groups", i)
		if g.Group == "" {
			v.add(fieldPath(at, "group"), "empty")
		} else if seen[g.Group] {
			v.add(fieldPath(at, "group"), "duplicate group %q", g.Group)
		}
		seen[g.Group] = true
		v.adminRoles(fieldPath(at, "roles"), g.Roles)
	}
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}
