package streaming_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// The conversation items AppendNotice adds, as the tests expect them.
const (
	noticeAnthropic = `{"role":"user","content":[{"type":"text","text":"Budget: 80% used."}]}`
	noticeChat      = `{"role":"user","content":"Budget: 80% used."}`
	noticeResponses = `{"type":"message","role":"user","content":[{"type":"input_text","text":"Budget: 80% used."}]}`
	noticeText      = "Budget: 80% used."
)

func TestAppendNotice(t *testing.T) {
	tests := []struct {
		name    string
		api     streaming.API
		body    string
		text    string // noticeText when empty
		want    string
		wantErr error
	}{
		{
			name: "anthropic compact",
			api:  streaming.APIAnthropic,
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"},` + noticeAnthropic + `],"max_tokens":5}`,
		},
		{
			name: "anthropic pretty-printed",
			api:  streaming.APIAnthropic,
			body: "{\n  \"system\": \"s\",\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"}\n  ]\n}\n",
			want: "{\n  \"system\": \"s\",\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"}," + noticeAnthropic + "\n  ]\n}\n",
		},
		{
			name: "anthropic after tool results, nested arrays and escapes",
			api:  streaming.APIAnthropic,
			body: `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"cmd":["ls","]}\"["]}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"caf\u00e9 \"]\" \\"}]}]}]}`,
			want: `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"cmd":["ls","]}\"["]}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"caf\u00e9 \"]\" \\"}]}]},` + noticeAnthropic + `]}`,
		},
		{
			name: "anthropic empty conversation",
			api:  streaming.APIAnthropic,
			body: `{"messages":[]}`,
			want: `{"messages":[` + noticeAnthropic + `]}`,
		},
		{
			name: "anthropic empty conversation with whitespace",
			api:  streaming.APIAnthropic,
			body: `{"messages":[ ]}`,
			want: `{"messages":[` + noticeAnthropic + ` ]}`,
		},
		{
			name: "anthropic text with escapes",
			api:  streaming.APIAnthropic,
			body: `{"messages":[]}`,
			text: "quote \" backslash \\ newline \n tab \t ctrl \x01 <&> caf\u00e9 \U0001F600 \u2028 bad \xff",
			want: `{"messages":[{"role":"user","content":[{"type":"text","text":"quote \" backslash \\ newline \n tab \t ctrl \u0001 <&> café 😀 \u2028 bad \ufffd"}]}]}`,
		},
		{
			name: "anthropic last of duplicate messages",
			api:  streaming.APIAnthropic,
			body: `{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`,
			want: `{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"},` + noticeAnthropic + `]}`,
		},
		{
			name: "chat after tool message",
			api:  streaming.APIChat,
			body: `{"messages":[{"role":"system","content":"s"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"stream":true}`,
			want: `{"messages":[{"role":"system","content":"s"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"},` + noticeChat + `],"stream":true}`,
		},
		{
			name: "chat pretty-printed with CRLF",
			api:  streaming.APIChat,
			body: "{\r\n\t\"messages\" : [\r\n\t\t{ \"role\" : \"user\", \"content\" : \"\u65e5\u672c\" }\r\n\t] \r\n}",
			want: "{\r\n\t\"messages\" : [\r\n\t\t{ \"role\" : \"user\", \"content\" : \"\u65e5\u672c\" }," + noticeChat + "\r\n\t] \r\n}",
		},
		{
			name: "responses input array",
			api:  streaming.APIResponses,
			body: `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"[1]"}],"tools":[]}`,
			want: `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"[1]"},` + noticeResponses + `],"tools":[]}`,
		},
		{
			name: "responses input string",
			api:  streaming.APIResponses,
			body: `{"model":"m","input":"Write \"hi\"\n\u00e9","stream":true}`,
			want: `{"model":"m","input":[{"role":"user","content":"Write \"hi\"\n\u00e9"},` + noticeResponses + `],"stream":true}`,
		},
		{
			name: "responses empty input",
			api:  streaming.APIResponses,
			body: `{"input":[],"previous_response_id":"resp_1"}`,
			want: `{"input":[` + noticeResponses + `],"previous_response_id":"resp_1"}`,
		},
		{name: "invalid JSON", api: streaming.APIAnthropic, body: `{"messages":[}`, wantErr: streaming.ErrInvalidJSON},
		{name: "not an object", api: streaming.APIChat, body: `[{"messages":[]}]`, wantErr: streaming.ErrInvalidJSON},
		{name: "trailing garbage", api: streaming.APIChat, body: `{"messages":[]} x`, wantErr: streaming.ErrInvalidJSON},
		{name: "no messages", api: streaming.APIAnthropic, body: `{"model":"m"}`, wantErr: streaming.ErrNoConversation},
		{name: "messages null", api: streaming.APIChat, body: `{"messages":null}`, wantErr: streaming.ErrNoConversation},
		{name: "anthropic messages string", api: streaming.APIAnthropic, body: `{"messages":"hi"}`, wantErr: streaming.ErrNoConversation},
		{name: "chat body with input only", api: streaming.APIChat, body: `{"input":[]}`, wantErr: streaming.ErrNoConversation},
		{name: "responses input object", api: streaming.APIResponses, body: `{"input":{"role":"user"}}`, wantErr: streaming.ErrNoConversation},
		{name: "responses messages only", api: streaming.APIResponses, body: `{"messages":[]}`, wantErr: streaming.ErrNoConversation},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.text
			if text == "" {
				text = noticeText
			}
			body := []byte(tc.body)
			out, err := dialects[tc.api].AppendNotice(body, text)
			if string(body) != tc.body {
				t.Fatal("AppendNotice modified the body")
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || out != nil {
					t.Fatalf("AppendNotice = %q, %v; want error %v", out, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("AppendNotice =\n%s\nwant\n%s", out, tc.want)
			}
			checkNoticeAppended(t, tc.api, body, out, text)
		})
	}
}

