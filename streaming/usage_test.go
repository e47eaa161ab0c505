package streaming_test

import (
	"bytes"
	"errors"
	"reflect"
	"sort"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

func TestEnsureIncludeUsage(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // "" when the body must come back as is, not added
	}{
		{
			name: "absent",
			body: `{"model":"m","messages":[],"stream":true}`,
			want: `{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`,
		},
		{
			name: "absent, pretty-printed",
			body: "{\n  \"messages\": [],\n  \"stream\": true\n}\n",
			want: "{\n  \"messages\": [],\n  \"stream\": true,\"stream_options\":{\"include_usage\":true}\n}\n",
		},
		{
			name: "false",
			body: `{"stream":true,"stream_options":{"include_usage":false},"messages":[]}`,
			want: `{"stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
		},
		{
			name: "null",
			body: `{"stream":true,"stream_options":{"include_usage":null}}`,
			want: `{"stream":true,"stream_options":{"include_usage":true}}`,
		},
		{
			name: "stream_options with other members",
			body: `{"stream_options":{"include_obfuscation":false},"stream":true,"messages":[]}`,
			want: `{"stream_options":{"include_obfuscation":false,"include_usage":true},"stream":true,"messages":[]}`,
		},
		{
			name: "empty stream_options",
			body: `{"stream":true,"stream_options":{ }}`,
			want: `{"stream":true,"stream_options":{"include_usage":true }}`,
		},
		{
			name: "stream_options null",
			body: `{"stream":true,"stream_options":null,"n":2}`,
			want: `{"stream":true,"stream_options":{"include_usage":true},"n":2}`,
		},
		{
			name: "duplicate include_usage",
			body: `{"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`,
			want: `{"stream":true,"stream_options":{"include_usage":true,"include_usage":true}}`,
		},
		{name: "already true", body: `{"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "stream false", body: `{"stream":false,"messages":[]}`},
		{name: "stream absent", body: `{"messages":[],"stream_options":{"include_usage":false}}`},
		{name: "stream a string", body: `{"stream":"true"}`},
		{name: "last stream member counts", body: `{"stream":true,"stream":false}`},
		{name: "stream_options not an object", body: `{"stream":true,"stream_options":5}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			out, added, err := streaming.EnsureIncludeUsage(body)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.body {
				t.Fatal("EnsureIncludeUsage modified the body")
			}
			if tc.want == "" {
				if added || !sameSlice(out, body) {
					t.Fatalf("EnsureIncludeUsage = %s, %v; want the body as is", out, added)
				}
				return
			}
			if !added || string(out) != tc.want {
				t.Fatalf("EnsureIncludeUsage = %s, %v\nwant %s", out, added, tc.want)
			}
			checkIncludeUsage(t, body, out)
		})
	}
}

// checkIncludeUsage checks an output of EnsureIncludeUsage that added
// include_usage: ParseRequest reads it as asked, and every member but
// stream_options is the body's.
func checkIncludeUsage(t *testing.T, body, out []byte) {
	t.Helper()
	req, err := dialects[streaming.APIChat].ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	if !req.IncludeUsage || !req.Stream {
		t.Errorf("ParseRequest(output) = %+v", req)
	}
	opts := lastMemberResult(out, "stream_options")
	opts.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "include_usage" && v.Type != gjson.True {
			t.Errorf("include_usage %s left in %s", v.Raw, opts.Raw)
		}
		return true
	})
	var got, want map[string]any
	decodeJSON(t, out, &got)
	decodeJSON(t, body, &want)
	delete(got, "stream_options")
	delete(want, "stream_options")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("members other than stream_options changed:\n got %v\nwant %v", got, want)
	}
}

