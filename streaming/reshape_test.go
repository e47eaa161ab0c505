package streaming_test

import (
	"testing"

	"gatekeeper/streaming/internal/reshape"
)

func TestSumUsage(t *testing.T) {
	tests := []struct {
		name, a, b, want string
	}{
		{"anthropic", `{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7,"service_tier":"standard"}`,
			`{"input_tokens":12,"output_tokens":3,"server_tool_use":{"web_search_requests":1},"service_tier":"priority"}`,
			`{"input_tokens":22,"cache_read_input_tokens":5,"output_tokens":10,"service_tier":"priority","server_tool_use":{"web_search_requests":1}}`},
		{"nested details", `{"prompt_tokens":4,"completion_tokens_details":{"reasoning_tokens":2}}`,
			`{"prompt_tokens":6,"completion_tokens_details":{"reasoning_tokens":3,"audio_tokens":0}}`,
			`{"prompt_tokens":10,"completion_tokens_details":{"reasoning_tokens":5,"audio_tokens":0}}`},
		{"null in b keeps a", `{"x":1,"tier":"a"}`, `{"x":null,"tier":null}`, `{"x":1,"tier":"a"}`},
		{"a missing", ``, `{"x":1}`, `{"x":1}`},
		{"b null", `{"x":1}`, `null`, `{"x":1}`},
		{"floats", `{"cost":0.5}`, `{"cost":0.25}`, `{"cost":0.75}`},
		{"duplicate keys: the first counts", `{"x":1,"x":5}`, `{"x":2}`, `{"x":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reshape.SumUsage(tt.a, tt.b); !jsonEqual(t, []byte(got), []byte(tt.want)) {
				t.Errorf("sumUsage = %s, want %s", got, tt.want)
			}
		})
	}
}
