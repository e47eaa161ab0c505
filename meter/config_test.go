package meter_test

import (
	"testing"

	"gatekeeper/config"
	"gatekeeper/meter"
)

// TestConfigPricesConvert: config's prices reach the table through a plain
// conversion, so meter needs no import of config. If config.Price ever
// drifts from meter.Price this stops compiling.
func TestConfigPricesConvert(t *testing.T) {
	cfg := config.Config{Prices: map[string]config.Price{
		"claude-sonnet-4-5": {Input: 3.5, CachedInput: 0.35, CacheWrite: 4.375, Output: 17.5},
		"in-house-*":        {Input: 1, CachedInput: 0.5, Output: 2},
		meter.FallbackKey:   {Input: 20, CachedInput: 2, CacheWrite: 25, Output: 100},
	}}
	overrides := make(map[string]meter.Price, len(cfg.Prices))
	for k, p := range cfg.Prices {
		overrides[k] = meter.Price(p)
	}
	tb, err := meter.DefaultTable().With(overrides)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := tb.Lookup("claude-sonnet-4-5-20250929"); p != meter.Price(cfg.Prices["claude-sonnet-4-5"]) {
		t.Errorf("override not applied: %+v", p)
	}
	if p, ok := tb.Lookup("in-house-v2"); !ok || p.Output != 2 {
		t.Errorf("open prefix from config: %+v, %v", p, ok)
	}
	if c := tb.Cost("not-a-model", trajectoryUsage(1000)); c.Priced || c.Micros != 1000*20+1000*100 {
		t.Errorf("fallback from config: %+v", c)
	}
}
