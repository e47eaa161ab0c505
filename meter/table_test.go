package meter

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gatekeeper/trajectory"
)

var (
	sonnet = Price{Input: 3, CachedInput: 0.30, CacheWrite: 3.75, Output: 15}
	gpt4o  = Price{Input: 2.50, CachedInput: 1.25, Output: 10}
	dear   = Price{Input: 5, CachedInput: 5, Output: 15}
	anyFam = Price{Input: 9, CachedInput: 0.9, CacheWrite: 11.25, Output: 45}
	oneFam = Price{Input: 7, CachedInput: 0.7, CacheWrite: 8.75, Output: 35}
	unk    = Price{Input: 15, CachedInput: 1.5, CacheWrite: 18.75, Output: 75}
)

func lookupTable(t *testing.T) *Table {
	t.Helper()
	tb, err := NewTable(map[string]Price{
		"claude-sonnet-4-5": sonnet,
		"claude-sonnet-4":   sonnet,
		"gpt-4o":            gpt4o,
		"gpt-4o-2024-05-13": dear,
		"gpt-5":             gpt4o,
		"vendor-*":          anyFam,
		"vendor-one-*":      oneFam,
	}, unk)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestLookup(t *testing.T) {
	tb := lookupTable(t)
	tests := []struct {
		name  string
		model string
		want  Price
		found bool
	}{
		{"exact", "claude-sonnet-4-5", sonnet, true},
		{"dated compact", "claude-sonnet-4-5-20250929", sonnet, true},
		{"dated family of a shorter key", "claude-sonnet-4-20250514", sonnet, true},
		{"dated with dashes", "gpt-4o-2024-08-06", gpt4o, true},
		{"vertex snapshot", "claude-sonnet-4-5@20250929", sonnet, true},
		{"latest alias", "gpt-4o-latest", gpt4o, true},
		{"exact snapshot beats its family", "gpt-4o-2024-05-13", dear, true},
		{"upper case and spaces", "  GPT-4o-2024-08-06 ", gpt4o, true},
		{"open prefix", "vendor-two", anyFam, true},
		{"longest open prefix wins", "vendor-one-mini", oneFam, true},
		{"open prefix matches its own stem", "vendor-", anyFam, true},
		{"new version is not its predecessor", "gpt-5.2", Price{}, false},
		{"new minor is not its major", "claude-sonnet-4-7", Price{}, false},
		{"variant is not its base", "gpt-4o-mini", Price{}, false},
		{"two snapshot suffixes", "gpt-4o-2024-08-06-2024-08-06", Price{}, false},
		{"short date", "gpt-4o-202408", Price{}, false},
		{"letters in a date", "gpt-4o-2024-o8-06", Price{}, false},
		{"bare suffix", "-20250929", Price{}, false},
		{"empty", "", Price{}, false},
		{"spaces", "   ", Price{}, false},
		{"prefix of a key", "claude-sonnet", Price{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found := tb.Lookup(tc.model)
			if got != tc.want || found != tc.found {
				t.Errorf("Lookup(%q) = %+v, %v; want %+v, %v", tc.model, got, found, tc.want, tc.found)
			}
		})
	}
}

func TestWith(t *testing.T) {
	base := lookupTable(t)
	cheap := Price{Input: 1, CachedInput: 0.1, CacheWrite: 1.25, Output: 5}
	got, err := base.With(map[string]Price{
		"gpt-4o":     cheap,  // replaces
		"my-model":   cheap,  // extends
		"Acme-*":     anyFam, // open prefix, any case
		FallbackKey:  oneFam, // the fallback
		" o-series ": cheap,  // trimmed
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		model string
		want  Price
		found bool
	}{
		{"replaced", "gpt-4o-2024-08-06", cheap, true},
		{"added", "my-model", cheap, true},
		{"open prefix added", "acme-x", anyFam, true},
		{"trimmed key", "o-series", cheap, true},
		{"kept", "claude-sonnet-4-5", sonnet, true},
		{"fallback is not a model", "fallback", Price{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, found := got.Lookup(tc.model)
			if p != tc.want || found != tc.found {
				t.Errorf("Lookup(%q) = %+v, %v; want %+v, %v", tc.model, p, found, tc.want, tc.found)
			}
		})
	}
	if got.Fallback() != oneFam {
		t.Errorf("Fallback() = %+v, want %+v", got.Fallback(), oneFam)
	}
	if p, _ := base.Lookup("gpt-4o"); p != gpt4o {
		t.Errorf("With changed its receiver: gpt-4o is %+v", p)
	}
	if _, found := base.Lookup("my-model"); found {
		t.Error("With added to its receiver")
	}
	if base.Fallback() != unk {
		t.Errorf("With changed its receiver's fallback to %+v", base.Fallback())
	}
}

func TestWithRefusesInvalidPrices(t *testing.T) {
	ok := Price{Input: 1, Output: 2}
	tests := []struct {
		name      string
		overrides map[string]Price
	}{
		{"negative", map[string]Price{"m": {Input: -1}}},
		{"NaN", map[string]Price{"m": {Output: math.NaN()}}},
		{"infinite", map[string]Price{"m": {CacheWrite: math.Inf(1)}}},
		{"above the maximum", map[string]Price{"m": {CachedInput: MaxPrice + 1}}},
		{"empty name", map[string]Price{"": ok}},
		{"blank name", map[string]Price{"  ": ok}},
		{"star inside", map[string]Price{"a*b": ok}},
		{"two stars", map[string]Price{"a**": ok}},
		{"same name in two cases", map[string]Price{"Model": ok, "model": ok}},
		{"invalid fallback", map[string]Price{FallbackKey: {Input: -5}}},
		{"zero fallback", map[string]Price{FallbackKey: {}}},
		{"fallback free of output", map[string]Price{"FallBack": {Input: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := lookupTable(t).With(tc.overrides); !errors.Is(err, ErrInvalidPrice) {
				t.Errorf("With(%v) error = %v, want ErrInvalidPrice", tc.overrides, err)
			}
		})
	}
	for _, fb := range []Price{{Input: 1, Output: -1}, {}} {
		if _, err := NewTable(nil, fb); !errors.Is(err, ErrInvalidPrice) {
			t.Errorf("NewTable with fallback %+v: error = %v, want ErrInvalidPrice", fb, err)
		}
	}
	if _, err := NewTable(map[string]Price{"M": {Input: 1}, "m": {Input: 2}}, unk); !errors.Is(err, ErrInvalidPrice) {
		t.Errorf("NewTable with one model in two cases: error = %v, want ErrInvalidPrice", err)
	}
}

func TestParseTable(t *testing.T) {
	tests := []struct {
		file    string
		wantErr bool
	}{
		{"valid.yaml", false},
		{"unknown-field.yaml", true},
		{"no-fallback.yaml", true},
		{"duplicate-key.yaml", true},
		{"duplicate-case.yaml", true},
		{"negative-price.yaml", true},
		{"long-prompt-no-threshold.yaml", true},
		{"fallback-in-models.yaml", true},
		{"fallback-in-models-upper.yaml", true},
		{"zero-fallback.yaml", true},
		{"star-inside.yaml", true},
		{"no-source.yaml", true},
		{"bad-tier.yaml", true},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.file, ".yaml"), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseTable(b)
			switch {
			case tc.wantErr && !errors.Is(err, ErrInvalidPrice):
				t.Errorf("parseTable error = %v, want ErrInvalidPrice", err)
			case !tc.wantErr && err != nil:
				t.Errorf("parseTable: %v", err)
			}
		})
	}
}

func TestParseTableValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := parseTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tb.Lookup("alpha"); !ok || p.Output != 5 {
		t.Errorf("alpha = %+v, %v", p, ok)
	}
	if p, ok := tb.Lookup("alpha-2"); !ok || p.Output != 10 {
		t.Errorf("alpha-2 = %+v, %v; want the alpha-* entry", p, ok)
	}
	if tb.Fallback().Output != 80 {
		t.Errorf("fallback = %+v", tb.Fallback())
	}
	for _, tc := range []struct {
		model, tier string
		want        int64
	}{
		{"alpha", "priority", 2000},
		{"alpha-1", "flex", 500},
		{"alpha-2", "priority", 3000}, // the exact row wins
		{"alpha-2", "flex", 1000},     // and lists no flex
		{"alpha", "standard", 1000},   // a tier no row names
		{"beta", "priority", 1000},    // a model no row names
		{"ALPHA-20250101", "PRIORITY", 2000},
	} {
		if got := tb.Tier(tc.model, tc.tier); got != tc.want {
			t.Errorf("Tier(%q, %q) = %d, want %d", tc.model, tc.tier, got, tc.want)
		}
	}
	// beta writes for an hour at $2, for five minutes at $1.25.
	c := tb.Cost("beta", trajectory.Usage{CacheWriteTokens: 1000, CacheWrite1hTokens: 400})
	if want := int64(600*1.25 + 400*2); c.Micros != want {
		t.Errorf("beta 600 5m + 400 1h writes = %d µ$, want %d", c.Micros, want)
	}
	c = tb.Cost("alpha", trajectory.Usage{InputTokens: 1000, OutputTokens: 1000, ServiceTier: "priority"})
	if want := int64((1000*1 + 1000*5) * 2); c.Micros != want {
		t.Errorf("alpha in the priority tier = %d µ$, want %d", c.Micros, want)
	}
}

