package meter

import (
	"bytes"
	_ "embed"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxPrice bounds every rate of a Price, in USD per million tokens. It keeps
// token × rate inside int64 for any realistic turn, and a price above it is
// a typo, not a model.
const MaxPrice = 1_000_000

// FallbackKey, as a key of config's prices (the overrides of With), sets the
// price charged for models the table does not know; prices.yaml has it as a
// top-level key.
const FallbackKey = "fallback"

// Price is what a model costs, in USD per million tokens. It has the fields
// of config.Price in the same order, so a config entry converts with
// meter.Price(p).
type Price struct {
	Input       float64 `yaml:"input" json:"input"`
	CachedInput float64 `yaml:"cached_input" json:"cached_input"`
	CacheWrite  float64 `yaml:"cache_write" json:"cache_write"`
	Output      float64 `yaml:"output" json:"output"`
	// CacheWrite1h prices cache writes kept for an hour (Anthropic's 1-hour
	// TTL); 0 prices them as CacheWrite.
	CacheWrite1h float64 `yaml:"cache_write_1h" json:"cache_write_1h,omitempty"`
}

// Validate reports a rate that is negative, not finite or above MaxPrice.
func (p Price) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input", p.Input}, {"cached_input", p.CachedInput}, {"cache_write", p.CacheWrite}, {"output", p.Output}, {"cache_write_1h", p.CacheWrite1h}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > MaxPrice {
			return fmt.Errorf("%w: %s %v is not within [0, %d] USD per million tokens", ErrInvalidPrice, f.name, f.v, MaxPrice)
		}
	}
	return nil
}

// rates is a Price in pico-dollars per token (1e-12 USD), where every
// published price is an integer, so a turn's cost is an exact sum.
type rates struct{ input, cached, write, write1h, output int64 }

// highest returns the highest rate of input of any kind, and the output
// rate.
func (r rates) highest() (input, output int64) {
	return max(r.input, r.cached, r.write, r.write1h), r.output
}

func ratesOf(p Price) rates {
	w1h := p.CacheWrite1h
	if w1h == 0 {
		w1h = p.CacheWrite
	}
	return rates{picos(p.Input), picos(p.CachedInput), picos(p.CacheWrite), picos(w1h), picos(p.Output)}
}

// picos converts USD per million tokens to pico-dollars per token; the
// scale happens to be the same number.
func picos(usdPerMillion float64) int64 { return int64(math.Round(usdPerMillion * 1e6)) }

// entry is one priced model of a Table.
type entry struct {
	key   string // the table key that matched, "gpt-4o" or "claude-*"
	price Price
	base  rates
	// longAbove > 0 gives the model a long-prompt tier: a request whose
	// prompt (uncached + cached + cache-write tokens) exceeds it pays the
	// long rates on every token, output included.
	longAbove int64
	long      rates
}

// ratesFor returns the rates a request with that many prompt tokens pays.
func (e entry) ratesFor(prompt int64) (rates, bool) {
	if e.longAbove > 0 && prompt > e.longAbove {
		return e.long, true
	}
	return e.base, false
}

// Table is an immutable price list. Lookups go, in order, by:
//
//  1. the exact model name;
//  2. the name without one snapshot suffix: a date ("-20250929",
//     "-2025-04-14", Vertex's "@20250929") or "-latest", so that
//     "claude-sonnet-4-5-20250929" is priced as "claude-sonnet-4-5" and
//     "gpt-4.1-2025-04-14" as "gpt-4.1";
//  3. the longest open prefix, a key written with a trailing "*"
//     ("claude-*").
//
// Names are compared in lower case. Anything else is unknown: a new version
// such as "gpt-5.7" never borrows the price of "gpt-5", it is charged the
// fallback and flagged until the table learns it.
//
// Build tables with DefaultTable, NewTable or With; the zero Table knows no
// model and has no fallback.
type Table struct {
	exact    map[string]entry
	open     map[string]entry // by prefix, without the "*"
	maxOpen  int              // longest key of open, bounding prefix search
	fallback entry
	// tiers are the service-tier multipliers, in thousandths, by model
	// key matched as prices are (see Tier).
	tiers []tierRow
}

// tierRow is one model key's service-tier multipliers.
type tierRow struct {
	prefix string // lower case, without its "*"
	exact  bool
	mult   map[string]int64 // tier name → multiplier in thousandths
}

//go:embed prices.yaml
var defaultPrices []byte

// DefaultTable returns the maintained price list embedded from prices.yaml,
// parsed anew on each call (about a millisecond): build it once at startup.
// The file is part of the build and a test parses it, so a failure here is a
// broken build and panics.
func DefaultTable() *Table {
	t, err := parseTable(defaultPrices)
	if err != nil {
		panic(fmt.Sprintf("meter: embedded prices.yaml: %v", err))
	}
	return t
}

