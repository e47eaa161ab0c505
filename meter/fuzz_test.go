package meter

import (
	"strings"
	"testing"

	"gatekeeper/trajectory"
)

// FuzzLookup feeds arbitrary model names, as agents send them, to the
// lookup of the default table plus open prefixes: it must not panic, must
// answer the same twice, and a name it prices must lead back to the entry
// that priced it.
func FuzzLookup(f *testing.F) {
	for _, s := range []string{
		"", " ", "*", "-", "@", "-latest", "-20250929", "@20250929", "-2025-04-14",
		"claude-sonnet-4-5-20250929", "claude-sonnet-4-5@20250929", "CLAUDE-OPUS-4-1",
		"gpt-4.1-2025-04-14", "gpt-4o-2024-05-13", "gpt-5.4-2026-03-05", "gpt-5.2.1", "gpt-5-2099-01-01",
		"claude-3-5-haiku-latest", "acme-model-x", "acme-", "o3", "o3-mini-2025-01-31",
		"\xff\xfe", "claude-\u212a", strings.Repeat("a", 1000),
	} {
		f.Add(s)
	}
	tb, err := DefaultTable().With(map[string]Price{"acme-*": {Input: 1, Output: 2}, "acme-model-*": {Input: 3, Output: 4}})
	if err != nil {
		f.Fatal(err)
	}
	u := trajectory.Usage{InputTokens: 1000, CachedInputTokens: 1000, CacheWriteTokens: 1000, OutputTokens: 1000}
	f.Fuzz(func(t *testing.T, model string) {
		p1, ok1 := tb.Lookup(model)
		p2, ok2 := tb.Lookup(model)
		if p1 != p2 || ok1 != ok2 {
			t.Fatalf("Lookup(%q) answered %+v, %v then %+v, %v", model, p1, ok1, p2, ok2)
		}
		c := tb.Cost(model, u)
		if c != tb.Cost(model, u) {
			t.Fatalf("Cost(%q) is not deterministic", model)
		}
		if c.Priced != ok1 || c.Micros <= 0 {
			t.Fatalf("Cost(%q) = %+v, Lookup found %v", model, c, ok1)
		}
		if !ok1 {
			if c.Model != "" {
				t.Fatalf("fallback charge names %q", c.Model)
			}
			return
		}
		back, ok := tb.Lookup(strings.TrimSuffix(c.Model, "*"))
		if !ok || back != p1 {
			t.Fatalf("Lookup(%q) priced by %q = %+v, but that key looks up %+v, %v", model, c.Model, p1, back, ok)
		}
	})
}

// FuzzCost: any usage, however absurd, costs a non-negative amount that
// grows with every count.
func FuzzCost(f *testing.F) {
	f.Add("claude-sonnet-4-5", int64(11), int64(1031), int64(0), int64(100))
	f.Add("gpt-5-nano", int64(0), int64(99), int64(0), int64(0))
	f.Add("claude-haiku-5-5", int64(100_000), int64(1), int64(0), int64(5))
	f.Add("unknown", int64(-1), int64(1<<62), int64(1<<62), int64(-1<<62))
	tb := DefaultTable()
	f.Fuzz(func(t *testing.T, model string, in, cached, write, out int64) {
		u := trajectory.Usage{InputTokens: in, CachedInputTokens: cached, CacheWriteTokens: write, OutputTokens: out}
		c := tb.Cost(model, u)
		if c.Micros < 0 {
			t.Fatalf("Cost(%q, %+v) = %d µ$", model, u, c.Micros)
		}
		more := u
		more.OutputTokens = addSat(nonNeg(out), 1_000_000)
		if m := tb.Cost(model, more); m.Micros < c.Micros {
			t.Fatalf("a million more output tokens cost less: %d < %d", m.Micros, c.Micros)
		}
	})
}