// TestDefaultTable checks the embedded file: it parses, knows the models it
// must, and its rates keep the providers' published ratios, so a slipped
// digit fails here.
func TestDefaultTable(t *testing.T) {
	tb := DefaultTable()
	required := []string{
		"claude-opus-4-1", "claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8",
		"claude-opus-4-20250514", "claude-sonnet-4-20250514", "claude-sonnet-4-5-20250929", "claude-sonnet-4-6",
		"claude-haiku-4-5-20251001", "claude-3-5-haiku-20241022", "claude-3-5-haiku-latest",
		"gpt-5", "gpt-5-mini", "gpt-5-nano-2025-08-07", "gpt-4.1-2025-04-14", "gpt-4.1-mini", "gpt-4.1-nano",
		"gpt-4o", "gpt-4o-mini-2024-07-18", "o3", "o4-mini-2025-04-16",
	}
	for _, m := range required {
		if _, ok := tb.Lookup(m); !ok {
			t.Errorf("default table has no price for %q", m)
		}
	}
	want := map[string]Price{
		"claude-sonnet-4-5": {Input: 3, CachedInput: 0.30, CacheWrite: 3.75, CacheWrite1h: 6, Output: 15},
		"claude-opus-4-1":   {Input: 15, CachedInput: 1.50, CacheWrite: 18.75, CacheWrite1h: 30, Output: 75},
		"claude-haiku-4-5":  {Input: 1, CachedInput: 0.10, CacheWrite: 1.25, CacheWrite1h: 2, Output: 5},
		"claude-3-5-haiku":  {Input: 0.80, CachedInput: 0.08, CacheWrite: 1, CacheWrite1h: 1.6, Output: 4},
		"gpt-4o":            {Input: 2.50, CachedInput: 1.25, Output: 10},
		"gpt-4.1":           {Input: 2, CachedInput: 0.50, Output: 8},
		"gpt-5-nano":        {Input: 0.05, CachedInput: 0.005, Output: 0.40},
		"o4-mini":           {Input: 1.10, CachedInput: 0.275, Output: 4.40},
	}
	for m, p := range want {
		if got, _ := tb.Lookup(m); got != p {
			t.Errorf("%s = %+v, want %+v", m, got, p)
		}
	}
	if f := tb.Fallback(); f.Input <= 0 || f.Output <= 0 {
		t.Errorf("fallback %+v would under-charge unknown models", f)
	}

	// Anthropic: 5-minute writes at 1.25x input, reads at 0.1x, except the
	// models whose reads are published at another multiple, and Claude 3
	// Haiku, whose published $0.30 / $0.03 are rounded.
	writeMultiple := map[string]float64{"claude-3-haiku": 1.2}
	readMultiple := map[string]float64{
		"claude-fable-5-2": 0.025, "claude-fable-5-1": 0.025, "claude-mythos-5-1": 0.025,
		"claude-opus-5-5": 0.05, "claude-sonnet-5-5": 0.05, "claude-3-haiku": 0.12,
	}
	for key, e := range tb.exact {
		p := e.price
		switch {
		case strings.HasPrefix(key, "claude-"):
			wm, rm := 1.25, 0.1
			if m, ok := writeMultiple[key]; ok {
				wm = m
			}
			if m, ok := readMultiple[key]; ok {
				rm = m
			}
			if !near(p.CacheWrite, wm*p.Input) || !near(p.CachedInput, rm*p.Input) {
				t.Errorf("%s = %+v: want cache write %vx and cache read %vx input", key, p, wm, rm)
			}
		case key == "gpt-6-astra":
			if !near(p.CacheWrite, 1.25*p.Input) {
				t.Errorf("%s = %+v: want cache write 1.25x input", key, p)
			}
		default: // OpenAI without billed writes
			if p.CacheWrite != 0 || p.CachedInput > p.Input {
				t.Errorf("%s = %+v: want no cache write and cached input at most input", key, p)
			}
		}
		if e.longAbove > 0 {
			if e.long.input < e.base.input || e.long.output < e.base.output {
				t.Errorf("%s: long-prompt rates %+v below base %+v", key, e.long, e.base)
			}
		}
		if p.Output < p.Input {
			t.Errorf("%s = %+v: output cheaper than input", key, p)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
