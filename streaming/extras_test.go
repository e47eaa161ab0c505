package streaming_test

import (
	"testing"

	"gatekeeper/streaming"
)

func TestExtrasRead(t *testing.T) {
	tests := []struct {
		name string
		api  streaming.API
		data []string
		want streaming.Extras
	}{
		{"anthropic stream", streaming.APIAnthropic, []string{
			`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":10,"cache_creation_input_tokens":3000,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"service_tier":"priority"}}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}`,
		}, streaming.Extras{CacheWrite1hTokens: 2000, ServiceTier: "priority"}},
		{"anthropic delta overrides the 1-hour writes", streaming.APIAnthropic, []string{
			`{"type":"message_start","message":{"usage":{"cache_creation":{"ephemeral_1h_input_tokens":5}}}}`,
			`{"type":"message_delta","usage":{"cache_creation":{"ephemeral_1h_input_tokens":7}}}`,
		}, streaming.Extras{CacheWrite1hTokens: 7}},
		{"anthropic body", streaming.APIAnthropic, []string{
			`{"id":"msg_1","usage":{"cache_creation":{"ephemeral_1h_input_tokens":12},"service_tier":"batch"}}`,
		}, streaming.Extras{CacheWrite1hTokens: 12, ServiceTier: "batch"}},
		{"chat chunks", streaming.APIChat, []string{
			`{"id":"c1","service_tier":"flex","choices":[]}`,
			`{"id":"c1","service_tier":"default","choices":[]}`,
		}, streaming.Extras{ServiceTier: "flex"}},
		{"responses completed", streaming.APIResponses, []string{
			`{"type":"response.completed","response":{"id":"r1","service_tier":"priority"}}`,
		}, streaming.Extras{ServiceTier: "priority"}},
		{"a tier named inside text is not the tier", streaming.APIChat, []string{
			`{"choices":[{"delta":{"content":"service_tier"}}]}`,
		}, streaming.Extras{}},
		{"not JSON", streaming.APIAnthropic, []string{`service_tier ephemeral_1h_input_tokens {`}, streaming.Extras{}},
		{"a negative count is ignored", streaming.APIAnthropic, []string{`{"usage":{"cache_creation":{"ephemeral_1h_input_tokens":-4}}}`}, streaming.Extras{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var x streaming.Extras
			for _, d := range tc.data {
				dialects[tc.api].ReadExtras(&x, []byte(d))
			}
			if x != tc.want {
				t.Errorf("Extras = %+v, want %+v", x, tc.want)
			}
		})
	}
}

func FuzzExtrasRead(f *testing.F) {
	f.Add(0, []byte(`{"usage":{"cache_creation":{"ephemeral_1h_input_tokens":2000},"service_tier":"priority"}}`))
	f.Add(1, []byte(`{"service_tier":"flex"}`))
	f.Add(2, []byte(`{"response":{"service_tier":"priority"}}`))
	f.Add(0, []byte(`{"message":{"usage":{"cache_creation":{"ephemeral_1h_input_tokens":1e30}}}}`))
	f.Fuzz(func(t *testing.T, which int, data []byte) {
		apis := []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses}
		var x streaming.Extras
		dialects[apis[(which%3+3)%3]].ReadExtras(&x, data)
		if x.CacheWrite1hTokens < 0 || len(x.ServiceTier) > 64 {
			t.Fatalf("Extras %+v from %q", x, data)
		}
	})
}