// checkNoticeAppended checks out against body: valid JSON; decoded, it
// is body with the notice as the conversation's last item and nothing else
// changed; and its bytes are body's with one insertion (an input string is
// replaced by the array that holds it).
func checkNoticeAppended(t *testing.T, api streaming.API, body, out []byte, text string) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON:\n%s", out)
	}
	key := apis[api].conversation
	var got, want map[string]any
	decodeJSON(t, out, &got)
	decodeJSON(t, body, &want)
	var decoded string // the text as JSON carries it (invalid UTF-8 replaced)
	b, _ := json.Marshal(text)
	decodeJSON(t, b, &decoded)
	notice := apis[api].notice(decoded)
	conv := want[key]
	if s, ok := conv.(string); ok {
		conv = []any{map[string]any{"role": "user", "content": s}}
	}
	want[key] = append(slices.Clone(conv.([]any)), notice)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded output differs from the body plus the notice:\n got %v\nwant %v", got, want)
	}

	p, q := commonEnds(body, out)
	switch removedBytes := body[p : len(body)-q]; {
	case len(removedBytes) == 0:
	case apis[api].stringConversation && gjson.ParseBytes(removedBytes).Type == gjson.String:
	default:
		t.Fatalf("output is not body with one insertion: %q of the body went", removedBytes)
	}
}

// commonEnds returns the lengths of the longest common prefix of a and b
// and of the longest common suffix of what follows it.
func commonEnds(a, b []byte) (prefix, suffix int) {
	n := min(len(a), len(b))
	for prefix < n && a[prefix] == b[prefix] {
		prefix++
	}
	for suffix < n-prefix && a[len(a)-1-suffix] == b[len(b)-1-suffix] {
		suffix++
	}
	return prefix, suffix
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decode %.200q: %v", b, err)
	}
}

// TestAppendNoticeRequests appends to the recorded-shape request bodies:
// what ParseRequest reads of them is unchanged but for the fingerprint of a
// conversation that had no user message (the notice becomes its first).
func TestAppendNoticeRequests(t *testing.T) {
	for _, name := range fixturetest.Glob(t, filepath.Join(requestTestdata, "*.json")) {
		api := requestFileAPI(t, name)
		t.Run(filepath.Base(name), func(t *testing.T) {
			body := fixturetest.ReadFile(t, name)
			out, err := dialects[api].AppendNotice(body, "Budget: 92% of the dollar ceiling used; finish the task now.")
			if err != nil {
				t.Fatal(err)
			}
			checkNoticeAppended(t, api, body, out, "Budget: 92% of the dollar ceiling used; finish the task now.")
			before, err := dialects[api].ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			after, err := dialects[api].ParseRequest(out)
			if err != nil {
				t.Fatal(err)
			}
			if !hasUserMessage(api, body) {
				after.Fingerprint = before.Fingerprint
			}
			if !reflect.DeepEqual(before, after) {
				t.Errorf("ParseRequest changed:\n%+v\n%+v", before, after)
			}
		})
	}
}

