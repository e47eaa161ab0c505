package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRestarts(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		fields []string // what Restarts names; none when a reload applies the change
	}{
		{"nothing", func(*Config) {}, nil},
		{"a tenant's limit", func(c *Config) { c.Tenants[0].Limits.DollarsPerDay = 5 }, nil},
		{"a gate", func(c *Config) { c.Gates = append(c.Gates, Gate{Name: "g", When: "true"}) }, nil},
		{"a provider key", func(c *Config) { c.Providers[0].Keys[0].RPM = 99 }, nil},
		{"a price", func(c *Config) { c.Prices["m"] = Price{Input: 2} }, nil},
		{"the watchdog", func(c *Config) { c.Watchdog.CallWindow = 7 }, nil},
		{"the body limit", func(c *Config) { c.Limits.MaxBodyBytes = 1 << 20 }, nil},
		{"listen", func(c *Config) { c.Listen = "127.0.0.1:9999" }, []string{"listen"}},
		{"store", func(c *Config) { c.Store.Kind, c.Store.RedisURL = StoreRedis, "redis://:secret@127.0.0.1:6379/0" }, []string{"store"}},
		{"store timeout", func(c *Config) { c.Store.Timeout = Duration(time.Minute) }, []string{"store"}},
		{"tls", func(c *Config) { c.TLS.CertFile = "c.pem" }, []string{"tls"}},
		{"admin token", func(c *Config) { c.Admin.Tokens[0].Token = "another-token-0123456789" }, []string{"admin"}},
		{"header timeout and grace", func(c *Config) {
			c.Limits.HeaderTimeout = Duration(time.Second)
			c.ShutdownGrace = Duration(time.Hour)
		}, []string{"shutdown_grace", "limits.header_timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running, next := validConfig(t), validConfig(t)
			tt.change(next)
			var got []string
			for _, fe := range next.Restarts(running) {
				got = append(got, fe.Field)
				if strings.Contains(fe.Msg, "secret") || strings.Contains(fe.Msg, "another-token") {
					t.Errorf("%s: the message quotes a value: %s", fe.Field, fe.Msg)
				}
			}
			if !slices.Equal(got, tt.fields) {
				t.Errorf("Restarts = %v, want %v", got, tt.fields)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	old, next := validConfig(t), validConfig(t)
	if got := next.Changed(old); got != nil {
		t.Errorf("Changed of the same file = %v, want none", got)
	}
	next.Tenants[1].Limits.TokensPerDay = 10
	next.Prices["m"] = Price{Input: 3}
	next.Listen = "127.0.0.1:1"
	if got, want := next.Changed(old), []string{"listen", "prices", "tenants"}; !slices.Equal(got, want) {
		t.Errorf("Changed = %v, want %v", got, want)
	}
}
