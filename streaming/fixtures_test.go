package streaming_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// expectedFixture is one entry of EXPECTED.json: the raw facts the
// recording holds, in the provider's own vocabulary. Stop entries differ by
// API: a stop_reason string (Anthropic), a [choice, finish_reason] pair
// (Chat), a terminal event (Responses).
type expectedFixture struct {
	API        string            `json:"api"` // "anthropic", "chat", "responses", "gemini"
	Stop       []json.RawMessage `json:"stop"`
	ToolCalls  []expectedCall    `json:"tool_calls"`
	Usage      map[string]any    `json:"usage"`
	Errors     []map[string]any  `json:"errors"`
	DoneMarker bool              `json:"done_marker"`
}

// expectedCall is a tool call of EXPECTED.json; each API fills its own
// fields.
type expectedCall struct {
	Choice      int    `json:"choice"`
	Index       int    `json:"index"`
	Type        string `json:"type"`
	ID          string `json:"id"`
	ItemID      string `json:"item_id"`
	CallID      string `json:"call_id"`
	OutputIndex int    `json:"output_index"`
	Name        string `json:"name"`
	Arguments   string `json:"arguments"`    // Chat, Responses
	PartialJSON string `json:"partial_json"` // Anthropic: the input_json_delta fragments joined
}

// fixtureAPIs maps a recording's api (its expected.json) to the API whose
// decoder reads it.
var fixtureAPIs = map[string]streaming.API{"anthropic": streaming.APIAnthropic, "chat": streaming.APIChat, "responses": streaming.APIResponses}

// decoderAPI is the API whose decoder reads the recording, if any.
func (e expectedFixture) decoderAPI() (streaming.API, bool) {
	api, ok := fixtureAPIs[e.API]
	return api, ok
}

// loadExpected reads EXPECTED.json, keyed by fixture file name, and skips
// the test when the fixtures are not there.
func loadExpected(t testing.TB) map[string]expectedFixture {
	t.Helper()
	var m map[string]expectedFixture
	fixturetest.Expected(t, &m)
	return m
}

// checkCovered fails for every stream of dir that has no golden case.
func checkCovered(t *testing.T, dir string, covered map[string]bool) {
	t.Helper()
	for _, f := range fixturetest.Glob(t, filepath.Join(dir, "*.sse")) {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no golden case", f)
		}
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Errorf("not JSON: %q: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Errorf("not JSON: %q: %v", b, err)
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// count reads a token count out of an EXPECTED usage object; dotted paths
// reach nested objects. A missing count is zero.
func count(t testing.TB, m map[string]any, path string) int64 {
	t.Helper()
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		if v, ok = obj[k]; !ok {
			return 0
		}
	}
	n, ok := v.(float64)
	if !ok {
		t.Fatalf("usage %s is %T, not a number", path, v)
	}
	return int64(n)
}

func TestAnthropicFixtures(t *testing.T) {
	expected := loadExpected(t)
	seen := 0
	for name, exp := range expected {
		if exp.API != string(streaming.APIAnthropic) {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			res, _ := mustDecode(t, streaming.APIAnthropic, fixturetest.Read(t, name))

			if len(res.Stops) != len(exp.Stop) {
				t.Fatalf("stops = %+v, want %s", res.Stops, exp.Stop)
			}
			for i, rawStop := range exp.Stop {
				var raw string
				if err := json.Unmarshal(rawStop, &raw); err != nil {
					t.Fatalf("EXPECTED stop: %v", err)
				}
				want := streaming.Stop{Reason: streaming.StopReason(raw), Raw: raw}
				if raw == "model_context_window_exceeded" {
					want.Reason = streaming.StopMaxTokens
				}
				if res.Stops[i] != want {
					t.Errorf("stop %d = %+v, want %+v", i, res.Stops[i], want)
				}
			}

			if len(res.ToolCalls) != len(exp.ToolCalls) {
				t.Errorf("%d tool calls, want %d", len(res.ToolCalls), len(exp.ToolCalls))
			}
			for _, want := range exp.ToolCalls {
				checkExpectedAnthropicCall(t, res.ToolCalls, want)
			}

			wantUsage := streaming.Usage{
				InputTokens:       count(t, exp.Usage, "input_tokens"),
				CachedInputTokens: count(t, exp.Usage, "cache_read_input_tokens"),
				CacheWriteTokens:  count(t, exp.Usage, "cache_creation_input_tokens"),
				OutputTokens:      count(t, exp.Usage, "output_tokens"),
				ReasoningTokens:   count(t, exp.Usage, "output_tokens_details.thinking_tokens"),
			}
			if !res.UsageSeen || res.Usage != wantUsage {
				t.Errorf("usage = %+v (seen %v), want %+v", res.Usage, res.UsageSeen, wantUsage)
			}
			if len(res.Errors) != len(exp.Errors) {
				t.Errorf("errors = %+v, want %d", res.Errors, len(exp.Errors))
			}
			if !res.Done || res.Truncated || res.Unparsed != 0 {
				t.Errorf("done %v truncated %v unparsed %d (%v), want a clean stream",
					res.Done, res.Truncated, res.Unparsed, res.UnparsedErrors)
			}
		})
	}
	if seen == 0 {
		t.Fatal("EXPECTED.json has no anthropic fixture")
	}
}

// checkExpectedAnthropicCall finds the call of EXPECTED entry want among got
// by its block index and compares it.
func checkExpectedAnthropicCall(t *testing.T, got []streaming.ToolCall, want expectedCall) {
	t.Helper()
	var tc *streaming.ToolCall
	for i := range got {
		if got[i].Index == want.Index {
			tc = &got[i]
		}
	}
	if tc == nil {
		t.Errorf("no tool call at index %d", want.Index)
		return
	}
	if tc.Type != want.Type || tc.ID != want.ID || tc.Name != want.Name {
		t.Errorf("call %d = %s %s %s, want %s %s %s", want.Index, tc.Type, tc.ID, tc.Name, want.Type, want.ID, want.Name)
	}
	args := want.PartialJSON
	if args == "" {
		args = "{}"
	}
	if !jsonEqual(t, tc.Arguments, []byte(args)) {
		t.Errorf("call %d arguments = %s, want %s", want.Index, tc.Arguments, args)
	}
	if !tc.Complete {
		t.Errorf("call %d not complete", want.Index)
	}
	if wantServer := tc.Type != "tool_use"; tc.Server != wantServer {
		t.Errorf("call %d server = %v, want %v", want.Index, tc.Server, wantServer)
	}
}
