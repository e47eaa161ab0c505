package config

import (
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Redacted is what replaces a secret in Redacted's copy.
const Redacted = "REDACTED"

// Redacted returns a deep copy fit for logging the effective config: provider
// keys, virtual keys (either form), admin tokens and any credentials in a URL
// are replaced by "REDACTED". An empty secret stays empty, so the copy still
// shows which one is missing.
func (c *Config) Redacted() *Config {
	r := *c
	r.Store.RedisURL = redactURL(c.Store.RedisURL)
	r.Telemetry.Traces.OTLPEndpoint = redactURL(c.Telemetry.Traces.OTLPEndpoint)
	r.Telemetry.MetricsToken = redact(c.Telemetry.MetricsToken)
	r.Prices = maps.Clone(c.Prices)
	r.RateLimits.Weights = maps.Clone(c.RateLimits.Weights)
	r.env = maps.Clone(c.env)

	r.Providers = slices.Clone(c.Providers)
	for i := range r.Providers {
		p := &r.Providers[i]
		p.BaseURL = redactURL(p.BaseURL)
		p.Keys = slices.Clone(p.Keys)
		p.Passthrough = slices.Clone(p.Passthrough)
		for j := range p.Keys {
			p.Keys[j].Key = redact(p.Keys[j].Key)
		}
	}

	r.Tenants = slices.Clone(c.Tenants)
	for i := range r.Tenants {
		t := &r.Tenants[i]
		t.Keys = slices.Clone(t.Keys)
		for j := range t.Keys {
			t.Keys[j] = redact(t.Keys[j])
		}
		t.ReadOnlyTools = slices.Clone(t.ReadOnlyTools)
		t.AnthropicBeta = slices.Clone(t.AnthropicBeta)
	}

	r.Admin.Tokens = slices.Clone(c.Admin.Tokens)
	for i := range r.Admin.Tokens {
		tok := &r.Admin.Tokens[i]
		tok.Token = redact(tok.Token)
		tok.Roles = slices.Clone(tok.Roles)
	}

	if cs := c.Identity.Console; cs != nil {
		cp := *cs
		cp.ClientSecret = redact(cs.ClientSecret)
		cp.Scopes = slices.Clone(cs.Scopes)
		r.Identity.Console = &cp
	}
	r.Identity.Groups = slices.Clone(c.Identity.Groups)
	r.Identity.AdminGroups = slices.Clone(c.Identity.AdminGroups)
	for i := range r.Identity.AdminGroups {
		g := &r.Identity.AdminGroups[i]
		g.Roles, g.Tenants = slices.Clone(g.Roles), slices.Clone(g.Tenants)
	}

	r.Gates = slices.Clone(c.Gates)
	for i := range r.Gates {
		g := &r.Gates[i]
		g.Tenants = slices.Clone(g.Tenants)
		g.Approvers.Roles = slices.Clone(g.Approvers.Roles)
	}
	r.Approvals.People = slices.Clone(c.Approvals.People)
	for i := range r.Approvals.People {
		p := &r.Approvals.People[i]
		p.AdminTokens = slices.Clone(p.AdminTokens)
		p.Roles = slices.Clone(p.Roles)
	}
	if s := c.Approvals.Slack; s != nil {
		cp := *s
		cp.BotToken = redact(s.BotToken)
		cp.SigningSecret = redact(s.SigningSecret)
		cp.APIURL = redactURL(s.APIURL)
		cp.Users = slices.Clone(s.Users)
		for i := range cp.Users {
			cp.Users[i].Roles = slices.Clone(cp.Users[i].Roles)
		}
		r.Approvals.Slack = &cp
	}
	if w := c.Approvals.Webhook; w != nil {
		cp := *w
		cp.URL = redactURL(w.URL)
		cp.Secret = redact(w.Secret)
		r.Approvals.Webhook = &cp
	}
	return &r
}

func redact(secret string) string {
	if secret == "" {
		return ""
	}
	return Redacted
}

// redactURL hides the userinfo of a URL and query parameters named like
// credentials. A lone user name is hidden too: redis://secret@host is a
// password in Redis's own URL convention. A URL that does not parse, or whose
// "@" did not end up in its userinfo, is hidden whole, since where its
// password is cannot be told.
func redactURL(raw string) string {
	if raw == "" || raw == MockBaseURL {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.User == nil && strings.Contains(raw, "@")) {
		return Redacted
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		} else {
			u.User = url.User(Redacted)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if secretParam(k) {
				q[k] = []string{Redacted}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// secretParam tells query parameters that carry credentials by their name.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, s := range []string{"pass", "secret", "token", "key", "auth"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
