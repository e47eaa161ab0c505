package config

// Watchdog configures the loop watchdog (docs/guide/watchdog.md): per
// thread, the signals that a run repeats itself and the steps it takes
// when one reaches its threshold. The top-level block applies to every
// tenant; tenants[].watchdog overrides the fields it sets. A threshold of
// 0 takes the default (the top level's, for a tenant), a negative one
// turns its signal off.
type Watchdog struct {
	// Enabled turns the watchdog on; off by default.
	Enabled *bool `yaml:"enabled" json:"enabled,omitempty"`
	// RepeatedCalls: the same tool call (name and canonical input)
	// proposed that many times within the thread's last CallWindow calls.
	RepeatedCalls int `yaml:"repeated_calls" json:"repeated_calls"`
	CallWindow    int `yaml:"call_window" json:"call_window"`
	// RepeatedResults: the same non-empty tool result that many times in
	// a row.
	RepeatedResults int `yaml:"repeated_results" json:"repeated_results"`
	// ErrorResults: that many error results in a row.
	ErrorResults int `yaml:"error_results" json:"error_results"`
	// IdleTurns: that many replies in a row with no new tool call and no
	// text.
	IdleTurns int `yaml:"idle_turns" json:"idle_turns"`
	// OnLoop is the step after restrict: "pause" (default; for an
	// operator) or "fail" (exit reason LOOP).
	OnLoop string `yaml:"on_loop" json:"on_loop"`
}

// Loop watchdog steps after restrict.
const (
	OnLoopPause = "pause"
	OnLoopFail  = "fail"
)

// The watchdog's defaults, and the bound on its call window (the digests
// a record keeps).
const (
	DefaultRepeatedCalls   = 5
	DefaultCallWindow      = 8
	DefaultRepeatedResults = 5
	DefaultErrorResults    = 5
	DefaultIdleTurns       = 4
	MaxCallWindow          = 32
)

// DefaultWatchdog is the top-level watchdog when the file sets none: off,
// with the default thresholds.
func DefaultWatchdog() Watchdog {
	return Watchdog{RepeatedCalls: DefaultRepeatedCalls, CallWindow: DefaultCallWindow, RepeatedResults: DefaultRepeatedResults,
		ErrorResults: DefaultErrorResults, IdleTurns: DefaultIdleTurns, OnLoop: OnLoopPause}
}

// On reports whether the watchdog is enabled.
func (w Watchdog) On() bool { return w.Enabled != nil && *w.Enabled }

// WatchdogFor is the watchdog of t's runs: the top-level block with t's
// own settings over it, every threshold left at 0 given its default.
func (c *Config) WatchdogFor(t *Tenant) Watchdog {
	w := c.Watchdog
	if t != nil && t.Watchdog != nil {
		w = w.with(*t.Watchdog)
	}
	return w.withDefaults()
}

// with is w with the fields o sets taken from o.
func (w Watchdog) with(o Watchdog) Watchdog {
	if o.Enabled != nil {
		w.Enabled = o.Enabled
	}
	for _, f := range []struct{ dst, src *int }{{&w.RepeatedCalls, &o.RepeatedCalls}, {&w.CallWindow, &o.CallWindow},
		{&w.RepeatedResults, &o.RepeatedResults}, {&w.ErrorResults, &o.ErrorResults}, {&w.IdleTurns, &o.IdleTurns}} {
		if *f.src != 0 {
			*f.dst = *f.src
		}
	}
	if o.OnLoop != "" {
		w.OnLoop = o.OnLoop
	}
	return w
}

func (w Watchdog) withDefaults() Watchdog {
	d := DefaultWatchdog()
	d.Enabled = w.Enabled
	return d.with(w)
}

// watchdog checks one block as written (at is its path) and, for a
// tenant's, the block it resolves to.
func (v *validator) watchdog(at string, w Watchdog, resolved *Watchdog) {
	if w.RepeatedCalls == 1 {
		v.add(fieldPath(at, "repeated_calls"), "is 1: every call would be a repeat (want 2 or more, or a negative value to turn it off)")
	}
	if w.RepeatedResults == 1 {
		v.add(fieldPath(at, "repeated_results"), "is 1: every result would be a repeat (want 2 or more, or a negative value to turn it off)")
	}
	if w.CallWindow < 0 || w.CallWindow > MaxCallWindow {
		v.add(fieldPath(at, "call_window"), "is %d, want 1 to %d (0: the default)", w.CallWindow, MaxCallWindow)
	}
	switch w.OnLoop {
	case "", OnLoopPause, OnLoopFail:
	default:
		v.add(fieldPath(at, "on_loop"), "unknown step %s (want pause or fail)", v.show(fieldPath(at, "on_loop"), w.OnLoop))
	}
	r := w.withDefaults()
	if resolved != nil {
		if w.CallWindow == 0 && w.RepeatedCalls == 0 {
			return // the top level's, checked there
		}
		r = *resolved
	}
	if r.RepeatedCalls > 0 && r.CallWindow >= 1 && r.CallWindow <= MaxCallWindow && r.CallWindow < r.RepeatedCalls {
		v.add(fieldPath(at, "call_window"), "is %d, below repeated_calls %d: no call could repeat that often within it", r.CallWindow, r.RepeatedCalls)
	}
}