func hasUserMessage(api streaming.API, body []byte) bool {
	conv := gjson.GetBytes(body, apis[api].conversation)
	return apis[api].stringConversation && conv.Type == gjson.String || conv.Get(`#(role=="user")`).Exists()
}

// rejecting returns a keep function that rejects the names given.
func rejecting(names ...string) func(string) bool {
	return func(name string) bool { return !slices.Contains(names, name) }
}

func TestRestrictTools(t *testing.T) {
	tests := []struct {
		name        string
		api         streaming.API
		body        string
		keep        func(string) bool
		want        string // "" when the body must come back as is
		wantRemoved []string
	}{
		{
			name:        "anthropic middle tool",
			api:         streaming.APIAnthropic,
			body:        `{"messages":[],"tools":[{"name":"Read"},{"name":"Bash"},{"name":"Grep"}],"stream":true}`,
			keep:        rejecting("Bash"),
			want:        `{"messages":[],"tools":[{"name":"Read"},{"name":"Grep"}],"stream":true}`,
			wantRemoved: []string{"Bash"},
		},
		{
			name:        "anthropic first and last tools, pretty-printed",
			api:         streaming.APIAnthropic,
			body:        "{\n \"tools\": [\n  {\"name\": \"Bash\"},\n  {\"name\": \"Read\", \"input_schema\": {\"type\": \"object\"}},\n  {\"name\": \"Write\"}\n ],\n \"model\": \"m\"\n}",
			keep:        rejecting("Bash", "Write"),
			want:        "{\n \"tools\": [\n  {\"name\": \"Read\", \"input_schema\": {\"type\": \"object\"}}\n ],\n \"model\": \"m\"\n}",
			wantRemoved: []string{"Bash", "Write"},
		},
		{
			name:        "anthropic server tool by name",
			api:         streaming.APIAnthropic,
			body:        `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5},{"name":"Read","description":"caf\u00e9 \"x\""}]}`,
			keep:        rejecting("web_search"),
			want:        `{"tools":[{"name":"Read","description":"caf\u00e9 \"x\""}]}`,
			wantRemoved: []string{"web_search"},
		},
		{
			name:        "anthropic tool_choice naming a removed tool",
			api:         streaming.APIAnthropic,
			body:        `{"tools":[{"name":"Read"},{"name":"Bash"}],"tool_choice":{"type":"tool","name":"Bash"},"stream":true}`,
			keep:        rejecting("Bash"),
			want:        `{"tools":[{"name":"Read"}],"stream":true}`,
			wantRemoved: []string{"Bash"},
		},
		{
			name:        "anthropic tool_choice naming a kept tool",
			api:         streaming.APIAnthropic,
			body:        `{"tools":[{"name":"Read"},{"name":"Bash"}],"tool_choice":{"type":"tool","name":"Read"}}`,
			keep:        rejecting("Bash"),
			want:        `{"tools":[{"name":"Read"}],"tool_choice":{"type":"tool","name":"Read"}}`,
			wantRemoved: []string{"Bash"},
		},
		{
			name:        "anthropic tool_choice any stays while tools remain",
			api:         streaming.APIAnthropic,
			body:        `{"tool_choice":{"type":"any"},"tools":[{"name":"Bash"},{"name":"Read"}]}`,
			keep:        rejecting("Bash"),
			want:        `{"tool_choice":{"type":"any"},"tools":[{"name":"Read"}]}`,
			wantRemoved: []string{"Bash"},
		},
		{
			name: "anthropic no tool left with tool blocks in the history",
			api:  streaming.APIAnthropic,
			body: `{"model":"m","tools":[{"name":"B\u0061sh"}],"tool_choice":{"type":"any","disable_parallel_tool_use":true},` +
				`"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`,
			keep: rejecting("Bash"),
			want: `{"model":"m",` +
				`"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`,
			wantRemoved: []string{"Bash"},
		},
		{
			name:        "anthropic no tool left, nothing else",
			api:         streaming.APIAnthropic,
			body:        ` { "tools" : [ {"name":"Bash"} ] } `,
			keep:        rejecting("Bash"),
			want:        ` {} `,
			wantRemoved: []string{"Bash"},
		},
		{
			name: "anthropic nothing to remove",
			api:  streaming.APIAnthropic,
			body: `{"tools":[{"name":"Read"}],"tool_choice":{"type":"tool","name":"Bash"}}`,
			keep: rejecting("Bash"),
		},
		{
			name:        "chat function tools, tool_choice and parallel_tool_calls",
			api:         streaming.APIChat,
			body:        `{"tools":[{"type":"function","function":{"name":"read","parameters":{}}},{"type":"function","function":{"name":"shell"}}],"tool_choice":{"type":"function","function":{"name":"shell"}},"parallel_tool_calls":false}`,
			keep:        rejecting("shell"),
			want:        `{"tools":[{"type":"function","function":{"name":"read","parameters":{}}}],"parallel_tool_calls":false}`,
			wantRemoved: []string{"shell"},
		},
		{
			name:        "chat custom tool",
			api:         streaming.APIChat,
			body:        `{"tools":[{"type":"custom","custom":{"name":"apply_patch","format":{"type":"text"}}},{"type":"function","function":{"name":"read"}}],"tool_choice":{"type":"custom","custom":{"name":"apply_patch"}}}`,
			keep:        rejecting("apply_patch"),
			want:        `{"tools":[{"type":"function","function":{"name":"read"}}]}`,
			wantRemoved: []string{"apply_patch"},
		},
		{
			name: "chat allowed_tools loses the removed entries",
			api:  streaming.APIChat,
			body: `{"tools":[{"type":"function","function":{"name":"shell"}},{"type":"function","function":{"name":"read"}}],` +
				`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"shell"}},{"type":"function","function":{"name":"read"}}]}}}`,
			keep: rejecting("shell"),
			want: `{"tools":[{"type":"function","function":{"name":"read"}}],` +
				`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"read"}}]}}}`,
			wantRemoved: []string{"shell"},
		},
		{
			name: "chat allowed_tools left empty goes",
			api:  streaming.APIChat,
			body: `{"tools":[{"type":"function","function":{"name":"shell"}},{"type":"function","function":{"name":"read"}}],` +
				`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"shell"}}]}},"stream":true}`,
			keep:        rejecting("shell"),
			want:        `{"tools":[{"type":"function","function":{"name":"read"}}],"stream":true}`,
			wantRemoved: []string{"shell"},
		},
		{
			name:        "chat no tool left",
			api:         streaming.APIChat,
			body:        `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"shell"}}],"tool_choice":"required","parallel_tool_calls":true,"stream":true}`,
			keep:        rejecting("shell"),
			want:        `{"messages":[{"role":"user","content":"x"}],"stream":true}`,
			wantRemoved: []string{"shell"},
		},
		{
			name:        "chat legacy functions and function_call",
			api:         streaming.APIChat,
			body:        `{"functions":[{"name":"shell"},{"name":"read"}],"function_call":{"name":"shell"},"messages":[]}`,
			keep:        rejecting("shell"),
			want:        `{"functions":[{"name":"read"}],"messages":[]}`,
			wantRemoved: []string{"shell"},
		},
		{
			name:        "chat legacy functions all gone",
			api:         streaming.APIChat,
			body:        `{"messages":[],"functions":[{"name":"shell"}],"function_call":"auto","tools":[{"type":"function","function":{"name":"read"}}]}`,
			keep:        rejecting("shell"),
			want:        `{"messages":[],"tools":[{"type":"function","function":{"name":"read"}}]}`,
			wantRemoved: []string{"shell"},
		},
		{
			name:        "responses function and built-in tools",
			api:         streaming.APIResponses,
			body:        `{"tools":[{"type":"function","name":"shell"},{"type":"web_search"},{"type":"file_search","vector_store_ids":["v"]}],"tool_choice":{"type":"web_search"}}`,
			keep:        rejecting("shell", "web_search"),
			want:        `{"tools":[{"type":"file_search","vector_store_ids":["v"]}]}`,
			wantRemoved: []string{"shell", "web_search"},
		},
		{
			name:        "responses namespace partly kept",
			api:         streaming.APIResponses,
			body:        `{"tools":[{"type":"namespace","name":"fs","tools":[{"type":"function","name":"read"},{"type":"function","name":"write"}]}],"tool_choice":{"type":"function","name":"read"}}`,
			keep:        rejecting("write"),
			want:        `{"tools":[{"type":"namespace","name":"fs","tools":[{"type":"function","name":"read"}]}],"tool_choice":{"type":"function","name":"read"}}`,
			wantRemoved: []string{"write"},
		},
		{
			name:        "responses namespace emptied",
			api:         streaming.APIResponses,
			body:        `{"tools":[{"type":"namespace","name":"fs","tools":[{"type":"function","name":"write"}]},{"type":"custom","name":"read"}]}`,
			keep:        rejecting("write"),
			want:        `{"tools":[{"type":"custom","name":"read"}]}`,
			wantRemoved: []string{"write"},
		},
		{
			name: "responses allowed_tools",
			api:  streaming.APIResponses,
			body: `{"tools":[{"type":"function","name":"shell"},{"type":"web_search"}],` +
				`"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"shell"},{"type":"web_search"}]}}`,
			keep:        rejecting("shell"),
			want:        `{"tools":[{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"web_search"}]}}`,
			wantRemoved: []string{"shell"},
		},
		{
			name:        "responses no tool left",
			api:         streaming.APIResponses,
			body:        `{"input":"hi","tools":[{"type":"function","name":"shell"}],"tool_choice":"auto","parallel_tool_calls":false,"store":false}`,
			keep:        rejecting("shell"),
			want:        `{"input":"hi","store":false}`,
			wantRemoved: []string{"shell"},
		},
		{
			name: "responses tools declared in the input stay",
			api:  streaming.APIResponses,
			body: `{"input":[{"type":"additional_tools","tools":[{"type":"custom","name":"exec"}]}],"tool_choice":"auto"}`,
			keep: rejecting("exec"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			out, removed, err := dialects[tc.api].RestrictTools(body, tc.keep)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.body {
				t.Fatal("RestrictTools modified the body")
			}
			if tc.want == "" {
				if !sameSlice(out, body) || removed != nil {
					t.Fatalf("RestrictTools = %s, %q; want the body as is", out, removed)
				}
				return
			}
			if string(out) != tc.want {
				t.Fatalf("RestrictTools =\n%s\nwant\n%s", out, tc.want)
			}
			if !slices.Equal(removed, tc.wantRemoved) {
				t.Errorf("removed = %q, want %q", removed, tc.wantRemoved)
			}
			checkRestricted(t, tc.api, body, out, removed, tc.keep)
		})
	}
}

