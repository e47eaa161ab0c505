package streaming_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

func TestCallDigest(t *testing.T) {
	base := streaming.CallDigest("Bash", []byte(`{"command":"ls -la","timeout":30,"opts":{"a":1,"b":[1,2]}}`))
	tests := []struct {
		name string
		tool string
		args string
		same bool
	}{
		{"keys reordered", "Bash", `{"timeout":30,"opts":{"b":[1,2],"a":1},"command":"ls -la"}`, true},
		{"whitespace", "Bash", "{ \"command\" : \"ls -la\",\n\t\"timeout\": 30, \"opts\": {\"a\": 1, \"b\": [ 1, 2 ]} }", true},
		{"escaped the other way", "Bash", `{"command":"ls \u002dla","timeout":30,"opts":{"a":1,"b":[1,2]}}`, true},
		{"a key escaped", "Bash", `{"\u0063ommand":"ls -la","timeout":30,"opts":{"a":1,"b":[1,2]}}`, true},
		{"a member twice: the last wins", "Bash", `{"command":"rm -rf /","command":"ls -la","timeout":30,"opts":{"a":1,"b":[1,2]}}`, true},
		{"a case variant of a member: the last wins", "Bash", `{"command":"rm -rf /","Command":"ls -la","timeout":30,"opts":{"a":1,"b":[1,2]}}`, false},
		{"a case variant before it: the last wins", "Bash", `{"Command":"rm -rf /","timeout":30,"command":"ls -la","opts":{"a":1,"b":[1,2]}}`, true},
		{"a case variant nested", "Bash", `{"command":"ls -la","timeout":30,"opts":{"A":9,"a":1,"b":[1,2]}}`, true},
		{"another tool", "Run", `{"command":"ls -la","timeout":30,"opts":{"a":1,"b":[1,2]}}`, false},
		{"another value", "Bash", `{"command":"ls -l","timeout":30,"opts":{"a":1,"b":[1,2]}}`, false},
		{"array order matters", "Bash", `{"command":"ls -la","timeout":30,"opts":{"a":1,"b":[2,1]}}`, false},
		{"a number written otherwise", "Bash", `{"command":"ls -la","timeout":30.0,"opts":{"a":1,"b":[1,2]}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := streaming.CallDigest(tc.tool, []byte(tc.args)) == base; got != tc.same {
				t.Errorf("same digest %v, want %v", got, tc.same)
			}
		})
	}
	if streaming.CallDigest("x", []byte("free text")) == streaming.CallDigest("x", []byte("free  text")) {
		t.Error("free-text inputs that differ digest the same")
	}
	if streaming.CallDigest("x", []byte(`"a"`)) == streaming.CallDigest("x", []byte(`"a"x`)) {
		t.Error("trailing data after a JSON value is ignored")
	}
}

func TestResultDigestsAndFailures(t *testing.T) {
	const tools = `"tools":[{"name":"Bash","input_schema":{"type":"object"}}]`
	tests := []struct {
		name   string
		api    streaming.API
		body   string
		errors []bool
		equal  bool // the first two results digest equal
		empty  []bool
	}{
		{name: "anthropic is_error and content", api: streaming.APIAnthropic,
			body: `{"model":"m",` + tools + `,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}},{"type":"tool_use","id":"t2","name":"Bash","input":{}},{"type":"tool_use","id":"t3","name":"Bash","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"no such file","is_error":true},{"type":"tool_result","tool_use_id":"t2","content":"no such file"},{"type":"tool_result","tool_use_id":"t3","content":""}]}]}`,
			errors: []bool{true, false, false}, equal: true, empty: []bool{false, false, true}},
		{name: "chat exit codes", api: streaming.APIChat,
			body: `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"Exit code: 2\nWall time: 0.1 seconds\nOutput:\nboom"},
			{"role":"tool","tool_call_id":"c2","content":"Exit code: 0\nWall time: 0.1 seconds\nOutput:\nExit code: 1"},
			{"role":"tool","tool_call_id":"c3","content":[{"type":"text","text":"Chunk ID: 1\nProcess exited with code 127\nOutput:\n"}]},
			{"role":"tool","tool_call_id":"c4","content":"{\"output\":\"x\",\"metadata\":{\"exit_code\":1,\"duration_seconds\":0.1}}"},
			{"role":"tool","tool_call_id":"c5","content":"{\"output\":\"x\",\"metadata\":{\"exit_code\":0}}"},
			{"role":"tool","tool_call_id":"c6","content":"the word Exit code: 3 later in a line"}]}`,
			errors: []bool{true, false, true, true, false, false}, empty: []bool{false, false, false, false, false, false}},
		{name: "responses outputs", api: streaming.APIResponses,
			body: `{"model":"m","input":[{"role":"user","content":"go"},{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"Process exited with code 1\nOutput:\nerr"},
			{"type":"custom_tool_call_output","call_id":"c2","output":"Process exited with code 1\nOutput:\nerr"},
			{"type":"function_call_output","call_id":"c3","output":[]}]}`,
			errors: []bool{true, true, false}, equal: true, empty: []bool{false, false, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := dialects[tc.api].ParseRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if len(pr.ToolResults) != len(tc.errors) {
				t.Fatalf("%d results, want %d: %+v", len(pr.ToolResults), len(tc.errors), pr.ToolResults)
			}
			for i, r := range pr.ToolResults {
				if r.IsError != tc.errors[i] {
					t.Errorf("result %d (%s): error %v, want %v", i, r.ID, r.IsError, tc.errors[i])
				}
				if (r.Digest == 0) != tc.empty[i] {
					t.Errorf("result %d (%s): digest %x, want empty %v", i, r.ID, r.Digest, tc.empty[i])
				}
			}
			if eq := pr.ToolResults[0].Digest == pr.ToolResults[1].Digest; eq != tc.equal {
				t.Errorf("first two results digest equal: %v, want %v", eq, tc.equal)
			}
		})
	}
}

