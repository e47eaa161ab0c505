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
	// Limits cap what each person spends over a day, a week or a month,
	// beside their tenant's limits, on the same ledger. The admin API's
	// spend limits (admin/v1/organizations/spend_limits) add to them.
	Limits []PersonLimit `yaml:"limits" json:"limits"`
	// Models restrict the models a group's members may call: a person
	// whose groups have lists may call a model some list allows.
	Models []GroupModels `yaml:"models" json:"models"`
	// Gateway serves Claude Code's gateway sign-in (its /login against a
	// gateway URL) on the agent listener, brokered to Issuer.
	Gateway Gateway `yaml:"gateway" json:"gateway"`
}

// PersonLimit caps the spend of each person its scope names over its
// period. Several limits may apply to one person: each one binds. A
// person's own limit replaces the default one for its period; group
// limits apply on top.
type PersonLimit struct {
	Scope LimitScope `yaml:"scope" json:"scope"`
	// Tenant, when set, confines the limit to people admitted as that
	// tenant.
	Tenant string `yaml:"tenant" json:"tenant"`
	// Dollars each person may spend over Period.
	Dollars float64 `yaml:"dollars" json:"dollars"`
	// Period is daily (the last 24 hours), weekly (the last 7 days) or
	// monthly (the last 30 days).
	Period string `yaml:"period" json:"period"`
}

// LimitScope names whom a limit caps, one of: a person by their token's
// subject, each member of a group, or everyone without a limit of their
// own (Default).
type LimitScope struct {
	Person  string `yaml:"person" json:"person"`
	Group   string `yaml:"group" json:"group"`
	Default bool   `yaml:"default" json:"default"`
}

// GroupModels is the models a group's members may call: exact names, or
// patterns where * stands for any run of characters.
type GroupModels struct {
	Group string   `yaml:"group" json:"group"`
	Allow []string `yaml:"allow" json:"allow"`
}

// The periods of a person's limits.
const (
	PeriodDaily   = "daily"
	PeriodWeekly  = "weekly"
	PeriodMonthly = "monthly"
)

// ModelAllowed reports whether a person in groups may call model: yes
// when none of their groups has a list in Models, else when one of those
// lists allows it.
func (id Identity) ModelAllowed(groups []string, model string) bool {
	listed := false
	for i := range id.Models {
		m := &id.Models[i]
		if !slices.Contains(groups, m.Group) {
			continue
		}
		listed = true
		for _, pat := range m.Allow {
			if MatchModel(pat, model) {
				return true
			}
		}
	}
	return !listed
}

// MatchModel reports whether model matches pattern, where * stands for
// any run of characters (none included) and every other character for
// itself. It backtracks only to the last star: linear in the pattern
// times the model, whatever the stars.
func MatchModel(pattern, model string) bool {
	p, m, star, mark := 0, 0, -1, 0
	for m < len(model) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, m
			p++
		case p < len(pattern) && pattern[p] == model[m]:
			p++
			m++
		case star >= 0:
			p, mark = star+1, mark+1
			m = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
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
		if id.ClientID != "" || id.Audience != "" || len(id.Groups) > 0 || len(id.Limits) > 0 || len(id.Models) > 0 ||
			id.Gateway.Enabled || id.Console != nil || len(id.AdminGroups) > 0 {
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
	v.personLimits(id.Limits, tenants)
	v.groupModels(id.Models)
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

func (v *validator) personLimits(limits []PersonLimit, tenants []Tenant) {
	seen := map[PersonLimit]bool{}
	for i, l := range limits {
		at := indexPath("identity.limits", i)
		n := 0
		for _, set := range []bool{l.Scope.Person != "", l.Scope.Group != "", l.Scope.Default} {
			if set {
				n++
			}
		}
		if n != 1 {
			v.add(fieldPath(at, "scope"), "set exactly one of person, group and default")
		}
		if l.Tenant != "" && !slices.ContainsFunc(tenants, func(t Tenant) bool { return t.Name == l.Tenant }) {
			v.add(fieldPath(at, "tenant"), "no tenant named %q", l.Tenant)
		}
		if !(l.Dollars > 0) || l.Dollars > 1e9 {
			v.add(fieldPath(at, "dollars"), "must be more than 0 (and at most 1e9)")
		}
		switch l.Period {
		case PeriodDaily, PeriodWeekly, PeriodMonthly:
		default:
			v.add(fieldPath(at, "period"), "unknown period %q (want daily, weekly or monthly)", l.Period)
		}
		key := l
		key.Dollars = 0
		if n == 1 && seen[key] {
			v.add(fieldPath(at, "scope"), "another limit has the same scope, tenant and period")
		}
		seen[key] = true
	}
}

func (v *validator) groupModels(models []GroupModels) {
	seen := map[string]bool{}
	for i, m := range models {
		at := indexPath("identity.models", i)
		switch {
		case m.Group == "":
			v.add(fieldPath(at, "group"), "empty")
		case seen[m.Group]:
			v.add(fieldPath(at, "group"), "duplicate group %q: give each group one list", m.Group)
		}
		seen[m.Group] = true
		if len(m.Allow) == 0 {
			v.add(fieldPath(at, "allow"), "list at least one model (a group that may call none needs no mapping to a tenant)")
		}
		for j, pat := range m.Allow {
			if strings.TrimSpace(pat) == "" {
				v.add(indexPath(fieldPath(at, "allow"), j), "empty")
			}
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
