package escrow

import (
	"testing"

	"gatekeeper/streaming"
)

// FuzzTurnKey: any body, JSON or not, gets a key of one form and no
// panic: the key is taken from the agent's bytes before they are judged.
func FuzzTurnKey(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	f.Add(`{"input":[{"type":"message"}],"instructions":"x"}`)
	f.Add(`not json`)
	fields := []string{"system", "instructions", "input", "messages", "tools"}
	f.Fuzz(func(t *testing.T, body string) {
		for _, api := range []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses} {
			if k := TurnKey(api, fields, []byte(body)); len(k) != len("turn_")+64 {
				t.Fatalf("key %q", k)
			}
		}
	})
}

// The key names its API and each field apart: the same bytes under
// another API, or split differently across fields, is another turn.
func TestTurnKeyApart(t *testing.T) {
	fields := []string{"instructions", "input"}
	tests := []struct {
		name   string
		a, b   string
		apiB   streaming.API
		equals bool
	}{
		{"same body", `{"instructions":"a","input":"b"}`, `{"input":"b","instructions":"a"}`, streaming.APIResponses, true},
		{"other API", `{"instructions":"a","input":"b"}`, `{"instructions":"a","input":"b"}`, streaming.APIChat, false},
		{"fields do not run into each other", `{"instructions":"ab","input":"c"}`, `{"instructions":"a","input":"bc"}`, streaming.APIResponses, false},
		{"other members ignored", `{"instructions":"a","input":"b","stream":true}`, `{"instructions":"a","input":"b","max_output_tokens":9}`, streaming.APIResponses, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := TurnKey(streaming.APIResponses, fields, []byte(tc.a))
			b := TurnKey(tc.apiB, fields, []byte(tc.b))
			if (a == b) != tc.equals {
				t.Fatalf("equal keys = %v, want %v", a == b, tc.equals)
			}
		})
	}
}
