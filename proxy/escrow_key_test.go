package proxy

import (
	"testing"

	"gatekeeper/streaming"
)

// The turn key covers the conversation and tools and nothing a retry may
// change.
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
			if got := turnKey(tc.api, []byte(tc.a)) == turnKey(tc.api, []byte(tc.b)); got != tc.equal {
				t.Fatalf("equal keys = %v, want %v", got, tc.equal)
			}
		})
	}
}

// FuzzTurnKey: any body, JSON or not, gets a key of one form and no
// panic: the key is taken from the agent's bytes before they are judged.
func FuzzTurnKey(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	f.Add(`{"input":[{"type":"message"}],"instructions":"x"}`)
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, body string) {
		for _, api := range []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses} {
			if k := turnKey(api, []byte(body)); len(k) != len("turn_")+64 {
				t.Fatalf("key %q", k)
			}
		}
	})
}
