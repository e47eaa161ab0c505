package config

import (
	"net/url"
	"slices"
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
	// Gateway serves Claude Code's gateway sign-in (its /login against a
	// gateway URL) on the agent listener, brokered to Issuer.
	Gateway Gateway `yaml:"gateway" json:"gateway"`
}

// Gateway is Claude Code's gateway sign-in as gatekeeper serves it: the
// OAuth discovery document, the device authorization and token endpoints
// (relayed to the issuer as ClientID), revocation, and managed settings
// per group.
type Gateway struct {
	// Enabled serves the sign-in endpoints; off, they are not found.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// PublicURL is the URL developers' Claude Code is given as the
	// gateway (forceLoginGatewayUrl); the discovery document names its
	// endpoints under it. Default: the scheme and host the request came
	// to.
	PublicURL string `yaml:"public_url" json:"public_url"`
	// Scopes are what the device authorization asks the issuer for;
	// default DefaultScopes.
	Scopes []string `yaml:"scopes" json:"scopes"`
	// Settings are the managed settings pushed to signed-in clients, by
	// group: the first entry whose group the person is in wins; a person
	// in none gets none (404).
	Settings []GroupSettings `yaml:"settings" json:"settings"`
}

// GroupSettings are the managed settings (Claude Code's
// managed-settings.json keys) of the people in one group.
type GroupSettings struct {
	Group    string         `yaml:"group" json:"group"`
	Settings map[string]any `yaml:"settings" json:"settings"`
}

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
		if id.ClientID != "" || id.Audience != "" || len(id.Groups) > 0 || id.Gateway.Enabled {
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
	v.gateway(id.Gateway)
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
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

func (v *validator) gateway(gw Gateway) {
	if gw.PublicURL != "" {
		u, err := url.Parse(gw.PublicURL)
		switch {
		case err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || (u.Path != "" && u.Path != "/"):
			v.add("identity.gateway.public_url", "must be a scheme and host (and port), without path, query or fragment")
		case u.Scheme != "https" && !(u.Scheme == "http" && isLoopbackHost(u.Hostname())):
			// Claude Code refuses a plain-http gateway off loopback.
			v.add("identity.gateway.public_url", "must be https (http only on a loopback host)")
		}
	}
	seen := map[string]bool{}
	for i, s := range gw.Settings {
		at := indexPath("identity.gateway.settings", i)
		if s.Group == "" {
			v.add(fieldPath(at, "group"), "empty")
		} else if seen[s.Group] {
			v.add(fieldPath(at, "group"), "duplicate group %q", s.Group)
		}
		seen[s.Group] = true
	}
}
