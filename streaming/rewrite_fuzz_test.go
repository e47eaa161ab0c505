package streaming_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// rewriteSeeds are bodies every rewrite fuzz target starts from, beside
// the request files.
var rewriteSeeds = []string{
	`{}`,
	`{"messages":[]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a]\"}"}]}],"tools":[{"name":"Bash"},{"name":"Read"}],"tool_choice":{"type":"tool","name":"Bash"}}`,
	"{\n \"messages\" : [ {\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"x\"} ] ,\n \"tools\":[ {\"type\":\"function\",\"function\":{\"name\":\"shell\"}} ],\"tool_choice\":\"required\",\"parallel_tool_calls\":true }",
	`{"functions":[{"name":"shell"},{"name":"read"}],"function_call":{"name":"shell"},"messages":[]}`,
	`{"input":"hi \u00e9","tools":[{"type":"namespace","name":"fs","tools":[{"name":"read"},{"name":"write"}]},{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"web_search"}]}}`,
	`{"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"a"}}]}}}`,
	`{"tools":[1,null,{"name":""},{"name":"x"}],"tools":[{"name":"y"}],"messages":[],"messages":[{}]}`,
	`{"stream":true,"stream_options":{"include_usage":false,"include_obfuscation":false}}`,
	`{"stream":true,"stream_options":null}`,
	`{"stream":true,"messages":[]}`,
	`{"messages":[}`, `[]`, ``, `{"a":1} x`,
}

// fuzzKeep rejects a name when a hash of it with seed is odd, so that the
// fuzzer picks which tools go.
func fuzzKeep(seed uint8) func(string) bool {
	return func(name string) bool {
		h := fnv.New32a()
		h.Write([]byte{seed})
		h.Write([]byte(name))
		return h.Sum32()&1 == 0
	}
}

func addRewriteSeeds(f *testing.F, add func(sel uint8, body []byte)) {
	for _, name := range fixturetest.Glob(f, filepath.Join(requestTestdata, "*.json")) {
		body := fixturetest.ReadFile(f, name)
		add(uint8(slices.Index(fuzzAPIs[:], requestFileAPI(f, name))), body)
	}
	for _, s := range rewriteSeeds {
		for i := range fuzzAPIs {
			add(uint8(i), []byte(s))
		}
	}
}

// validObject reports whether body is a JSON object encoding/json accepts.
func validObject(body []byte) bool {
	i := jsonscan.SkipSpace(string(body), 0)
	return json.Valid(body) && i < len(body) && body[i] == '{'
}

