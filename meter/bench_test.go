package meter

import (
	"testing"

	"gatekeeper/trajectory"
)

// The meter runs on every model call; these show it costs nothing next to
// one.

func BenchmarkCostDated(b *testing.B) {
	tb := DefaultTable()
	u := trajectory.Usage{InputTokens: 11, CachedInputTokens: 1031, CacheWriteTokens: 50, OutputTokens: 100}
	b.ReportAllocs()
	for b.Loop() {
		tb.Cost("claude-sonnet-4-5-20250929", u)
	}
}

func BenchmarkCostUnknownWithOpenPrefixes(b *testing.B) {
	tb, err := DefaultTable().With(map[string]Price{"acme-*": {Input: 1}, "acme-model-*": {Input: 2}})
	if err != nil {
		b.Fatal(err)
	}
	u := trajectory.Usage{InputTokens: 1000, OutputTokens: 100}
	b.ReportAllocs()
	for b.Loop() {
		tb.Cost("vendor-unknown-model-2027-01-01", u)
	}
}

func BenchmarkCheckChain(b *testing.B) {
	chain := []Level{
		{ID: "run/a/b/c", Budget: trajectory.Budget{Turns: 50, Tokens: 1e6}, Used: Used{Turns: 12, Tokens: 5e5}},
		{ID: "run/a/b", Budget: trajectory.Budget{Turns: 100, Dollars: 5}, Used: Used{Turns: 40, Micros: 2e6}},
		{ID: "run/a", Budget: trajectory.Budget{WallClockS: 7200}, Used: Used{WallClock: 3e12}},
		{ID: "run", Budget: trajectory.Budget{Turns: 200, Tokens: 5e6, WallClockS: 7200, Dollars: 20}, Used: Used{Turns: 150, Tokens: 4e6, Micros: 1e7}},
	}
	for i := range chain {
		chain[i].Reserved = Reservation{Tokens: 20_000, Micros: 90_000, Turns: 1}
	}
	th := DefaultThresholds()
	b.ReportAllocs()
	for b.Loop() {
		Check(chain, th)
	}
}

func BenchmarkDefaultTable(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		DefaultTable()
	}
}
