package streaming

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// fuzzMaxEvent keeps the Reader's buffer small so that a run shows memory
// staying bounded by the input, not by what the input claims.
const fuzzMaxEvent = 1 << 16

// addAnthropicSeeds adds every testdata stream as a seed.
func addAnthropicSeeds(f *testing.F, add func(data []byte)) {
	files, err := filepath.Glob(filepath.Join(anthropicTestdata, "*.sse"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no testdata streams: %v", err)
	}
	for _, file := range files {
		add(readTestdata(f, filepath.Base(file)))
	}
}

// fuzzDecode runs data through a Reader and the decoder in the given cuts.
// ok is false when the Reader refused an oversized event.
func fuzzDecode(data []byte, cuts []int) (res *Result, parts []Part, ok bool) {
	dec := newAnthropicDecoder()
	emit := func(p *Part) { parts = append(parts, clonePart(p)) }
	fn := func(ev *Event) error {
		dec.Decode(ev, emit)
		return nil
	}
	r := NewReader(fuzzMaxEvent)
	prev := 0
	for i := 0; i <= len(cuts); i++ {
		end := len(data)
		if i < len(cuts) {
			end = cuts[i]
		}
		if err := r.Feed(data[prev:end], fn); err != nil {
			return nil, nil, false
		}
		if r.Buffered() > fuzzMaxEvent {
			panic("reader holds more than its limit")
		}
		prev = end
	}
	if err := r.Finish(fn); err != nil {
		return nil, nil, false
	}
	return dec.Finish(), parts, true
}

func FuzzAnthropic(f *testing.F) {
	addAnthropicSeeds(f, func(data []byte) { f.Add(data, uint64(1)) })
	f.Add([]byte("event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"x\",\"message\":\"\\ud800\"}}\r\r"), uint64(2))
	f.Add([]byte("\xEF\xBB\xBFdata: {\"type\":\"content_block_start\",\"index\":9e9,\"content_block\":{\"type\":\"x_tool_use\",\"id\":\"i\",\"name\":\"n\",\"input\":{\"a\":[1]}}}\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		res, parts, ok := fuzzDecode(data, nil)
		if !ok {
			return
		}
		checkAnthropicInvariants(t, data, res)

		rng := rand.New(rand.NewPCG(seed, uint64(len(data))))
		var cuts []int
		for c := rng.IntN(16) + 1; c < len(data); c += rng.IntN(16) + 1 {
			cuts = append(cuts, c)
		}
		res2, parts2, ok := fuzzDecode(data, cuts)
		if !ok {
			t.Fatal("the reader refused the chunked stream but not the whole one")
		}
		if !reflect.DeepEqual(res, res2) {
			t.Fatalf("result depends on chunking:\n%+v\n%+v", res, res2)
		}
		if !reflect.DeepEqual(parts, parts2) {
			t.Fatal("parts depend on chunking")
		}
	})
}

func checkAnthropicInvariants(t *testing.T, data []byte, res *Result) {
	t.Helper()
	if res.API != APIAnthropic {
		t.Fatalf("api %q", res.API)
	}
	if res.Truncated && (res.Done || len(res.Errors) > 0) {
		t.Fatalf("truncated with done %v and %d errors", res.Done, len(res.Errors))
	}
	if len(res.Stops) > 1 {
		t.Fatalf("%d stops for a single-choice API", len(res.Stops))
	}
	if len(res.UnparsedErrors) > maxUnparsedErrors || len(res.UnparsedErrors) > res.Unparsed {
		t.Fatalf("%d unparsed errors kept for %d", len(res.UnparsedErrors), res.Unparsed)
	}
	// Decoding never grows text, so what is kept is bounded by the input.
	if res.OutputBytes > int64(len(data)) {
		t.Fatalf("output bytes %d from %d input bytes", res.OutputBytes, len(data))
	}
	kept := 0
	for _, tc := range res.ToolCalls {
		if tc.Complete && len(tc.Arguments) == 0 {
			t.Fatalf("complete call %q without arguments", tc.ID)
		}
		kept += len(tc.Arguments)
	}
	if kept > len(data)+2*len(res.ToolCalls) {
		t.Fatalf("%d argument bytes kept from %d input bytes", kept, len(data))
	}
}

func FuzzAnthropicJSON(f *testing.F) {
	f.Add([]byte(`{"id":"msg_1","type":"message","model":"m","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"n","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}`))
	f.Add([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add([]byte(`{"content":[{"type":"mcp_tool_use","id":"x","name":"y"}],"stop_reason":null}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"type":"message","content":`))
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := decodeAnthropicJSON(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) || res != nil {
				t.Fatalf("error %v with result %+v", err, res)
			}
			return
		}
		if !gjson.ValidBytes(body) {
			t.Fatal("accepted a body that is not JSON")
		}
		if res.API != APIAnthropic || res.Truncated || res.Done == (len(res.Errors) > 0) {
			t.Fatalf("api %q truncated %v done %v errors %d", res.API, res.Truncated, res.Done, len(res.Errors))
		}
		for _, tc := range res.ToolCalls {
			if !tc.Complete || !gjson.ValidBytes(tc.Arguments) {
				t.Fatalf("call %+v", tc)
			}
		}
	})
}

// FuzzAnthropicString checks the in-place string decoding against
// encoding/json.
func FuzzAnthropicString(f *testing.F) {
	for _, s := range []string{`abc`, `a\"b\\c\/\b\f\n\r\t`, `\u00e9\ud83d\ude00`, `\ud83d`, `\ude00x`, `\ud83d\ud83d\ude00`, `é😀`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, inner string) {
		lit := `"` + inner + `"`
		if !utf8.ValidString(inner) || !gjson.Valid(lit) {
			return
		}
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			return
		}
		if got := string(appendJSONString(nil, lit)); got != want {
			t.Fatalf("%s decodes to %q, want %q", lit, got, want)
		}
	})
}

// FuzzAnthropicMembers checks the one-pass object walk against gjson's.
func FuzzAnthropicMembers(f *testing.F) {
	f.Add(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"}"}   }`)
	f.Add(`{ "a" : [1, {"b": "]"}], "c\u0041" : null , "d":-1.5e3,"e":{}}`)
	f.Add(`{"k\\":"v\\\\","":true}`)
	f.Add(`[1]`)
	f.Fuzz(func(t *testing.T, js string) {
		// gjson drops the escape after a lone surrogate; encoding/json and
		// appendJSONString keep it, so such keys may differ by design.
		if !gjson.Valid(js) || strings.Contains(strings.ToLower(js), `\ud`) {
			return
		}
		type kv struct {
			Key, Val string
			Off      int
		}
		var want []kv
		root := gjson.Parse(js)
		if root.IsObject() {
			root.ForEach(func(k, v gjson.Result) bool {
				want = append(want, kv{k.Str, v.Raw, v.Index})
				return true
			})
		}
		var got []kv
		for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
			got = append(got, kv{m.key, m.val, m.off})
			if len(got) > len(js) {
				t.Fatal("walk does not end")
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("members of %s:\n%+v\nwant\n%+v", js, got, want)
		}
	})
}
