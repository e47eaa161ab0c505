package jsonscan

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

func TestJSONStringDecode(t *testing.T) {
	tests := []struct {
		name, in, want string // in: the body of a string literal, quotes removed
	}{
		{"plain", `hello`, "hello"},
		{"empty", ``, ""},
		{"simple escapes", `a\"b\\c\/d\be\ff\ng\rh\ti`, "a\"b\\c/d\be\ff\ng\rh\ti"},
		{"unicode", `caf\u00e9 \u65E5 \u20AC`, "café 日 €"},
		{"surrogate pair", `\ud83d\ude00!`, "😀!"},
		{"lone high surrogate", `\ud83dx`, "\uFFFDx"},
		{"lone low surrogate", `\ude00`, "\uFFFD"},
		{"high surrogate then plain escape", `\ud83d\n`, "\uFFFD\n"},
		{"high surrogate before a non-surrogate", `\ud83d\u0041`, "\uFFFDA"},
		{"two high surrogates", `\ud83d\ud83d\ude00`, "\uFFFD😀"},
		{"raw utf-8", `é😀`, "é😀"},
		{"escaped backslash at the end", `abc\\`, `abc\`},
		{"malformed escape kept", `a\qb`, `a\qb`},
		{"short unicode escape kept", `\u12`, `\u12`},
		{"bad hex kept", `\u12G4`, `\u12G4`},
		{"trailing backslash kept", `ab\`, `ab\`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lit := `"` + tc.in + `"`
			if got := Unquote(tc.in); got != tc.want {
				t.Errorf("Unquote(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got, ok := StringValue(lit); !ok || got != tc.want {
				t.Errorf("StringValue(%s) = %q, %v, want %q", lit, got, ok, tc.want)
			}
			if got := string(AppendDecoded([]byte("prefix:"), lit)); got != "prefix:"+tc.want {
				t.Errorf("AppendDecoded(%s) = %q, want %q", lit, got, "prefix:"+tc.want)
			}
			// Valid literals must decode as encoding/json decodes them.
			var std string
			if json.Unmarshal([]byte(lit), &std) == nil && std != tc.want {
				t.Errorf("encoding/json decodes %s as %q, want %q", lit, std, tc.want)
			}
			if got := unquoteChunked(tc.in, 8); got != tc.want {
				t.Errorf("chunked decoding of %q = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// unquoteChunked decodes s through a scratch buffer of size bytes, as the
// fingerprint hasher does.
func unquoteChunked(s string, size int) string {
	var out []byte
	for i, n := 0, 0; i < len(s) && n <= len(s); n++ {
		var d []byte
		d, i = UnquoteInto(make([]byte, 0, size), s, i)
		out = append(out, d...)
	}
	return string(out)
}

func TestJSONScanObject(t *testing.T) {
	tests := []struct {
		name    string
		js      string
		members []string // name=value, in order
		closed  bool
		depth   int
	}{
		{
			name:    "members in order with their raw values",
			js:      ` { "a" : [1, {"b": "]"}], "c\u0041" : null , "d":-1.5e3,"e":{}} `,
			members: []string{`a=[1, {"b": "]"}]`, `cA=null`, `d=-1.5e3`, `e={}`},
			closed:  true, depth: 2,
		},
		{
			name:    "escaped quotes and backslashes",
			js:      `{"k\\":"v\\\\","q\"":"\"}","":true}`,
			members: []string{`k\="v\\\\"`, `q"="\"}"`, `=true`},
			closed:  true,
		},
		{name: "empty object", js: `{}`, closed: true},
		{name: "an array is no object", js: `[{"a":1}]`},
		{name: "a string is no object", js: `"{\"a\":1}"`},
		{name: "empty text", js: ``},
		{name: "brackets glued to a literal end the walk", js: `{"a":tru[[[}`, members: []string{`a=tru`}},
		{name: "missing value", js: `{"a":}`},
		{name: "missing colon", js: `{"a" 1}`},
		{name: "unterminated key", js: `{"a`},
		{name: "unterminated string value", js: `{"model":"a\`, members: []string{`model="a\`}},
		{name: "unterminated object value", js: `{"a":{"b":[`, members: []string{`a={"b":[`}, depth: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			it := NewObjectIter(tc.js)
			for n := 0; n <= len(tc.js); n++ {
				m, ok := it.Next()
				if !ok {
					break
				}
				if tc.js[m.Off:m.Off+len(m.Val)] != m.Val {
					t.Errorf("member %q: offset %d does not hold its value", m.Key, m.Off)
				}
				got = append(got, m.Name()+"="+m.Val)
			}
			if !reflect.DeepEqual(got, tc.members) {
				t.Errorf("members = %q, want %q", got, tc.members)
			}
			if it.Closed != tc.closed || it.Depth != tc.depth {
				t.Errorf("closed %v depth %d, want %v %d", it.Closed, it.Depth, tc.closed, tc.depth)
			}
		})
	}
}

func TestJSONScanArrayAndLookups(t *testing.T) {
	tests := []struct {
		name     string
		js       string
		elements []string
	}{
		{"mixed elements", ` [1, "a,]" , {"b":[2]},null,[], -0.5e+3 ] `, []string{`1`, `"a,]"`, `{"b":[2]}`, `null`, `[]`, `-0.5e+3`}},
		{"empty array", `[]`, nil},
		{"an object is no array", `{"a":[1]}`, nil},
		{"unterminated", `[1,"x`, []string{`1`, `"x`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			it := NewArrayIter(tc.js)
			for n := 0; n <= len(tc.js); n++ {
				e, ok := it.Next()
				if !ok {
					break
				}
				got = append(got, e)
			}
			if !reflect.DeepEqual(got, tc.elements) {
				t.Errorf("elements = %q, want %q", got, tc.elements)
			}
		})
	}
	t.Run("the first of duplicate keys wins", func(t *testing.T) {
		obj := `{"a":1,"b":{"a":9},"\u0061":2,"c":"x","b":3}`
		if got := ReadObject(obj, "c", "a", "b", "zz", "ignored"); got != [4]string{`"x"`, `1`, `{"a":9}`, ``} {
			t.Errorf("ReadObject = %q", got)
		}
		if got := MemberRaw(obj, "a"); got != `1` {
			t.Errorf("MemberRaw = %q", got)
		}
		if got := MemberRaw(`{"k\u0065y":true}`, "key"); got != `true` {
			t.Errorf("MemberRaw of an escaped key = %q", got)
		}
	})
}

func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"}"}   }`,
		`{ "a" : [1, {"b": "]"}], "c\u0041" : null , "d":-1.5e3,"e":{}}`,
		`{"k\\":"v\\\\","":true}`,
		`{"\ud800":1,"\ud83d\ude00":[[[]]]}`,
		`[1, "a,]", {"b":[2]}, null]`,
		`"\u00e9"`, `[1]`, `-0.5e+3`, ` true `,
		`{"a":tru[[[}`, `{"a":1[]}`, `{"model":"a\`, `{"a":}`, `[`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		if len(js) > 1<<12 {
			return
		}
		walkAnything(t, js)
		if !json.Valid([]byte(js)) || !gjson.Valid(js) {
			return
		}
		start := SkipSpace(js, 0)
		end, depth := SkipValueDepth(js, start)
		if SkipSpace(js, end) != len(js) {
			t.Fatalf("value of %q ends at %d", js, end)
		}
		wantDepth, err := jsonDepth(js)
		if err != nil {
			t.Fatal(err)
		}
		if depth != wantDepth || !NestingWithin(js, depth) || depth > 0 && NestingWithin(js, depth-1) {
			t.Fatalf("depth of %q = %d, want %d", js, depth, wantDepth)
		}
		root := gjson.Parse(js)
		if _, _, ok := NextMember(js, ObjectStart(js)); ok != (root.IsObject() && len(root.Map()) > 0) {
			t.Fatalf("%s: first member found = %v", js, ok)
		}
		switch {
		case root.IsObject():
			checkMembers(t, js, root, depth)
		case root.IsArray():
			checkElements(t, js, root)
		default:
			checkString(t, js[start:end])
		}
	})
}

// walkAnything runs every walker over input that may not be JSON: each
// must end, stay in range and make progress.
func walkAnything(t *testing.T, js string) {
	obj := NewObjectIter(js)
	for n := 0; ; n++ {
		prev := obj.i
		m, ok := obj.Next()
		if !ok {
			break
		}
		if n > len(js) || obj.i <= prev || m.Off+len(m.Val) > len(js) {
			t.Fatalf("object walk of %q: no progress or out of range", js)
		}
		StringValue(m.Val)
		m.Name()
	}
	arr := NewArrayIter(js)
	for n := 0; ; n++ {
		prev := arr.i
		if _, ok := arr.Next(); !ok {
			break
		}
		if n > len(js) || arr.i <= prev {
			t.Fatalf("array walk of %q makes no progress", js)
		}
	}
	for i := range len(js) {
		if end := SkipValue(js, i); end < i || end > len(js) {
			t.Fatalf("SkipValue(%q, %d) = %d", js, i, end)
		}
	}
	ReadObject(js, "a", "b", "c", "d")
	MemberRaw(js, "a")
	HasPrefixDecoded(js, "x-anthropic-billing-header")
}

// jsonDepth is how deeply encoding/json finds js to nest.
func jsonDepth(js string) (int, error) {
	dec := json.NewDecoder(strings.NewReader(js))
	dec.UseNumber() // numbers too large for a float64 are still JSON
	depth, deepest := 0, 0
	for n := 0; n <= len(js); n++ {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return deepest, nil
		}
		if err != nil {
			return 0, err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return 0, errors.New("more tokens than bytes")
}

// checkMembers compares the object walk of js with gjson's (raw values and
// their offsets) and encoding/json's (decoded keys, raw values).
func checkMembers(t *testing.T, js string, root gjson.Result, depth int) {
	t.Helper()
	type member struct {
		Val string
		Off int
	}
	var want []member
	root.ForEach(func(_, v gjson.Result) bool {
		want = append(want, member{v.Raw, v.Index})
		return true
	})
	wantKeys, wantVals := stdMembers(t, js)
	var got []member
	it := NewObjectIter(js)
	for n := 0; n <= len(js); n++ {
		m, ok := it.Next()
		if !ok {
			break
		}
		i := len(got)
		got = append(got, member{m.Val, m.Off})
		if i >= len(wantKeys) || m.Val != wantVals[i] {
			t.Fatalf("member %d of %s: %q, encoding/json has %q", i, js, m.Val, wantVals)
		}
		if utf8.ValidString(m.Key) && m.Name() != wantKeys[i] {
			t.Fatalf("key %d of %s decodes to %q, want %q", i, js, m.Name(), wantKeys[i])
		}
		if IsStringRaw(m.Val) {
			checkString(t, m.Val)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("members of %s:\n%+v\nwant\n%+v", js, got, want)
	}
	if !it.Closed || SkipSpace(js, it.i) != len(js) || it.Depth+1 != depth {
		t.Fatalf("walk of %s: closed %v at %d, depth %d of %d", js, it.Closed, it.i, it.Depth+1, depth)
	}
}

// stdMembers lists the keys and raw values of the object js in order, as
// encoding/json reads them.
func stdMembers(t *testing.T, js string) (keys, vals []string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(js))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for n := 0; dec.More() && n <= len(js); n++ {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		keys, vals = append(keys, k.(string)), append(vals, string(v))
	}
	return keys, vals
}

func checkElements(t *testing.T, js string, root gjson.Result) {
	t.Helper()
	var want []string
	root.ForEach(func(_, v gjson.Result) bool {
		want = append(want, v.Raw)
		return true
	})
	var std []json.RawMessage
	if err := json.Unmarshal([]byte(js), &std); err != nil {
		t.Fatal(err)
	}
	if len(std) != len(want) {
		t.Fatalf("gjson finds %d elements in %s, encoding/json %d", len(want), js, len(std))
	}
	var got []string
	it := NewArrayIter(js)
	for n := 0; n <= len(js); n++ {
		e, ok := it.Next()
		if !ok {
			break
		}
		if i := len(got); i < len(std) && string(std[i]) != e {
			t.Fatalf("element %d of %s: %q, encoding/json has %q", i, js, e, std[i])
		}
		if IsStringRaw(e) {
			checkString(t, e)
		}
		got = append(got, e)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("elements of %s:\n%q\nwant\n%q", js, got, want)
	}
}

// checkString compares the decoding of a valid string literal with
// encoding/json's, which turns invalid UTF-8 into U+FFFD where the text is
// kept as it came.
func checkString(t *testing.T, lit string) {
	t.Helper()
	if !IsStringRaw(lit) || !utf8.ValidString(lit) {
		return
	}
	var want string
	if err := json.Unmarshal([]byte(lit), &want); err != nil {
		t.Fatalf("%s: %v", lit, err)
	}
	if got, _ := StringValue(lit); got != want {
		t.Fatalf("%s decodes to %q, want %q", lit, got, want)
	}
}

// FuzzJSONString checks string decoding: on any text, whole and chunked
// decoding agree and never grow the text; on valid literals they agree with
// encoding/json.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{
		`abc`, `a\"b\\c\/\b\f\n\r\t`, `\u00e9\ud83d\ude00`, `\ud83d`, `\ude00x`, `\ud83d\ud83d\ude00`, `é😀`,
		`a\qb`, `\u12`, `\u12G4`, `ab\`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, inner string) {
		lit := `"` + inner + `"`
		whole := Unquote(inner)
		if len(whole) > len(inner) {
			t.Fatalf("%q decodes to the longer %q", inner, whole)
		}
		if got := unquoteChunked(inner, 2*utf8.UTFMax); got != whole {
			t.Fatalf("%q decodes to %q in chunks, %q whole", inner, got, whole)
		}
		if got := string(AppendDecoded([]byte("x"), lit)); got != "x"+whole {
			t.Fatalf("AppendDecoded(%s) = %q, want %q", lit, got, "x"+whole)
		}
		if !utf8.ValidString(inner) || !gjson.Valid(lit) {
			return
		}
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			return
		}
		if whole != want {
			t.Fatalf("%s decodes to %q, want %q", lit, whole, want)
		}
	})
}