func TestEnsureIncludeUsageErrors(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"stream":true`, `{"stream":tru}`, `"x"`} {
		out, added, err := streaming.EnsureIncludeUsage([]byte(body))
		if !errors.Is(err, streaming.ErrInvalidJSON) || out != nil || added {
			t.Errorf("EnsureIncludeUsage(%q) = %q, %v, %v", body, out, added, err)
		}
	}
}

func TestStripUsage(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		want     string // "" when the event must come back as is
		wantDrop bool
	}{
		{
			name: "usage null last",
			raw:  "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\n\n",
			want: "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
		},
		{
			name: "usage null first",
			raw:  "data: {\"usage\":null,\"id\":\"c\",\"choices\":[]}\n\n",
			want: "data: {\"id\":\"c\",\"choices\":[]}\n\n",
		},
		{
			name: "usage null between members, with spaces",
			raw:  "data:  { \"a\" : 1 , \"usage\" : null , \"b\" : [ ] }\n\n",
			want: "data:  { \"a\" : 1 , \"b\" : [ ] }\n\n",
		},
		{
			name:     "usage-only chunk",
			raw:      "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n",
			wantDrop: true,
		},
		{
			name:     "usage-only chunk without choices",
			raw:      "data: {\"id\":\"c\",\"usage\":{\"prompt_tokens\":9}}\n\n",
			wantDrop: true,
		},
		{
			name: "usage on the finish chunk",
			raw:  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":17,\"completion_tokens\":47}}\n\n",
			want: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n",
		},
		{
			name: "an error is never dropped",
			raw:  "data: {\"error\":{\"code\":400,\"message\":\"Token limit reached\"},\"choices\":[],\"usage\":{\"prompt_tokens\":43}}\n\n",
			want: "data: {\"error\":{\"code\":400,\"message\":\"Token limit reached\"},\"choices\":[]}\n\n",
		},
		{
			name: "every usage member goes",
			raw:  "data: {\"usage\":null,\"choices\":[{\"index\":0}],\"usage\":null}\n\n",
			want: "data: {\"choices\":[{\"index\":0}]}\n\n",
		},
		{
			name: "escaped usage key",
			raw:  "data: {\"choices\":[{}],\"us\\u0061ge\":null}\n\n",
			want: "data: {\"choices\":[{}]}\n\n",
		},
		{
			name: "other fields and CRLF",
			raw:  "event: chunk\r\nid: 7\r\ndata:{\"choices\":[{}],\"x\":1,\"usage\":null}\r\n: note\r\n\r\n",
			want: "event: chunk\r\nid: 7\r\ndata:{\"choices\":[{}],\"x\":1}\r\n: note\r\n\r\n",
		},
		{
			name: "lone CR line endings",
			raw:  "data: {\"choices\":[{}],\"usage\":null}\r\r",
			want: "data: {\"choices\":[{}]}\r\r",
		},
		{
			name: "byte order mark",
			raw:  "\xEF\xBB\xBFdata: {\"usage\":null,\"choices\":[{}]}\n\n",
			want: "\xEF\xBB\xBFdata: {\"choices\":[{}]}\n\n",
		},
		{
			name: "unterminated event",
			raw:  "data: {\"choices\":[{}],\"usage\":null}",
			want: "data: {\"choices\":[{}]}",
		},
		{
			name: "data over several lines",
			raw:  "data: {\"choices\":[{}],\ndata: \"usage\":null}\nid: 1\n\n",
			want: "data: {\"choices\":[{}]}\nid: 1\n\n",
		},
		{
			name:     "usage-only chunk over several lines",
			raw:      "data: {\"choices\":[],\ndata:\"usage\":{\"total_tokens\":3}}\n\n",
			wantDrop: true,
		},
		{name: "no usage member", raw: "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"usage\"}}]}\n\n"},
		{name: "usage inside a choice", raw: "data: {\"choices\":[{\"index\":0,\"usage\":null}]}\n\n"},
		{name: "done marker", raw: "data: [DONE]\n\n"},
		{name: "comment", raw: ": OPENROUTER PROCESSING\n\n"},
		{name: "no data field", raw: "event: ping\nid: 3\n\n"},
		{name: "invalid JSON with usage", raw: "data: {\"usage\":null,\"choices\":}\n\n"},
		{name: "data not an object", raw: "data: [{\"usage\":null}]\n\n"},
		{name: "empty", raw: ""},
		{name: "field named like data", raw: "datum: {\"usage\":null}\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(tc.raw)
			out, drop := streaming.StripUsage(raw)
			if string(raw) != tc.raw {
				t.Fatal("StripUsage modified the event")
			}
			switch {
			case tc.wantDrop:
				if !drop || out != nil {
					t.Fatalf("StripUsage = %q, %v; want a drop", out, drop)
				}
			case tc.want == "":
				if drop || !sameSlice(out, raw) {
					t.Fatalf("StripUsage = %q, %v; want the event as is", out, drop)
				}
			default:
				if drop || string(out) != tc.want {
					t.Fatalf("StripUsage = %q, %v\nwant %q", out, drop, tc.want)
				}
			}
		})
	}
}

// TestStripUsageAllocs: the events of a stream that carry no usage member
// cost no allocation.
func TestStripUsageAllocs(t *testing.T) {
	for _, raw := range []string{
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
		"data: [DONE]\n\n",
		": keepalive\n\n",
		"event: error\r\ndata: {\"error\":{\"message\":\"x\"}}\r\n\r\n",
	} {
		ev := []byte(raw)
		if n := testing.AllocsPerRun(100, func() { streaming.StripUsage(ev) }); n != 0 {
			t.Errorf("StripUsage(%q): %v allocations", raw, n)
		}
	}
}

// TestStripUsageFixtures runs StripUsage over every event of the recorded
// Chat streams: the stripped stream decodes to the same stops, tool calls
// and errors, with no usage left anywhere.
func TestStripUsageFixtures(t *testing.T) {
	all := loadExpected(t)
	var names []string
	for name, e := range all {
		if e.API == "chat" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Fatalf("only %d chat fixtures in EXPECTED.json", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			stream := fixturetest.Read(t, name)
			var stripped []byte
			var chunks, usageNull, changed, dropped int
			each := func(ev *sse.Event) error {
				if ev.HasData && gjson.ValidBytes(ev.Data) && gjson.GetBytes(ev.Data, "choices.#").Int() > 0 {
					chunks++
					if u := gjson.GetBytes(ev.Data, "usage"); u.Exists() && u.Type == gjson.Null {
						usageNull++
					}
				}
				out, drop := streaming.StripUsage(ev.Raw)
				switch {
				case drop:
					dropped++
				case !sameSlice(out, ev.Raw):
					changed++
				}
				stripped = append(stripped, out...)
				return nil
			}
			r := sse.NewReader(0)
			if err := r.Feed(stream, each); err != nil {
				t.Fatal(err)
			}
			if err := r.Finish(each); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d chunks with choices, %d of them with \"usage\":null; %d events stripped, %d dropped",
				chunks, usageNull, changed, dropped)

			want, _ := mustDecode(t, streaming.APIChat, stream)
			got, _ := mustDecode(t, streaming.APIChat, stripped)
			if got.UsageSeen {
				t.Errorf("usage seen after stripping: %+v", got.Usage)
			}
			if !reflect.DeepEqual(got.Stops, want.Stops) {
				t.Errorf("Stops = %+v, want %+v", got.Stops, want.Stops)
			}
			if !reflect.DeepEqual(got.ToolCalls, want.ToolCalls) {
				t.Errorf("ToolCalls = %s, want %s", streamtest.FormatCalls(got.ToolCalls), streamtest.FormatCalls(want.ToolCalls))
			}
			if !reflect.DeepEqual(got.Errors, want.Errors) || got.Done != want.Done || got.Truncated != want.Truncated ||
				got.Unparsed != want.Unparsed || got.MessageID != want.MessageID || got.OutputBytes != want.OutputBytes {
				t.Errorf("result changed:\n got %+v\nwant %+v", got, want)
			}
			if want.UsageSeen && changed+dropped == 0 {
				t.Error("usage was reported, yet no event changed")
			}
			checkNoUsageLeft(t, stripped)
		})
	}
}

// checkNoUsageLeft fails when an event of stream still has a top-level
// usage member.
func checkNoUsageLeft(t *testing.T, stream []byte) {
	t.Helper()
	check := func(ev *sse.Event) error {
		if ev.HasData && gjson.GetBytes(bytes.TrimSpace(ev.Data), "usage").Exists() {
			t.Errorf("usage left in %q", ev.Raw)
		}
		return nil
	}
	if err := sse.Each(stream, check); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkStripUsage(b *testing.B) {
	for _, bc := range []struct {
		name string
		raw  string
	}{
		{"no-usage", `data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"src/main.go\"}"}}]},"logprobs":null,"finish_reason":null}]}` + "\n\n"},
		{"usage-null", `data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"src/main.go\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"},
		{"usage-only", `data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":149,"completion_tokens":60,"total_tokens":209}}` + "\n\n"},
		{"done", "data: [DONE]\n\n"},
	} {
		raw := []byte(bc.raw)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				streaming.StripUsage(raw)
			}
		})
	}
}

func BenchmarkEnsureIncludeUsage(b *testing.B) {
	body := benchBody(streaming.APIChat, 200<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, added, err := streaming.EnsureIncludeUsage(body); err != nil || !added {
			b.Fatal(added, err)
		}
	}
}
