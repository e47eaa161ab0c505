package config

import (
	"reflect"
	"slices"
	"strings"
)

// fixed are the parts of the config a running process cannot change: the
// listener, the store and what is built once on them (the record, ledger
// and approvals stores, the event stream, the rate-limit scheduler),
// telemetry and the log, the admin tokens and the console's sign-in, the
// approval channels, and the HTTP server's own timeouts. Each names its field path and reads it.
var fixed = []struct {
	field string
	get   func(*Config) any
}{
	{"listen", func(c *Config) any { return c.Listen }},
	{"tls", func(c *Config) any { return c.TLS }},
	{"store", func(c *Config) any { return c.Store }},
	{"log", func(c *Config) any { return c.Log }},
	{"telemetry", func(c *Config) any { return c.Telemetry }},
	{"admin", func(c *Config) any { return c.Admin }},
	{"approvals", func(c *Config) any { return c.Approvals }},
	{"identity.console", func(c *Config) any { return c.Identity.Console }},
	{"identity.admin_groups", func(c *Config) any { return c.Identity.AdminGroups }},
	{"rate_limits", func(c *Config) any { return c.RateLimits }},
	{"shutdown_grace", func(c *Config) any { return c.ShutdownGrace }},
	{"limits.header_timeout", func(c *Config) any { return c.Limits.HeaderTimeout }},
	{"limits.idle_timeout", func(c *Config) any { return c.Limits.IdleTimeout }},
}

// Restarts lists the fields where c differs from running, the config a
// process runs with, that only a restart can change, one FieldError each;
// nil when a reload can apply c whole. The messages hold no value: the
// fields include secrets (store.redis_url, admin tokens, telemetry
// headers).
func (c *Config) Restarts(running *Config) []FieldError {
	var out []FieldError
	for _, f := range fixed {
		if !reflect.DeepEqual(f.get(c), f.get(running)) {
			out = append(out, FieldError{Field: f.field, Msg: "changed, which takes a restart; the running value stays"})
		}
	}
	return out
}

// Fixed are the field paths Restarts compares, for documentation and
// tests.
func Fixed() []string {
	out := make([]string, len(fixed))
	for i, f := range fixed {
		out[i] = f.field
	}
	return slices.Clip(out)
}

// Changed lists the top-level sections (their YAML names) where c differs
// from old, in file order.
func (c *Config) Changed(old *Config) []string {
	var out []string
	a, b := reflect.ValueOf(c).Elem(), reflect.ValueOf(old).Elem()
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			out = append(out, name)
		}
	}
	return out
}