// FuzzCallDigest: the canonical digest of any input is deterministic, and
// for a JSON input it does not change when the input's object keys are
// written in another order or spaced otherwise. An input with keys equal
// under case folding is left out of the second check: which of them counts
// is the last, so their order is part of what the input says.
func FuzzCallDigest(f *testing.F) {
	for _, s := range []string{`{}`, `{"command":"ls","timeout":3}`, `{"a":{"b":[1,{"c":null,"d":true}]},"e":"\u00e9"}`,
		`[1,2,3]`, `"text"`, `free text`, `{"a":1,"a":2}`, `{"x":1e400}`, `{"k":"\ud800"}`, ``, `{"a":`, `{"a0":0,"A":0,"a":0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		d := streaming.CallDigest("tool", args)
		if d == 0 || d != streaming.CallDigest("tool", bytes.Clone(args)) {
			t.Fatalf("digest %x not deterministic (or zero) for %q", d, args)
		}
		if !gjson.ValidBytes(args) || jsonscan.Repeats(string(args)) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil || !utf8.Valid(args) {
			// Invalid UTF-8 would come back from encoding/json altered.
			return
		}
		var b strings.Builder
		if !writeReordered(&b, v, 0) {
			return
		}
		if r := streaming.CallDigest("tool", []byte(b.String())); r != d {
			t.Fatalf("%q digests %x, reordered as %q %x", args, d, b.String(), r)
		}
	})
}

// writeReordered writes v with object keys in reverse order and spaces
// around every token; false when v holds what JSON cannot write back.
func writeReordered(b *strings.Builder, v any, depth int) bool {
	if depth > streaming.MaxCanonicalDepth-2 {
		return false
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		slices.Reverse(keys)
		b.WriteString(" {\n")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" ,\t")
			}
			kb, err := json.Marshal(k)
			if err != nil {
				return false
			}
			b.Write(kb)
			b.WriteString(" : ")
			if !writeReordered(b, x[k], depth+1) {
				return false
			}
		}
		b.WriteString(" } ")
	case []any:
		b.WriteString("[ ")
		for i, e := range x {
			if i > 0 {
				b.WriteString(" , ")
			}
			if !writeReordered(b, e, depth+1) {
				return false
			}
		}
		b.WriteString(" ]")
	default:
		vb, err := json.Marshal(x)
		if err != nil {
			return false
		}
		fmt.Fprintf(b, " %s ", vb)
	}
	return true
}
