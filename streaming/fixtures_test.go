package streaming

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixturesDir holds real recorded provider streams and EXPECTED.json, the
// facts each must decode to. They live outside the repository and are only
// read when present.
const fixturesDir = "../../shared/fixtures"

// expectedFixture is one entry of EXPECTED.json. Fields stay generic because
// each API describes its stops, tool calls and usage in its own shape.
type expectedFixture struct {
	API        string            `json:"api"`
	Stop       json.RawMessage   `json:"stop"`
	ToolCalls  []map[string]any  `json:"tool_calls"`
	Usage      map[string]any    `json:"usage"`
	Errors     []json.RawMessage `json:"errors"`
	DoneMarker bool              `json:"done_marker"`
}

// loadExpected reads EXPECTED.json, keyed by fixture file name, and skips
// the test when the fixtures are not there.
func loadExpected(t testing.TB) map[string]expectedFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, "EXPECTED.json"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no recorded fixtures at %s", fixturesDir)
	}
	if err != nil {
		t.Fatalf("read EXPECTED.json: %v", err)
	}
	var m map[string]expectedFixture
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("parse EXPECTED.json: %v", err)
	}
	if len(m) == 0 {
		t.Fatal("EXPECTED.json lists no fixtures")
	}
	return m
}

// readFixture returns the bytes of one recorded stream.
func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return b
}

// decodeStream feeds data to a fresh Reader in the chunks that cuts
// (increasing offsets) mark, decodes every event with dec, and returns the
// finished Result and a copy of every Part emitted.
func decodeStream(t testing.TB, dec Decoder, data []byte, cuts []int) (*Result, []Part) {
	t.Helper()
	var parts []Part
	emit := func(p *Part) { parts = append(parts, clonePart(p)) }
	fn := func(ev *Event) error {
		dec.Decode(ev, emit)
		return nil
	}
	r := NewReader(0)
	prev := 0
	for i := 0; i <= len(cuts); i++ {
		end := len(data)
		if i < len(cuts) {
			end = cuts[i]
		}
		if err := r.Feed(data[prev:end], fn); err != nil {
			t.Fatalf("feed: %v", err)
		}
		prev = end
	}
	if err := r.Finish(fn); err != nil {
		t.Fatalf("finish: %v", err)
	}
	return dec.Finish(), parts
}

// clonePart copies what a Part borrows from the decoder.
func clonePart(p *Part) Part {
	c := *p
	c.Text = bytes.Clone(p.Text)
	if p.Err != nil {
		e := *p.Err
		e.Raw = bytes.Clone(p.Err.Raw)
		c.Err = &e
	}
	return c
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
		if exp.API != string(APIAnthropic) {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			data := readFixture(t, name)
			dec, err := NewDecoder(APIAnthropic)
			if err != nil {
				t.Fatal(err)
			}
			res, _ := decodeStream(t, dec, data, nil)

			var stops []string
			if err := json.Unmarshal(exp.Stop, &stops); err != nil {
				t.Fatalf("EXPECTED stop: %v", err)
			}
			if len(res.Stops) != len(stops) {
				t.Fatalf("stops = %+v, want %q", res.Stops, stops)
			}
			for i, raw := range stops {
				want := Stop{Reason: StopReason(raw), Raw: raw}
				if raw == "model_context_window_exceeded" {
					want.Reason = StopMaxTokens
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

			wantUsage := Usage{
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
func checkExpectedAnthropicCall(t *testing.T, got []ToolCall, want map[string]any) {
	t.Helper()
	index, ok := want["index"].(float64)
	if !ok {
		t.Fatalf("EXPECTED tool call without index: %v", want)
	}
	var tc *ToolCall
	for i := range got {
		if got[i].Index == int(index) {
			tc = &got[i]
		}
	}
	if tc == nil {
		t.Errorf("no tool call at index %v", index)
		return
	}
	if tc.Type != want["type"] || tc.ID != want["id"] || tc.Name != want["name"] {
		t.Errorf("call %v = %s %s %s, want %v %v %v", index, tc.Type, tc.ID, tc.Name, want["type"], want["id"], want["name"])
	}
	args, _ := want["partial_json"].(string)
	if args == "" {
		args = "{}"
	}
	if !jsonEqual(t, tc.Arguments, []byte(args)) {
		t.Errorf("call %v arguments = %s, want %s", index, tc.Arguments, args)
	}
	if !tc.Complete {
		t.Errorf("call %v not complete", index)
	}
	if wantServer := tc.Type != "tool_use"; tc.Server != wantServer {
		t.Errorf("call %v server = %v, want %v", index, tc.Server, wantServer)
	}
}
