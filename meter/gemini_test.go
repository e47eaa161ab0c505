package meter

import (
	"testing"

	"gatekeeper/trajectory"
)

// TestGeminiPrices: the Gemini models are priced from the default table,
// 2.5 Pro at its long-context rates on a whole request whose prompt
// passes 200K tokens.
func TestGeminiPrices(t *testing.T) {
	tb := DefaultTable()
	tests := []struct {
		model  string
		u      trajectory.Usage
		micros int64
		long   bool
	}{
		// 1M input at 1.25, 100K cached at 0.125, 100K output at 10.
		{"gemini-2.5-pro", trajectory.Usage{InputTokens: 100_000, CachedInputTokens: 100_000, OutputTokens: 100_000}, 125_000 + 12_500 + 1_000_000, false},
		// 300K prompt: 2.50 and 15.
		{"gemini-2.5-pro", trajectory.Usage{InputTokens: 300_000, OutputTokens: 100_000}, 750_000 + 1_500_000, true},
		{"gemini-2.5-flash", trajectory.Usage{InputTokens: 1_000_000, CachedInputTokens: 1_000_000, OutputTokens: 1_000_000}, 300_000 + 30_000 + 2_500_000, false},
		{"gemini-2.5-flash-lite", trajectory.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, 100_000 + 400_000, false},
	}
	for _, tc := range tests {
		c := tb.Cost(tc.model, tc.u)
		if !c.Priced || c.Model != tc.model || c.Micros != tc.micros || c.LongPrompt != tc.long {
			t.Errorf("%s %+v: %+v, want %d micros (long %v)", tc.model, tc.u, c, tc.micros, tc.long)
		}
	}
}