// FuzzAppendNotice: AppendNotice never panics, fails exactly on bodies
// that are not JSON objects (ErrInvalidJSON) or have no conversation array
// (ErrNoConversation), and otherwise returns the body with the one notice
// appended and nothing else changed.
func FuzzAppendNotice(f *testing.F) {
	addRewriteSeeds(f, func(sel uint8, body []byte) { f.Add(sel, body, "Budget: 80% used.") })
	f.Add(uint8(2), []byte(`{"input":"x"}`), "\x00\xff\u2028\"\\")
	f.Fuzz(func(t *testing.T, sel uint8, body []byte, text string) {
		api := fuzzAPIs[int(sel)%len(fuzzAPIs)]
		work := bytes.Clone(body)
		out, err := dialects[api].AppendNotice(work, text)
		if !bytes.Equal(work, body) {
			t.Fatal("AppendNotice modified the body")
		}
		if !validObject(body) {
			if !errors.Is(err, streaming.ErrInvalidJSON) {
				t.Fatalf("AppendNotice on an invalid body = %v", err)
			}
			return
		}
		conv := lastMemberResult(body, apis[api].conversation)
		hasConv := conv.IsArray() || apis[api].stringConversation && conv.Type == gjson.String
		if !hasConv {
			if !errors.Is(err, streaming.ErrNoConversation) {
				t.Fatalf("AppendNotice without a conversation = %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		checkNoticeAppended(t, api, body, out, text)
	})
}

// FuzzRestrictTools: RestrictTools never panics, fails exactly on bodies
// that are not JSON objects, and otherwise leaves exactly the tools keep
// accepts, byte for byte, and nothing else changed.
func FuzzRestrictTools(f *testing.F) {
	addRewriteSeeds(f, func(sel uint8, body []byte) {
		f.Add(sel, body, uint8(0))
		f.Add(sel, body, uint8(1))
	})
	f.Fuzz(func(t *testing.T, sel uint8, body []byte, seed uint8) {
		api := fuzzAPIs[int(sel)%len(fuzzAPIs)]
		keep := fuzzKeep(seed)
		work := bytes.Clone(body)
		out, removed, err := dialects[api].RestrictTools(work, keep)
		if !bytes.Equal(work, body) {
			t.Fatal("RestrictTools modified the body")
		}
		if !validObject(body) {
			if !errors.Is(err, streaming.ErrInvalidJSON) {
				t.Fatalf("RestrictTools on an invalid body = %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) == 0 {
			if !sameSlice(out, work) {
				t.Fatal("a body with nothing to remove was copied")
			}
			return
		}
		checkRestricted(t, api, body, out, removed, keep)
	})
}

// FuzzEnsureIncludeUsage: EnsureIncludeUsage never panics, fails exactly on
// bodies that are not JSON objects, and leaves include_usage true on every
// streamed request whose stream_options is absent, null or an object.
func FuzzEnsureIncludeUsage(f *testing.F) {
	addRewriteSeeds(f, func(_ uint8, body []byte) { f.Add(body) })
	f.Fuzz(func(t *testing.T, body []byte) {
		work := bytes.Clone(body)
		out, added, err := streaming.EnsureIncludeUsage(work)
		if !bytes.Equal(work, body) {
			t.Fatal("EnsureIncludeUsage modified the body")
		}
		if !validObject(body) {
			if !errors.Is(err, streaming.ErrInvalidJSON) {
				t.Fatalf("EnsureIncludeUsage on an invalid body = %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON:\n%s", out)
		}
		opts := lastMemberResult(body, "stream_options")
		streamed := lastMemberResult(body, "stream").Type == gjson.True
		wantAdded := streamed && (!opts.Exists() || opts.Type == gjson.Null || opts.IsObject() && !allIncludeUsageTrue(opts))
		if added != wantAdded {
			t.Fatalf("added = %v, want %v", added, wantAdded)
		}
		if !added {
			if !sameSlice(out, work) {
				t.Fatal("an unchanged body was copied")
			}
			return
		}
		checkIncludeUsage(t, body, out)
	})
}

// allIncludeUsageTrue reports whether opts has include_usage members, all
// true.
func allIncludeUsageTrue(opts gjson.Result) bool {
	found, all := false, true
	opts.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "include_usage" {
			found = true
			all = all && v.Type == gjson.True
		}
		return true
	})
	return found && all
}

// FuzzStripUsage: StripUsage never panics on any event the Reader hands
// out; it drops exactly the usage-only chunks, leaves alone the events
// without a top-level usage member, and otherwise returns one event with
// the same fields whose data is the original's less its usage members.
func FuzzStripUsage(f *testing.F) {
	for _, s := range []string{
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n\n",
		"event: chunk\r\nid: 7\r\ndata:{\"usage\":null,\"x\":1}\r\n: c\r\n\r\n",
		"\xEF\xBB\xBFdata: {\"usage\":null}\r\rdata: {\"error\":{},\"usage\":{}}\n\n",
		"data: {\"choices\":[{}],\ndata: \"usage\":null}\nid: 1\n\n",
		"data:  { \"us\\u0061ge\" : null , \"a\" : [ ] }",
		": keepalive\n\nevent: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n",
		"data: {\"usage\":null,\"choices\":}\n\n",
		"data: {\"usage\":1,\"usage\":null,\"choices\":[ ]}\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := sse.NewReader(1 << 16)
		n := 0
		each := func(ev *sse.Event) error {
			if n++; n > 64 {
				return errStopFuzz
			}
			// Only the stream's first block may start with a byte order
			// mark; on a later one the Reader reads it as part of a field
			// name, which StripUsage cannot tell.
			if n == 1 || !bytes.HasPrefix(ev.Raw, []byte("\xEF\xBB\xBF")) {
				checkStripped(t, ev)
			}
			return nil
		}
		if err := r.Feed(stream, each); err != nil {
			return
		}
		_ = r.Finish(each)
	})
}

var errStopFuzz = errors.New("enough events")

// checkStripped checks StripUsage on one event.
func checkStripped(t *testing.T, ev *sse.Event) {
	t.Helper()
	raw := bytes.Clone(ev.Raw)
	data := bytes.TrimSpace(ev.Data)
	out, drop := streaming.StripUsage(raw)
	if !bytes.Equal(raw, ev.Raw) {
		t.Fatal("StripUsage modified the event")
	}
	var usage, choices gjson.Result
	hasError := false
	if validObject(data) {
		usage, choices = lastMemberResult(data, "usage"), lastMemberResult(data, "choices")
		hasError = lastMemberResult(data, "error").Exists()
	}
	usageOnly := usage.Exists() && usage.Type != gjson.Null && !hasError &&
		(!choices.Exists() || choices.IsArray() && len(choices.Array()) == 0)
	switch {
	case drop != usageOnly:
		t.Fatalf("StripUsage(%q) drop = %v", ev.Raw, drop)
	case drop:
		if out != nil {
			t.Fatalf("dropped, yet returned %q", out)
		}
		return
	case !usage.Exists():
		if !sameSlice(out, raw) {
			t.Fatalf("%q changed to %q without a usage member", ev.Raw, out)
		}
		return
	case sameSlice(out, raw):
		t.Fatalf("usage left in %q", ev.Raw)
	}
	var got []sse.Event
	collect := func(e *sse.Event) error {
		c := *e
		c.Data, c.Name = bytes.Clone(e.Data), bytes.Clone(e.Name)
		got = append(got, c)
		return nil
	}
	if sse.Each(out, collect) != nil || len(got) != 1 {
		t.Fatalf("%q stripped to %q: %d events", ev.Raw, out, len(got))
	}
	e := got[0]
	if !bytes.Equal(e.Name, ev.Name) || e.Retry != ev.Retry || e.Comments != ev.Comments || e.Unterminated != ev.Unterminated {
		t.Fatalf("fields changed: %q stripped to %q", ev.Raw, out)
	}
	if !json.Valid(e.Data) || lastMemberResult(e.Data, "usage").Exists() {
		t.Fatalf("%q stripped to %q", ev.Raw, out)
	}
	var before, after map[string]any
	decodeJSON(t, data, &before)
	decodeJSON(t, e.Data, &after)
	delete(before, "usage")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("members changed: %q stripped to %q", ev.Raw, out)
	}
}
