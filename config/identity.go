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

// GroupOf is the group of groups (a person's) that admits the person: the
// first of id.Groups the person is in, whose tenant the person is admitted
// as; "" when none is.
func (id Identity) GroupOf(groups []string) string {
	for _, g := range id.Groups {
		if slices.Contains(groups, g.Group) {
			return g.Group
		}
	}
	return ""
}

// TenantOf is the tenant the person in groups is admitted as (GroupOf's);
// "" when none.
func (id Identity) TenantOf(groups []string) string {
	for _, g := range id.Groups {
		if slices.Contains(groups, g.Group) {
			return g.Tenant
		}
	}
	return ""
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
		if id.ClientID != "" || id.Audience != "" || len(id.Groups) > 0 {
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
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}
