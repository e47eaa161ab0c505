package meter

import (
	"math"
	"testing"

	"gatekeeper/trajectory"
)

func costTable(t *testing.T) *Table {
	t.Helper()
	tb, err := NewTable(map[string]Price{
		"claude-sonnet-4-5": sonnet,
		"gpt-4o":            gpt4o,
		"gpt-5-nano":        {Input: 0.05, CachedInput: 0.005, Output: 0.40},
	}, unk)
	if err != nil {
		t.Fatal(err)
	}
	return withLong(t, tb)
}

// withLong adds a model with a long-prompt tier, which only the price file
// can express.
func withLong(t *testing.T, tb *Table) *Table {
	t.Helper()
	err := tb.set("long-model", spec{
		Price:      Price{Input: 3, CachedInput: 0.30, CacheWrite: 3.75, Output: 15},
		LongPrompt: &longPrompt{Above: 200_000, Price: Price{Input: 6, CachedInput: 0.60, CacheWrite: 7.50, Output: 22.50}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestCost(t *testing.T) {
	tb := costTable(t)
	tests := []struct {
		name  string
		model string
		u     trajectory.Usage
		want  Charge
	}{
		{
			// 1000×3 + 2000×0.30 + 3000×3.75 + 400×15 = 3000 + 600 + 11250 + 6000
			"anthropic cache reads and writes", "claude-sonnet-4-5-20250929",
			trajectory.Usage{InputTokens: 1000, CachedInputTokens: 2000, CacheWriteTokens: 3000, OutputTokens: 400},
			Charge{Micros: 20850, Priced: true, Model: "claude-sonnet-4-5"},
		},
		{
			// 1031 × 0.30 = 309.3
			"anthropic cache read only", "claude-sonnet-4-5",
			trajectory.Usage{CachedInputTokens: 1031},
			Charge{Micros: 309, Priced: true, Model: "claude-sonnet-4-5"},
		},
		{
			// 1031 × 3.75 = 3866.25
			"anthropic cache write only", "claude-sonnet-4-5",
			trajectory.Usage{CacheWriteTokens: 1031},
			Charge{Micros: 3866, Priced: true, Model: "claude-sonnet-4-5"},
		},
		{
			// 140×2.50 + 1280×1.25 + 100×10 = 350 + 1600 + 1000
			"openai cached tokens", "gpt-4o-2024-08-06",
			trajectory.Usage{InputTokens: 140, CachedInputTokens: 1280, OutputTokens: 100},
			Charge{Micros: 2950, Priced: true, Model: "gpt-4o"},
		},
		{
			// 100 × 0.005 = 0.5, rounded half up
			"half a micro-dollar rounds up", "gpt-5-nano",
			trajectory.Usage{CachedInputTokens: 100},
			Charge{Micros: 1, Priced: true, Model: "gpt-5-nano"},
		},
		{
			// 99 × 0.005 = 0.495
			"under half rounds down", "gpt-5-nano",
			trajectory.Usage{CachedInputTokens: 99},
			Charge{Micros: 0, Priced: true, Model: "gpt-5-nano"},
		},
		{
			// a million cached tokens at $0.005 per million: exactly half a cent
			"sub-micro rates sum exactly", "gpt-5-nano",
			trajectory.Usage{CachedInputTokens: 1_000_000, InputTokens: 1, OutputTokens: 1},
			Charge{Micros: 5000, Priced: true, Model: "gpt-5-nano"}, // 5000 + 0.05 + 0.40
		},
		{
			// 10×15 + 10×75 at the fallback price, flagged
			"unknown model at the fallback", "mystery-model",
			trajectory.Usage{InputTokens: 10, OutputTokens: 10},
			Charge{Micros: 900, Priced: false},
		},
		{
			"empty model at the fallback", "",
			trajectory.Usage{CacheWriteTokens: 4},
			Charge{Micros: 75, Priced: false}, // 4 × 18.75
		},
		{
			"negative counts are not refunds", "gpt-4o",
			trajectory.Usage{InputTokens: -1000, CachedInputTokens: -5, OutputTokens: 10},
			Charge{Micros: 100, Priced: true, Model: "gpt-4o"},
		},
		{
			"no usage costs nothing", "gpt-4o",
			trajectory.Usage{},
			Charge{Micros: 0, Priced: true, Model: "gpt-4o"},
		},
		{
			// prompt exactly at the line: base rates, 200000 × 3 + 10 × 15
			"prompt at the long-prompt line", "long-model",
			trajectory.Usage{InputTokens: 100_000, CachedInputTokens: 50_000, CacheWriteTokens: 50_000, OutputTokens: 10},
			Charge{Micros: 100_000*3 + 50_000*0.30 + 50_000*3.75 + 150, Priced: true, Model: "long-model"},
		},
		{
			// one token past it: every token at the long rates, output included
			"prompt past the long-prompt line", "long-model",
			trajectory.Usage{InputTokens: 100_001, CachedInputTokens: 50_000, CacheWriteTokens: 50_000, OutputTokens: 10},
			Charge{Micros: 100_001*6 + 50_000*0.60 + 50_000*7.50 + 10*22.50, Priced: true, Model: "long-model", LongPrompt: true},
		},
		{
			"saturates instead of wrapping", "gpt-4o",
			trajectory.Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64},
			Charge{Micros: math.MaxInt64/1_000_000 + 1, Priced: true, Model: "gpt-4o"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tb.Cost(tc.model, tc.u); got != tc.want {
				t.Errorf("Cost(%q, %+v) = %+v, want %+v", tc.model, tc.u, got, tc.want)
			}
		})
	}
}

func TestChargeDollars(t *testing.T) {
	tests := []struct {
		micros int64
		want   float64
	}{{0, 0}, {1, 0.000001}, {1_227_645, 1.227645}, {20_000_000, 20}}
	for _, tc := range tests {
		if got := (Charge{Micros: tc.micros}).Dollars(); got != tc.want {
			t.Errorf("Charge{%d}.Dollars() = %v, want %v", tc.micros, got, tc.want)
		}
	}
}

func TestFromDollars(t *testing.T) {
	tests := []struct {
		name string
		usd  float64
		want int64
	}{
		{"zero", 0, 0},
		{"a cent", 0.01, 10_000},
		{"float noise", 0.1 + 0.2, 300_000},
		{"half a micro-dollar", 0.0000005, 1},
		{"twenty dollars", 20, 20_000_000},
		{"negative", -3, 0},
		{"NaN", math.NaN(), 0},
		{"huge", 1e20, math.MaxInt64},
		{"infinite", math.Inf(1), math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromDollars(tc.usd); got != tc.want {
				t.Errorf("FromDollars(%v) = %d, want %d", tc.usd, got, tc.want)
			}
		})
	}
}

func TestApproxTokens(t *testing.T) {
	tests := []struct{ bytes, want int64 }{
		{-8, 0}, {0, 0}, {1, 1}, {4, 1}, {5, 2}, {4000, 1000}, {4001, 1001}, {math.MaxInt64, math.MaxInt64/4 + 1},
	}
	for _, tc := range tests {
		if got := ApproxTokens(tc.bytes); got != tc.want {
			t.Errorf("ApproxTokens(%d) = %d, want %d", tc.bytes, got, tc.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	tb := costTable(t)
	tests := []struct {
		name      string
		model     string
		bytes     int64
		maxOutput int64
		want      Reservation
	}{
		{
			// 1001 input tokens at the cache-write rate (dearer than input):
			// 1001 × 3.75 + 1000 × 15 = 3753.75 + 15000, rounded up
			"anthropic input at the write rate", "claude-sonnet-4-5", 4001, 1000,
			Reservation{Tokens: 2001, Micros: 18754, Turns: 1},
		},
		{
			// 1000 × 2.50 + 500 × 10
			"openai input at the input rate", "gpt-4o-2024-08-06", 4000, 500,
			Reservation{Tokens: 1500, Micros: 7500, Turns: 1},
		},
		{
			// 1 × 0.05 rounds up to a whole micro-dollar
			"rounds up", "gpt-5-nano", 4, 0,
			Reservation{Tokens: 1, Micros: 1, Turns: 1},
		},
		{
			// 10 × 18.75 + 10 × 75 at the fallback
			"unknown model at the fallback", "mystery", 40, 10,
			Reservation{Tokens: 20, Micros: 938, Turns: 1},
		},
		{
			// 200001 tokens past the line: 200001 × 7.50 + 0
			"long prompt", "long-model", 800_004, 0,
			Reservation{Tokens: 200_001, Micros: 1_500_008, Turns: 1},
		},
		{
			"negative sizes count as zero", "gpt-4o", -5, -5,
			Reservation{Tokens: 0, Micros: 0, Turns: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tb.Estimate(tc.model, tc.bytes, tc.maxOutput); got != tc.want {
				t.Errorf("Estimate(%q, %d, %d) = %+v, want %+v", tc.model, tc.bytes, tc.maxOutput, got, tc.want)
			}
		})
	}
}

// TestEstimateCoversCost: the reservation of a call is never below what the
// same call costs once measured, whatever its cache split.
func TestEstimateCoversCost(t *testing.T) {
	tb := costTable(t)
	for _, model := range []string{"claude-sonnet-4-5", "gpt-4o", "gpt-5-nano", "long-model", "mystery"} {
		for _, split := range []trajectory.Usage{
			{InputTokens: 5000, OutputTokens: 700},
			{CachedInputTokens: 5000, OutputTokens: 700},
			{CacheWriteTokens: 5000, OutputTokens: 700},
			{InputTokens: 1000, CachedInputTokens: 2000, CacheWriteTokens: 2000, OutputTokens: 700},
		} {
			r := tb.Estimate(model, 4*5000, 700)
			if c := tb.Cost(model, split); c.Micros > r.Micros {
				t.Errorf("%s %+v: cost %d µ$ above reservation %d µ$", model, split, c.Micros, r.Micros)
			}
		}
	}
}
