package mockprovider

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadScriptExample(t *testing.T) {
	s, err := LoadScript("testdata/script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Turns) != 6 || len(s.Rules) != 3 {
		t.Fatalf("%d turns, %d rules", len(s.Turns), len(s.Rules))
	}
	w := s.Turns["weather"]
	if w.Kind != KindTool || w.Text != "Let me look that up." || len(w.Tools) != 2 || w.Tools[1].Name != "get_time" {
		t.Errorf("weather = %+v", w)
	}
	if in, err := encodeInput(w.Tools[0].Input); err != nil || in != `{"city":"Paris","unit":"celsius"}` {
		t.Errorf("weather input = %s, %v", in, err)
	}
	lt := s.Turns["long_answer"]
	if lt.MaxOutputTokens != 16 || lt.Usage == nil || *lt.Usage.CacheReadTokens != 4000 || lt.Usage.OutputTokens != nil {
		t.Errorf("long_answer = %+v", lt)
	}
	if th := s.Turns["throttled"]; th.Status != 429 || time.Duration(th.RetryAfter) != 7*time.Second {
		t.Errorf("throttled = %+v", th)
	}
	if c := s.Turns["cut"]; c.Tools[0].Arguments != `{"command": "rm -rf /tmp/scratch"}` {
		t.Errorf("cut = %+v", c)
	}
	st := s.Turns["slow_thinker"]
	if st.Kind != "" || time.Duration(st.EventDelay) != 20*time.Millisecond || time.Duration(st.FirstByteDelay) != 100*time.Millisecond || st.Deltas != 4 {
		t.Errorf("slow_thinker = %+v", st)
	}
	if r := s.Rules[0]; r.When.API != "anthropic" || r.When.LastUserContains != "weather" || r.Turn.Name != "weather" {
		t.Errorf("rule 0 = %+v", r)
	}
	if r := s.Rules[1]; r.When.HasToolResults == nil || !*r.When.HasToolResults || r.Turn.Spec == nil || r.Turn.Spec.Text != "All tool results received." {
		t.Errorf("rule 1 = %+v", r)
	}
}