func TestRestrictToolsErrors(t *testing.T) {
	keepAll := func(string) bool { return true }
	tests := []struct {
		name string
		api  streaming.API
		body string
		want error
	}{
		{"invalid JSON", streaming.APIAnthropic, `{"tools":[{"name":"a"}`, streaming.ErrInvalidJSON},
		{"array", streaming.APIChat, `[{"tools":[]}]`, streaming.ErrInvalidJSON},
		{"empty", streaming.APIResponses, ``, streaming.ErrInvalidJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, removed, err := dialects[tc.api].RestrictTools([]byte(tc.body), keepAll)
			if !errors.Is(err, tc.want) || out != nil || removed != nil {
				t.Fatalf("RestrictTools = %q, %q, %v; want %v", out, removed, err, tc.want)
			}
		})
	}
}

// TestRestrictToolsRequests removes every other declared tool from the
// recorded-shape request bodies.
func TestRestrictToolsRequests(t *testing.T) {
	for _, name := range fixturetest.Glob(t, filepath.Join(requestTestdata, "*.json")) {
		api := requestFileAPI(t, name)
		t.Run(filepath.Base(name), func(t *testing.T) {
			body := fixturetest.ReadFile(t, name)
			lists := refToolLists(api, body)
			var declared []string
			if len(lists) > 0 {
				declared = lists[len(lists)-1]
			}
			var reject []string
			for i, n := range declared {
				if i%2 == 1 {
					reject = append(reject, n)
				}
			}
			keep := rejecting(reject...)
			out, removed, err := dialects[api].RestrictTools(body, keep)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, reject) {
				t.Fatalf("removed = %q, want %q", removed, reject)
			}
			if len(reject) == 0 {
				if !sameSlice(out, body) {
					t.Fatal("a body with nothing to remove was copied")
				}
				return
			}
			checkRestricted(t, api, body, out, removed, keep)
			// Every byte before the tools member is the body's.
			if p, _ := commonEnds(body, out); p < int(gjson.GetBytes(body, "tools").Index) {
				t.Errorf("output differs from byte %d, before the tools at %d", p, gjson.GetBytes(body, "tools").Index)
			}
		})
	}
}