// NewTable builds a table from scratch: prices by model key (see Table for
// how keys match) and the price of unknown models, which must charge both
// input and output.
func NewTable(prices map[string]Price, fallback Price) (*Table, error) {
	t := &Table{exact: map[string]entry{}, open: map[string]entry{}}
	if err := t.setFallback(spec{Price: fallback}); err != nil {
		return nil, err
	}
	if err := t.setAll(specs(prices)); err != nil {
		return nil, err
	}
	return t, nil
}

// With returns a copy of t in which overrides replace or extend the
// entries; t itself is unchanged. An override replaces the whole entry,
// long-prompt tier included, since config prices carry none. The key
// FallbackKey sets the fallback price.
func (t *Table) With(overrides map[string]Price) (*Table, error) {
	c := &Table{exact: map[string]entry{}, open: map[string]entry{}, maxOpen: t.maxOpen, fallback: t.fallback, tiers: t.tiers}
	maps.Copy(c.exact, t.exact)
	maps.Copy(c.open, t.open)
	if err := c.setAll(specs(overrides)); err != nil {
		return nil, err
	}
	return c, nil
}

func specs(prices map[string]Price) map[string]spec {
	s := make(map[string]spec, len(prices))
	for k, p := range prices {
		s[k] = spec{Price: p}
	}
	return s
}

// Lookup returns the price of model; false means the table does not know it
// and Cost would charge the fallback.
func (t *Table) Lookup(model string) (Price, bool) {
	e, ok := t.find(model)
	return e.price, ok
}

// Fallback returns the price charged for unknown models.
func (t *Table) Fallback() Price { return t.fallback.price }

// find implements the lookup order documented on Table.
func (t *Table) find(model string) (entry, bool) {
	m := strings.ToLower(strings.TrimSpace(model))
	if m == "" {
		return entry{}, false
	}
	if e, ok := t.exact[m]; ok {
		return e, true
	}
	if base, ok := snapshotBase(m); ok {
		if e, ok := t.exact[base]; ok {
			return e, true
		}
	}
	for i := min(len(m), t.maxOpen); i >= 0; i-- {
		if e, ok := t.open[m[:i]]; ok {
			return e, true
		}
	}
	return entry{}, false
}

// snapshotBase strips one snapshot suffix from a lower-case model name.
func snapshotBase(m string) (string, bool) {
	n := len(m)
	switch {
	case strings.HasSuffix(m, "-latest") && n > len("-latest"):
		return m[:n-len("-latest")], true
	case n > 9 && (m[n-9] == '-' || m[n-9] == '@') && digits(m[n-8:]):
		return m[:n-9], true // -20250929, @20250929
	case n > 11 && m[n-11] == '-' && digits(m[n-10:n-6]) && m[n-6] == '-' && digits(m[n-5:n-3]) && m[n-3] == '-' && digits(m[n-2:]):
		return m[:n-11], true // -2025-04-14
	}
	return "", false
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// spec is one model's entry as written in prices.yaml. Source and Date say
// where its prices come from and when they were checked; the file requires
// both, config overrides neither.
type spec struct {
	Price      `yaml:",inline"`
	LongPrompt *longPrompt `yaml:"long_prompt"`
	Source     string      `yaml:"source"`
	Date       string      `yaml:"date"`
}

// longPrompt is the price of a whole request whose prompt is longer than
// Above tokens.
type longPrompt struct {
	Above int64 `yaml:"above"`
	Price `yaml:",inline"`
}

func (s spec) entry(key string) (entry, error) {
	if err := s.Price.Validate(); err != nil {
		return entry{}, fmt.Errorf("%q: %w", key, err)
	}
	e := entry{key: key, price: s.Price, base: ratesOf(s.Price)}
	if s.LongPrompt != nil {
		if s.LongPrompt.Above <= 0 {
			return entry{}, fmt.Errorf("%w: %q: long_prompt.above must be positive", ErrInvalidPrice, key)
		}
		if err := s.LongPrompt.Price.Validate(); err != nil {
			return entry{}, fmt.Errorf("%q long_prompt: %w", key, err)
		}
		e.longAbove, e.long = s.LongPrompt.Above, ratesOf(s.LongPrompt.Price)
	}
	return e, nil
}

func (t *Table) setFallback(s spec) error {
	e, err := s.entry(FallbackKey)
	if err != nil {
		return err
	}
	if !(s.Input > 0 && s.Output > 0) {
		return fmt.Errorf("%w: the fallback must charge input and output, got %+v", ErrInvalidPrice, s.Price)
	}
	e.key = "" // a fallback charge names no entry
	t.fallback = e
	return nil
}

// setAll sets every entry, in key order so that the first error is always
// the same; two keys that differ only in case are an error.
func (t *Table) setAll(specs map[string]spec) error {
	seen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(specs)) {
		norm := strings.ToLower(strings.TrimSpace(k))
		if prev, dup := seen[norm]; dup {
			return fmt.Errorf("%w: %q and %q name the same model", ErrInvalidPrice, prev, k)
		}
		seen[norm] = k
		if err := t.set(k, specs[k]); err != nil {
			return err
		}
	}
	return nil
}