// TestExampleScriptTurns renders every turn of the example script on
// every API, streaming and not, and checks the scripted details arrive.
func TestExampleScriptTurns(t *testing.T) {
	script, err := LoadScript("testdata/script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, url := newMock(t, Options{Script: script, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	for _, api := range []API{APIAnthropic, APIChat, APIResponses} {
		for name := range script.Turns {
			tb := turnBodies[api]
			resp := post(t, testContext(t), url+tb.path, tb.body, HeaderTurn, name)
			events, err := readAllEvents(resp.Body)
			switch {
			case name == "throttled":
				if resp.StatusCode != 429 || resp.Header.Get("retry-after") != "7" {
					t.Errorf("%s/%s: status %d retry-after %q", api, name, resp.StatusCode, resp.Header.Get("retry-after"))
				}
			case name == "cut":
				if err == nil {
					t.Errorf("%s/%s: stream not cut", api, name)
				}
			case err != nil || len(events) == 0:
				t.Errorf("%s/%s: %d events, %v", api, name, len(events), err)
			}
		}
	}
	_ = s.WaitIdle(testContext(t))
	for _, rec := range s.Requests() {
		if rec.Turn == "" || rec.Status == 0 {
			t.Errorf("record %+v", rec)
		}
	}
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct {
		name, yaml, field, msg string
	}{
		{"empty", "", "", "script is empty"},
		{"two documents", "turns: {}\n---\nrules: []\n", "", "more than one YAML document"},
		{"not a mapping", "- 1\n- 2\n", "", "cannot unmarshal"},
		{"unknown top-level field", "turn: {}\n", "", "field turn not found"},
		{"misspelled turn field", "turns:\n  a: {kind: text, txt: hi}\n", "", "field txt not found"},
		{"unknown kind", "turns:\n  a: {kind: texts}\n", "turns.a.kind", `unknown kind "texts"`},
		{"bad duration", "turns:\n  a: {event_delay: fast}\n", "", `bad duration "fast"`},
		{"duration without unit", "turns:\n  a: {event_delay: 50}\n", "", `line 2: bad duration "50"`},
		{"negative deltas", "turns:\n  a: {deltas: -1}\n", "turns.a", "cannot be negative"},
		{"huge delay", "turns:\n  a: {event_delay: 2h}\n", "turns.a.event_delay", "between 0 and 10m0s"},
		{"huge stall", "turns:\n  a: {stall: 2h, stall_at: 3}\n", "turns.a.stall", "between 0 and 10m0s"},
		{"negative stall_at", "turns:\n  a: {stall: 1s, stall_at: -1}\n", "turns.a", "cannot be negative"},
		{"status out of range", "turns:\n  a: {kind: http_error, status: 200}\n", "turns.a.status", "not an HTTP error status"},
		{"status on a text turn", "turns:\n  a: {status: 500}\n", "turns.a.status", "only an http_error turn"},
		{"tool without a name", "turns:\n  a: {kind: tool, tools: [{input: {x: 1}}]}\n", "turns.a.tools[0].name", "missing"},
		{"item not a call", "turns:\n  a: {kind: tool, tools: [{item: message}]}\n", "turns.a.tools[0].item", "not an output item type"},
		{"item a function_call", "turns:\n  a: {kind: tool, tools: [{item: function_call}]}\n", "turns.a.tools[0].item", "not an output item type"},
		{"input not an object", "turns:\n  a: {kind: tool, tools: [{name: f, input: [1, 2]}]}\n", "turns.a.tools[0].input", "must be an object"},
		{"input and arguments", "turns:\n  a: {kind: tool, tools: [{name: f, input: {}, arguments: '{}'}]}\n", "turns.a.tools[0]", "not both"},
		{"tools on a refusal", "turns:\n  a: {kind: refusal, tools: [{name: f}]}\n", "turns.a.tools", "makes no tool calls"},
		{"cut_in_tool on text", "turns:\n  a: {cut_in_tool: true}\n", "turns.a.cut_in_tool", "only a max_tokens turn"},
		{"bad turn name", "turns:\n  'a b': {}\n", "turns.a b", "letters, digits"},
		{"rule naming no turn", "rules:\n  - {when: {}, turn: nothing}\n", "rules[0].turn", `no turn named "nothing"`},
		{"rule without turn", "rules:\n  - {when: {api: chat}}\n", "rules[0].turn", "missing"},
		{"rule with unknown api", "rules:\n  - {when: {api: bedrock}, turn: text}\n", "rules[0].when.api", `unknown api "bedrock"`},
		{"inline spec with unknown field", "rules:\n  - {when: {}, turn: {kind: text, speed: 3}}\n", "", "field speed not found"},
		{"inline spec invalid", "rules:\n  - {when: {}, turn: {kind: nope}}\n", "rules[0].turn.kind", "unknown kind"},
		{"turn as a list", "rules:\n  - {when: {}, turn: [a]}\n", "", "must be a turn name or a turn spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseScript([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("parsed %+v, want an error", s)
			}
			if !errors.Is(err, ErrInvalidScript) {
				t.Errorf("error %v does not wrap ErrInvalidScript", err)
			}
			var se *ScriptError
			if !errors.As(err, &se) || se.Field != tt.field || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("error %q: want field %q and message containing %q", err, tt.field, tt.msg)
			}
		})
	}
}

func TestLoadScriptFileErrors(t *testing.T) {
	if _, err := LoadScript(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("turns:\n  a: {kind: bad}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadScript(path)
	if !errors.Is(err, ErrInvalidScript) || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file: %v, want ErrInvalidScript naming the file", err)
	}
}

func TestTurnHeaderParsing(t *testing.T) {
	tests := []struct {
		name, header string
		ok           bool
	}{
		{"full spec", `{"kind":"tool","tools":[{"name":"f","input":{"n":12345678901234567890}}],"event_delay":"5ms"}`, true},
		{"unknown field", `{"kind":"text","colour":"red"}`, false},
		{"trailing data", `{"kind":"text"} {}`, false},
		{"duration as number", `{"event_delay":50}`, false},
		{"bad kind", `{"kind":"nope"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := parseSpecJSON(tt.header)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidScript) {
				t.Errorf("error %v does not wrap ErrInvalidScript", err)
			}
			if tt.ok {
				// Numbers in tool input stay exact.
				if in, _ := encodeInput(spec.Tools[0].Input); in != `{"n":12345678901234567890}` {
					t.Errorf("input = %s", in)
				}
			}
		})
	}
}

// A first_only spec answers the turn it was written for; the request that
// carries the tool results back (same headers) gets the default "Done:".
func TestTurnHeaderFirstOnly(t *testing.T) {
	_, url := newMock(t, Options{})
	spec := `{"kind":"tool","first_only":true,"tools":[{"name":"Bash","input":{"command":"ls"}}]}`
	first := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"go"}]}`
	cont := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"go"},
	 {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"REFUSED"}]}]}`
	for _, tc := range []struct{ name, body, want string }{
		{"first turn", first, `"stop_reason":"tool_use"`},
		{"after tool results", cont, `Done: received 1 tool result`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, context.Background(), url+"/v1/messages", tc.body, HeaderTurn, spec)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(b), tc.want) {
				t.Fatalf("status %d body %s, want %s", resp.StatusCode, b, tc.want)
			}
		})
	}
}
