package proxy

import (
	"testing"

	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/streaming"
)

// The turn key, over each API's turn fields, covers the conversation and
// tools and nothing a retry may change.
func TestTurnKey(t *testing.T) {
	base := `{"model":"m","max_tokens":100,"stream":true,"system":"s","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"Bash"}]}`
	tests := []struct {
		name  string
		api   streaming.API
		a, b  string
		equal bool
	}{
		{"stream and max_tokens ignored", streaming.APIAnthropic, base,
			`{"model":"m","max_tokens":4096,"stream":false,"metadata":{"user_id":"u"},"system":"s","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"Bash"}]}`, true},
		{"messages differ", streaming.APIAnthropic, base,
			`{"model":"m","max_tokens":100,"stream":true,"system":"s","messages":[{"role":"user","content":"ho"}],"tools":[{"name":"Bash"}]}`, false},
		{"system differs", streaming.APIAnthropic, base,
			`{"model":"m","max_tokens":100,"stream":true,"system":"t","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"Bash"}]}`, false},
		{"tools differ", streaming.APIAnthropic, base,
			`{"model":"m","max_tokens":100,"stream":true,"system":"s","messages":[{"role":"user","content":"hi"}],"tools":[]}`, false},
		{"chat stream_options ignored", streaming.APIChat, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, true},
		{"responses previous_response_id counts", streaming.APIResponses, `{"model":"m","input":"hi","previous_response_id":"resp_1"}`,
			`{"model":"m","input":"hi","previous_response_id":"resp_2"}`, false},
		{"fields do not run into each other", streaming.APIResponses, `{"instructions":"ab","input":"c"}`, `{"instructions":"a","input":"bc"}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := escrow.TurnKey(tc.api, dialect.Of(tc.api).TurnFields, []byte(tc.a)) == escrow.TurnKey(tc.api, dialect.Of(tc.api).TurnFields, []byte(tc.b)); got != tc.equal {
				t.Fatalf("equal keys = %v, want %v", got, tc.equal)
			}
		})
	}
}