// checkRestricted checks a RestrictTools output against its body: valid
// JSON; the tools left are exactly those of the body keep accepts, in
// order and byte for byte; removed lists the others; no tool_choice or
// parallel_tool_calls without tools; every other member is unchanged.
func checkRestricted(t *testing.T, api streaming.API, body, out []byte, removed []string, keep func(string) bool) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON:\n%s", out)
	}
	var wantRemoved []string
	for _, list := range refToolLists(api, body) {
		for _, n := range list {
			if !keep(n) {
				wantRemoved = append(wantRemoved, n)
			}
		}
	}
	if !slices.Equal(removed, wantRemoved) {
		t.Errorf("removed = %q, want %q", removed, wantRemoved)
	}
	before, after := lastToolList(api, body), lastToolList(api, out)
	var kept []string
	for _, n := range before {
		if keep(n) {
			kept = append(kept, n)
		}
	}
	if !slices.Equal(after, kept) {
		t.Errorf("tools left = %q, want %q", after, kept)
	}
	// Kept tools keep their bytes: each tool of the output is a tool of
	// the body, in the same order (a namespace may have lost members).
	same := func(a, b gjson.Result) bool {
		if apis[api].namespaces && a.Get("type").Str == "namespace" {
			return b.Get("type").Str == "namespace" && a.Get("name").Raw == b.Get("name").Raw
		}
		return a.Raw == b.Raw
	}
	bodyTools := lastMemberResult(body, "tools").Array()
	j := 0
	for _, tool := range lastMemberResult(out, "tools").Array() {
		for j < len(bodyTools) && !same(tool, bodyTools[j]) {
			j++
		}
		if j == len(bodyTools) {
			t.Errorf("tool %s of the output is not one of the body's, in order", tool.Raw)
			break
		}
		j++
	}
	if toolsLeft := lastMemberResult(out, "tools"); !toolsLeft.Exists() {
		for _, k := range []string{"tool_choice", "parallel_tool_calls"} {
			if lastMemberResult(out, k).Exists() {
				t.Errorf("%s without tools", k)
			}
		}
	}
	var got, want map[string]any
	decodeJSON(t, out, &got)
	decodeJSON(t, body, &want)
	for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"} {
		delete(got, k)
		delete(want, k)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("members other than the tools changed:\n got %v\nwant %v", got, want)
	}
}

