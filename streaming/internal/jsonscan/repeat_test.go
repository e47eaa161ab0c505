package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var repeatCases = []struct {
	name, in string
	repeats  bool
	want     string // Unrepeat's text, when repeats
}{
	{"none", `{"type":"text","text":"a","n":1}`, false, ""},
	{"nested none", `{"a":{"b":[{"c":1},{"c":2}]},"b":[]}`, false, ""},
	{"same key in sibling objects", `[{"type":"a"},{"type":"b"}]`, false, ""},
	{"key in a string", `{"text":"\"type\":\"x\",\"type\":1"}`, false, ""},
	{"top level", `{"type":"text","text":"","type":"tool_use"}`, true, `{"type":"tool_use","text":""}`},
	{"case variant", `{"command":"ls","Command":"rm -rf /"}`, true, `{"Command":"rm -rf /"}`},
	{"kelvin sign folds to k", `{"kind":1,"\u212aind":2}`, true, `{"\u212aind":2}`},
	{"escaped key", `{"name":"Read","n\u0061me":"Bash"}`, true, `{"n\u0061me":"Bash"}`},
	{"nested in an array", `{"content":[{"type":"text"},{"id":"a","id":"b"}]}`, true, `{"content":[{"type":"text"},{"id":"b"}]}`},
	{"counts keep the largest", `{"usage":{"output_tokens":900,"output_tokens":3}}`, true, `{"usage":{"output_tokens":900}}`},
	{"objects merge", `{"usage":{"input_tokens":5,"output_tokens":1},"usage":{"output_tokens":40}}`, true,
		`{"usage":{"input_tokens":5,"output_tokens":40}}`},
	{"block type from the last", `{"content_block":{"type":"text","text":""},"content_block":{"type":"tool_use","id":"t","name":"Bash","input":{}}}`, true,
		`{"content_block":{"type":"tool_use","text":"","id":"t","name":"Bash","input":{}}}`},
	{"mixed types keep the last", `{"a":1,"a":"x"}`, true, `{"a":"x"}`},
	{"number past float64", `{"n":1E700,"m":[-1e-700,1E700]}`, false, ""},
	{"count past float64 kept", `{"usage":{"output_tokens":1E700,"output_tokens":3}}`, true, `{"usage":{"output_tokens":1E700}}`},
	{"deep", `{"a":{"b":{"c":{"d":1,"D":2}}}}`, true, `{"a":{"b":{"c":{"D":2}}}}`},
}

func TestRepeats(t *testing.T) {
	for _, tc := range repeatCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Repeats(tc.in); got != tc.repeats {
				t.Fatalf("Repeats(%s) = %v, want %v", tc.in, got, tc.repeats)
			}
			if got := refRepeats(t, tc.in); got != tc.repeats {
				t.Fatalf("reference reader says %v", got)
			}
			if !tc.repeats {
				return
			}
			got := string(Unrepeat(nil, tc.in))
			if got != tc.want {
				t.Errorf("Unrepeat = %s, want %s", got, tc.want)
			}
			if Repeats(got) || !gjson.Valid(got) {
				t.Errorf("Unrepeat gave %s: repeats or is not JSON", got)
			}
		})
	}
}

func TestRepeatsWideObject(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":1`)
	}
	if Repeats(b.String() + "}") {
		t.Fatal("100 distinct keys reported repeating")
	}
	if !Repeats(b.String() + `,"KXX":2}`) {
		t.Fatal("a case variant of the 3rd of 100 keys not found")
	}
}

// TestRepeatsNoAlloc: the check runs on every event of every reply.
func TestRepeatsNoAlloc(t *testing.T) {
	ev := `{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"ls -la\"}"}}`
	big := `{"type":"response.completed","response":{"id":"r","object":"response","status":"completed","output":[` +
		strings.Repeat(`{"type":"message","id":"m","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]},`, 20) +
		`{"type":"function_call","id":"fc","call_id":"c","name":"f","arguments":"{}"}],"usage":{"input_tokens":1,"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0}}}}`
	for _, s := range []string{ev, big} {
		if n := testing.AllocsPerRun(100, func() { _ = Repeats(s) }); n != 0 {
			t.Errorf("Repeats allocates %.0f times on %.40s...", n, s)
		}
	}
}

// refRepeats is the reference: encoding/json's tokens, each object's keys
// compared by strings.EqualFold.
func refRepeats(t testing.TB, s string) bool {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber() // a number past float64's range is still valid JSON
	type frame struct {
		obj  bool
		keys []string
		key  bool // the next string token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			t.Fatalf("reference reader: %v", err)
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{obj: v == '{', key: v == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.obj && top.key {
				for _, k := range top.keys {
					if strings.EqualFold(k, v) {
						return true
					}
				}
				top.keys = append(top.keys, v)
				top.key = false
				continue
			}
		}
		if top != nil && top.obj {
			top.key = true
		}
	}
}

// FuzzRepeats checks Repeats against the reference reader, and that
// Unrepeat always gives valid JSON that repeats nothing, equal to the
// input when the input repeats nothing.
func FuzzRepeats(f *testing.F) {
	for _, tc := range repeatCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !gjson.Valid(s) || !json.Valid([]byte(s)) || !NestingWithin(s, 200) {
			return
		}
		got := Repeats(s)
		if want := refRepeats(t, s); got != want {
			t.Fatalf("Repeats(%q) = %v, reference %v", s, got, want)
		}
		u := Unrepeat(nil, s)
		if !json.Valid(u) || Repeats(string(u)) {
			t.Fatalf("Unrepeat(%q) = %q: invalid or repeating", s, u)
		}
		if !got {
			a, errA := decodeNumbers([]byte(s))
			b, errB := decodeNumbers(u)
			if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("Unrepeat changed %q into %q", s, u)
			}
		}
	})
}

// decodeNumbers decodes one JSON value keeping numbers as written, so a
// number past float64's range compares instead of failing.
func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