// set adds or replaces the entry for a key as written in a file or config.
func (t *Table) set(key string, s spec) error {
	k := strings.ToLower(strings.TrimSpace(key))
	if k == FallbackKey {
		return t.setFallback(s)
	}
	prefix, open := strings.CutSuffix(k, "*")
	switch {
	case k == "":
		return fmt.Errorf("%w: empty model name", ErrInvalidPrice)
	case strings.Contains(prefix, "*"):
		return fmt.Errorf("%w: %q: \"*\" may only end a model name", ErrInvalidPrice, key)
	}
	e, err := s.entry(k)
	if err != nil {
		return err
	}
	if open {
		t.open[prefix] = e
		t.maxOpen = max(t.maxOpen, len(prefix))
	} else {
		t.exact[k] = e
	}
	return nil
}

// priceFile is the layout of prices.yaml.
type priceFile struct {
	Sources      map[string]string             `yaml:"sources"` // named for YAML anchors
	Fallback     *spec                         `yaml:"fallback"`
	ServiceTiers map[string]map[string]float64 `yaml:"service_tiers"`
	Models       map[string]spec               `yaml:"models"`
}

// Tier returns the multiplier, in thousandths, of every rate of model's
// calls served in tier (as the reply names it: "priority", "flex",
// "batch"...): from the service_tiers row whose key matches the model as
// prices match, the exact key first, then the longest prefix; 1000 for a
// tier or model no row names ("standard", "default", "auto"...).
func (t *Table) Tier(model, tier string) int64 {
	m := strings.ToLower(strings.TrimSpace(model))
	tier = strings.ToLower(strings.TrimSpace(tier))
	if tier == "" {
		return 1000
	}
	if base, ok := snapshotBase(m); ok {
		m = base
	}
	best := -1
	for i, r := range t.tiers {
		switch {
		case r.exact && r.prefix == m:
			best = i
		case !r.exact && strings.HasPrefix(m, r.prefix) && (best < 0 || !t.tiers[best].exact && len(r.prefix) > len(t.tiers[best].prefix)):
			best = i
		}
		if best >= 0 && t.tiers[best].exact {
			break
		}
	}
	if best < 0 {
		return 1000
	}
	if x, ok := t.tiers[best].mult[tier]; ok {
		return x
	}
	return 1000
}

func parseTiers(rows map[string]map[string]float64) ([]tierRow, error) {
	var out []tierRow
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		key := strings.ToLower(strings.TrimSpace(k))
		prefix, open := strings.CutSuffix(key, "*")
		if prefix == "" && !open || strings.Contains(prefix, "*") {
			return nil, fmt.Errorf("%w: service_tiers key %q", ErrInvalidPrice, k)
		}
		r := tierRow{prefix: prefix, exact: !open, mult: map[string]int64{}}
		for tier, x := range rows[k] {
			if math.IsNaN(x) || x <= 0 || x > 100 {
				return nil, fmt.Errorf("%w: service_tiers %q %q is %v, want a multiplier in (0, 100]", ErrInvalidPrice, k, tier, x)
			}
			r.mult[strings.ToLower(tier)] = int64(math.Round(x * 1000))
		}
		out = append(out, r)
	}
	return out, nil
}

// parseTable reads a price file; unknown fields, duplicate keys and invalid
// prices are errors, so a typo cannot silently price a model at zero.
func parseTable(b []byte) (*Table, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f priceFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPrice, err)
	}
	if f.Fallback == nil {
		return nil, fmt.Errorf("%w: no fallback price", ErrInvalidPrice)
	}
	t := &Table{exact: map[string]entry{}, open: map[string]entry{}}
	if err := t.setFallback(*f.Fallback); err != nil {
		return nil, err
	}
	tiers, err := parseTiers(f.ServiceTiers)
	if err != nil {
		return nil, err
	}
	t.tiers = tiers
	for k := range f.Models {
		if strings.ToLower(strings.TrimSpace(k)) == FallbackKey {
			return nil, fmt.Errorf("%w: the fallback price goes under the top-level fallback key, not under models", ErrInvalidPrice)
		}
	}
	if err := t.setAll(f.Models); err != nil {
		return nil, err
	}
	// Every row says where its prices come from and when they were
	// checked, so a stale price can be found and traced.
	if f.Fallback.Source == "" || f.Fallback.Date == "" {
		return nil, fmt.Errorf("%w: the fallback row names no source or date", ErrInvalidPrice)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Models)) {
		if m := f.Models[k]; m.Source == "" || m.Date == "" {
			return nil, fmt.Errorf("%w: %q: every row of the price file names its source and date", ErrInvalidPrice, k)
		}
	}
	return t, nil
}