// refToolLists reads, with gjson, the names of the tools of every
// top-level tools member (and Chat functions member) of body, in order.
// Like the providers, ParseRequest takes the last list; the rest still gets
// filtered.
func refToolLists(api streaming.API, body []byte) [][]string {
	var lists [][]string
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch {
		case !v.IsArray():
		case k.Str == "tools":
			lists = append(lists, apis[api].toolNames(v))
		case apis[api].functions && k.Str == "functions":
			var names []string
			for _, f := range v.Array() {
				names = appendNonEmpty(names, f.Get("name"))
			}
			lists = append(lists, names)
		}
		return true
	})
	return lists
}

// appendNonEmpty appends the first of rs that is a non-empty string.
func appendNonEmpty(names []string, rs ...gjson.Result) []string {
	for _, r := range rs {
		if r.Type == gjson.String && r.Str != "" {
			return append(names, r.Str)
		}
	}
	return names
}

// lastToolList is the names of the tools the provider sees: those of the
// last tools member (Chat: and of the last functions member).
func lastToolList(api streaming.API, body []byte) []string {
	names := apis[api].toolNames(lastMemberResult(body, "tools"))
	if apis[api].functions {
		for _, f := range lastMemberResult(body, "functions").Array() {
			names = appendNonEmpty(names, f.Get("name"))
		}
	}
	return names
}

// lastMemberResult is the last top-level member named key.
func lastMemberResult(body []byte, key string) gjson.Result {
	var last gjson.Result
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		if k.Str == key {
			last = v
		}
		return true
	})
	return last
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// benchBody builds a request of api of about size bytes: a tool list, then
// a long tool-calling conversation, then the tools (Anthropic: Claude
// Code's shape).
func benchBody(api streaming.API, size int) []byte { return apis[api].benchBody(size) }

func BenchmarkAppendNotice(b *testing.B) {
	for _, api := range fuzzAPIs {
		body := benchBody(api, 200<<10)
		b.Run(fmt.Sprintf("%s-%dKB", api, len(body)>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dialects[api].AppendNotice(body, "Budget: 80% used."); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRestrictTools(b *testing.B) {
	keep := rejecting("Bash", "Write", "Edit", "NotebookEdit", "web_search")
	for _, api := range fuzzAPIs {
		body := benchBody(api, 200<<10)
		b.Run(fmt.Sprintf("%s-%dKB", api, len(body)>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, removed, err := dialects[api].RestrictTools(body, keep); err != nil || len(removed) < 4 {
					b.Fatal(removed, err)
				}
			}
		})
	}
}
