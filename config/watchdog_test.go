package config

import (
	"strings"
	"testing"
)

func TestWatchdogFor(t *testing.T) {
	doc := validDoc + `watchdog:
  repeated_calls: 4
  on_loop: fail
`
	doc = strings.Replace(doc, "    keys: [vk-team-a]\n", "    keys: [vk-team-a]\n    watchdog: {enabled: true, repeated_calls: 3, error_results: -1}\n", 1)
	c, err := Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a, b := c.WatchdogFor(&c.Tenants[0]), c.WatchdogFor(&c.Tenants[1])
	want := Watchdog{Enabled: a.Enabled, RepeatedCalls: 3, CallWindow: DefaultCallWindow, RepeatedResults: DefaultRepeatedResults,
		ErrorResults: -1, IdleTurns: DefaultIdleTurns, OnLoop: OnLoopFail}
	if !a.On() || a != want {
		t.Errorf("team-a: %+v, want %+v on", a, want)
	}
	if b.On() || b.RepeatedCalls != 4 || b.OnLoop != OnLoopFail || b.ErrorResults != DefaultErrorResults {
		t.Errorf("team-b: %+v, want the top level's (off, 4 calls, fail)", b)
	}
	if d := validConfig(t).WatchdogFor(&c.Tenants[1]); d.On() || d != DefaultWatchdog() {
		t.Errorf("default: %+v, want %+v", d, DefaultWatchdog())
	}
}

func TestWatchdogValidation(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		field  string // "" when valid
		msg    string
	}{
		{"signals off", func(c *Config) {
			c.Watchdog = Watchdog{RepeatedCalls: -1, RepeatedResults: -1, ErrorResults: -1, IdleTurns: -1}
		}, "", ""},
		{"a repeat of one", func(c *Config) { c.Watchdog.RepeatedCalls = 1 }, "watchdog.repeated_calls", "every call"},
		{"a result repeat of one", func(c *Config) { c.Watchdog.RepeatedResults = 1 }, "watchdog.repeated_results", "every result"},
		{"window too wide", func(c *Config) { c.Watchdog.CallWindow = 33 }, "watchdog.call_window", "want 1 to 32"},
		{"window below the repeats", func(c *Config) { c.Watchdog.CallWindow, c.Watchdog.RepeatedCalls = 4, 6 }, "watchdog.call_window", "below repeated_calls 6"},
		{"unknown step", func(c *Config) { c.Watchdog.OnLoop = "halt" }, "watchdog.on_loop", `unknown step "halt"`},
		{"a tenant's window below the top's repeats", func(c *Config) {
			c.Tenants[1].Watchdog = &Watchdog{CallWindow: 3}
		}, "tenants[1].watchdog.call_window", "below repeated_calls 5"},
		{"a tenant's unknown step", func(c *Config) {
			c.Tenants[0].Watchdog = &Watchdog{OnLoop: "stop"}
		}, "tenants[0].watchdog.on_loop", "unknown step"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(c)
			errs := validationErrors(t, c.Validate())
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Msg, tc.msg) {
				t.Fatalf("got %v, want one error on %s containing %q", errs, tc.field, tc.msg)
			}
		})
	}
}
