package streaming_test

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

const filterTestdata = "testdata/filter"

// withheldArgument is in the arguments of every refused call of the
// filter's testdata, and nowhere else.
const withheldArgument = "withheld-target"

func filterRefusal(tc streaming.ToolCall) string {
	return "gatekeeper withheld a call to " + tc.Name + ": this run may only use read-only tools now."
}

func allowAll(string) bool  { return true }
func refuseAll(string) bool { return false }

// refuseNames allows every tool but the named ones.
func refuseNames(names ...string) func(string) bool {
	return func(name string) bool { return !slices.Contains(names, name) }
}

func newTestFilter(tb testing.TB, api streaming.API, allow func(string) bool) *streaming.CallFilter {
	tb.Helper()
	f, err := dialects[api].NewCallFilter(allow, filterRefusal)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// filterChunks runs the events a Reader finds in chunks through f and
// returns what the client would receive.
func filterChunks(tb testing.TB, f *streaming.CallFilter, chunks ...[]byte) []byte {
	tb.Helper()
	var out []byte
	fn := func(ev *sse.Event) error {
		out = f.AppendEvent(out, *ev)
		return nil
	}
	r := sse.NewReader(0)
	for _, c := range chunks {
		if err := r.Feed(c, fn); err != nil {
			tb.Fatal(err)
		}
	}
	if err := r.Finish(fn); err != nil {
		tb.Fatal(err)
	}
	return out
}

// sseEvents returns copies of the events of a stream.
func sseEvents(tb testing.TB, data []byte) []sse.Event {
	tb.Helper()
	var evs []sse.Event
	fn := func(ev *sse.Event) error {
		c := *ev
		c.Name, c.Data, c.ID, c.Raw = bytes.Clone(ev.Name), bytes.Clone(ev.Data), bytes.Clone(ev.ID), bytes.Clone(ev.Raw)
		evs = append(evs, c)
		return nil
	}
	if err := sse.Each(data, fn); err != nil {
		tb.Fatal(err)
	}
	return evs
}

// callByName is the first call of calls to the named tool.
func callByName(calls []streaming.ToolCall, name string) (streaming.ToolCall, bool) {
	for _, tc := range calls {
		if tc.Name == name {
			return tc, true
		}
	}
	return streaming.ToolCall{}, false
}

// TestCallFilterStreams filters replies holding a refused call, with and
// without an allowed one, and decodes what the client would get.
func TestCallFilterStreams(t *testing.T) {
	tests := []struct {
		name     string
		api      streaming.API
		file     string
		refused  string // the tool refused
		allowed  string // the tool of the call delivered, "" for none
		wantStop streaming.StopReason
	}{
		{"anthropic text, refused, allowed", streaming.APIAnthropic, "anthropic-text-refused-allowed.sse", "Bash", "Read", streaming.StopToolUse},
		{"anthropic refused only", streaming.APIAnthropic, "anthropic-refused-only.sse", "Write", "", streaming.StopEndTurn},
		{"chat text, refused, allowed", streaming.APIChat, "chat-text-refused-allowed.sse", "Bash", "Read", streaming.StopToolUse},
		{"chat refused only", streaming.APIChat, "chat-refused-only.sse", "Write", "", streaming.StopEndTurn},
		{"responses text, refused, allowed", streaming.APIResponses, "responses-text-refused-allowed.sse", "Bash", "Read", streaming.StopToolUse},
		{"responses refused only", streaming.APIResponses, "responses-refused-only.sse", "Write", "", streaming.StopEndTurn},
		{"responses custom tool refused, no sequence numbers", streaming.APIResponses, "responses-custom-refused-no-sequence.sse", "apply_patch", "", streaming.StopEndTurn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fixturetest.ReadFile(t, filterTestdata, tt.file)
			inRes, _ := mustDecode(t, tt.api, in)
			refusedIn, ok := callByName(inRes.ToolCalls, tt.refused)
			if !ok || !bytes.Contains(refusedIn.Arguments, []byte(withheldArgument)) {
				t.Fatalf("testdata has no call to %s with %q in its arguments", tt.refused, withheldArgument)
			}

			f := newTestFilter(t, tt.api, refuseNames(tt.refused))
			out := filterChunks(t, f, in)
			res, said := mustDecode(t, tt.api, out)

			for _, secret := range []string{strconv.Quote(refusedIn.ID), strconv.Quote(refusedIn.Name), withheldArgument} {
				if bytes.Contains(out, []byte(secret)) {
					t.Errorf("the output holds %s", secret)
				}
			}
			if res.Unparsed != 0 || res.Truncated || !res.Done {
				t.Errorf("unparsed %d %v, truncated %v, done %v", res.Unparsed, res.UnparsedErrors, res.Truncated, res.Done)
			}
			if got := res.StopReason(); got != tt.wantStop {
				t.Errorf("stop reason %q, want %q", got, tt.wantStop)
			}
			if text := said.Text; !strings.Contains(text, filterRefusal(refusedIn)) {
				t.Errorf("the refusal is not in the text: %q", text)
			}

			clients := res.ClientToolCalls()
			if tt.allowed == "" {
				if len(clients) != 0 {
					t.Errorf("calls delivered: %+v", clients)
				}
			} else {
				want, _ := callByName(inRes.ToolCalls, tt.allowed)
				if len(clients) != 1 {
					t.Fatalf("delivered %+v, want the call to %s", clients, tt.allowed)
				}
				got := clients[0]
				if got.ID != want.ID || got.Name != want.Name || got.Type != want.Type || got.ItemID != want.ItemID ||
					!bytes.Equal(got.Arguments, want.Arguments) || !got.Complete {
					t.Errorf("delivered %+v, want %+v", got, want)
				}
			}

			refused := f.Refused()
			if len(refused) != 1 {
				t.Fatalf("Refused() = %+v", refused)
			}
			r := refused[0]
			if r.ID != refusedIn.ID || r.Name != refusedIn.Name || r.Index != refusedIn.Index || r.Choice != refusedIn.Choice ||
				r.ItemID != refusedIn.ItemID || r.Type != refusedIn.Type {
				t.Errorf("Refused() = %+v, want %+v", r, refusedIn)
			}

			apis[tt.api].refusedInStream(t, in, out, refusedIn, clients, filterRefusal(refusedIn))
		})
	}
}

// checkAnthropicBlocks checks that content blocks start at 0, 1, 2... each
// stopped once before the next starts, and that the block at index holds
// text.
func checkAnthropicBlocks(t *testing.T, out []byte, index int, text string) {
	t.Helper()
	next, open := 0, -1
	var blockText strings.Builder
	for _, ev := range sseEvents(t, out) {
		js := string(ev.Data)
		i := int(gjson.Get(js, "index").Int())
		switch gjson.Get(js, "type").Str {
		case "content_block_start":
			if i != next || open >= 0 {
				t.Fatalf("block %d starts after %d blocks, with %d open", i, next, open)
			}
			open, next = i, next+1
			if i == index && gjson.Get(js, "content_block.type").Str != "text" {
				t.Errorf("block %d is %s, want text", i, gjson.Get(js, "content_block.type").Str)
			}
		case "content_block_delta":
			if i != open {
				t.Fatalf("delta for block %d while %d is open", i, open)
			}
			if i == index {
				blockText.WriteString(gjson.Get(js, "delta.text").Str)
			}
		case "content_block_stop":
			if i != open {
				t.Fatalf("stop for block %d while %d is open", i, open)
			}
			open = -1
		}
	}
	if open >= 0 || blockText.String() != text {
		t.Errorf("block %d open at the end, or text %q, want %q", open, blockText.String(), text)
	}
}

// checkSequenceNumbers checks that when the input numbers its events, the
// output numbers them from the same first number, up by one each (comments
// and [DONE] carry no number).
func checkSequenceNumbers(t *testing.T, in, out []byte) {
	t.Helper()
	first := gjson.GetBytes(sseEvents(t, in)[0].Data, "sequence_number")
	i := -1
	for _, ev := range sseEvents(t, out) {
		if d := bytes.TrimSpace(ev.Data); len(d) == 0 || d[0] != '{' {
			continue // a comment, [DONE]
		}
		i++
		seq := gjson.GetBytes(ev.Data, "sequence_number")
		if !first.Exists() {
			if seq.Exists() {
				t.Fatalf("event %d numbered %d in a stream without numbers", i, seq.Int())
			}
			continue
		}
		if !seq.Exists() || seq.Int() != first.Int()+int64(i) {
			t.Fatalf("event %d has sequence number %s, want %d", i, seq.Raw, first.Int()+int64(i))
		}
	}
}

// checkResponsesOutput checks that a message item carrying the refusal
// stands where the refused call stood, in the stream and in the final
// output.
func checkResponsesOutput(t *testing.T, out []byte, refused streaming.ToolCall, text string) {
	t.Helper()
	msgID := "msg_" + refused.ID
	var added, done, final bool
	for _, ev := range sseEvents(t, out) {
		js := string(ev.Data)
		switch gjson.Get(js, "type").Str {
		case "response.output_item.added":
			if gjson.Get(js, "item.id").Str == msgID {
				added = gjson.Get(js, "output_index").Int() == int64(refused.Index) && gjson.Get(js, "item.type").Str == "message"
			}
		case "response.output_item.done":
			if gjson.Get(js, "item.id").Str == msgID {
				done = gjson.Get(js, "output_index").Int() == int64(refused.Index) && gjson.Get(js, "item.content.0.text").Str == text
			}
		case "response.completed":
			item := gjson.Get(js, "response.output."+strconv.Itoa(refused.Index))
			final = item.Get("id").Str == msgID && item.Get("type").Str == "message" &&
				item.Get("status").Str == "completed" && item.Get("content.0.text").Str == text &&
				item.Get("content.0.annotations").IsArray()
		}
	}
	if !added || !done || !final {
		t.Errorf("message %s at output %d: added %v, done %v, in the final output %v", msgID, refused.Index, added, done, final)
	}
}

// TestCallFilterChatShapes covers the ways a Chat Completions reply may
// start a refused call.
func TestCallFilterChatShapes(t *testing.T) {
	head := `{"id":"chatcmpl-S","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1","choices":[`
	chunk := func(choices string) string { return "data: " + head + choices + "]}\n\n" }
	tests := []struct {
		name      string
		in        string
		refused   []string
		want      []string // the output's chunks (data only), in order
		wantStops []streaming.StopReason
	}{
		{
			name: "content in the same delta: the refusal follows in its own chunk",
			in: chunk(`{"index":0,"delta":{"content":"Clearing.","tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"Bash","arguments":"{}"}}]},"finish_reason":null}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"tool_calls"}`) + "data: [DONE]\n\n",
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"content":"Clearing."},"finish_reason":null}]}`,
				`{"id":"chatcmpl-S","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1","choices":[{"index":0,"delta":{"content":"gatekeeper withheld a call to Bash: this run may only use read-only tools now."},"logprobs":null,"finish_reason":null}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				"[DONE]",
			},
			wantStops: []streaming.StopReason{streaming.StopEndTurn},
		},
		{
			name: "two calls in one delta, the first refused: the second becomes index 0",
			in: chunk(`{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Bash","arguments":"{\"c\":1}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":"tool_calls"}`) +
				"data: [DONE]\n\n",
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"role":"assistant","content":"gatekeeper withheld a call to Bash: this run may only use read-only tools now.","tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
				"[DONE]",
			},
			wantStops: []streaming.StopReason{streaming.StopToolUse},
		},
		{
			name: "indices from 1 keep their numbers until a refusal, then go on from the highest",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_b","type":"function","function":{"name":"Bash","arguments":""}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"index":3,"id":"call_c","type":"function","function":{"name":"Glob","arguments":"{}"}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"tool_calls"}`),
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]}}]}`,
				head + `{"index":0,"delta":{"content":"gatekeeper withheld a call to Bash: this run may only use read-only tools now."}}]}`,
				head + `{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_c","type":"function","function":{"name":"Glob","arguments":"{}"}}]}}]}`,
				head + `{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
			wantStops: []streaming.StopReason{streaming.StopToolUse},
		},
		{
			name: "two choices: only the one whose calls were all refused stops",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Bash","arguments":"{}"}}]},"finish_reason":null}`) +
				chunk(`{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":null}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"tool_calls"}`) +
				chunk(`{"index":1,"delta":{},"finish_reason":"tool_calls"}`),
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"content":"gatekeeper withheld a call to Bash: this run may only use read-only tools now."},"finish_reason":null}]}`,
				head + `{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":null}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				head + `{"index":1,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
			wantStops: []streaming.StopReason{streaming.StopEndTurn, streaming.StopToolUse},
		},
		{
			name: "custom tool, refused by its custom name",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_p","type":"custom","custom":{"name":"apply_patch","input":"*** Begin"}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"custom":{"input":" Patch"}}]},"finish_reason":"tool_calls"}`),
			refused: []string{"apply_patch"},
			want: []string{
				head + `{"index":0,"delta":{"content":"gatekeeper withheld a call to apply_patch: this run may only use read-only tools now."}}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			},
			wantStops: []streaming.StopReason{streaming.StopEndTurn},
		},
		{
			name: "legacy function_call",
			in: chunk(`{"index":0,"delta":{"role":"assistant","content":null,"function_call":{"name":"Bash","arguments":""}}}`) +
				chunk(`{"index":0,"delta":{"function_call":{"arguments":"{}"}}}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"function_call"}`),
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"role":"assistant","content":"gatekeeper withheld a call to Bash: this run may only use read-only tools now."}}]}`,
				head + `{"index":0,"delta":{}}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			},
			wantStops: []streaming.StopReason{streaming.StopEndTurn},
		},
		{
			name: "no index: calls keyed by id, continuations by the latest call",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"Bash","arguments":"{\"x\":"}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"1}"}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":"tool_calls"}`),
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"content":"gatekeeper withheld a call to Bash: this run may only use read-only tools now."}}]}`,
				head + `{"index":0,"delta":{}}]}`,
				head + `{"index":0,"delta":{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			},
			wantStops: []streaming.StopReason{streaming.StopToolUse},
		},
		{
			name: "a later fragment naming a refused tool is dropped",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"Bash","arguments":"{}"}}]}}`),
			refused: []string{"Bash"},
			want: []string{
				head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]}}]}`,
				head + `{"index":0,"delta":{}}]}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestFilter(t, streaming.APIChat, refuseNames(tt.refused...))
			out := filterChunks(t, f, []byte(tt.in))
			var got []string
			for _, ev := range sseEvents(t, out) {
				got = append(got, string(ev.Data))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("chunks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			res, _ := mustDecode(t, streaming.APIChat, out)
			var stops []streaming.StopReason
			for _, s := range res.Stops {
				stops = append(stops, s.Reason)
			}
			if !slices.Equal(stops, tt.wantStops) {
				t.Errorf("stops %v, want %v", stops, tt.wantStops)
			}
			for _, tc := range res.ClientToolCalls() {
				if slices.Contains(tt.refused, tc.Name) {
					t.Errorf("refused call delivered: %+v", tc)
				}
			}
			if res.Unparsed != 0 {
				t.Errorf("unparsed: %v", res.UnparsedErrors)
			}
		})
	}
}

// TestCallFilterEventRules covers framing and malformed events.
func TestCallFilterEventRules(t *testing.T) {
	tests := []struct {
		name    string
		api     streaming.API
		in      string
		refused []string
		want    string
	}{
		{
			name: "anthropic: no event lines in, none out",
			api:  streaming.APIAnthropic,
			in: "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
				"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
			refused: []string{"Bash"},
			want: "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}}\n\n" +
				"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		},
		{
			name: "anthropic: server tools pass, CRLF framing of passed events kept",
			api:  streaming.APIAnthropic,
			in: "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\r\n\r\n" +
				"event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n",
			refused: []string{"web_search"},
			want: "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\r\n\r\n" +
				"event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n",
		},
		{
			name: "anthropic: a refused block's events go, a ping and comments between them stay",
			api:  streaming.APIAnthropic,
			in: "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
				": keepalive\n\n" +
				"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"rm\\\": 1}\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"rm\\\"\n\n",
			refused: []string{"Bash"},
			want: "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}}\n\n" +
				": keepalive\n\n" +
				"event: ping\ndata: {\"type\": \"ping\"}\n\n",
		},
		{
			name: "anthropic: after a refusal, an event no decoder can read is withheld",
			api:  streaming.APIAnthropic,
			in: "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
				"data: {\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"partial_json\":\"{\\\"rm\\\"\n\n" +
				"data: {\"type\":\"message_stop\"}\n\n",
			refused: []string{"Bash"},
			want: "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}}\n\n" +
				"data: {\"type\":\"message_stop\"}\n\n",
		},
		{
			name: "anthropic: message_delta keeps tool_use when an allowed call went out",
			api:  streaming.APIAnthropic,
			in: "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Read\",\"input\":{}}}\n\n" +
				"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
				"data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
				"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n",
			refused: []string{"Bash"},
			want: "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Read\",\"input\":{}}}\n\n" +
				"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
				"data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}}\n\n" +
				"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n",
		},
		{
			name: "chat: after a refusal, a chunk no decoder can read is withheld",
			api:  streaming.APIChat,
			in: "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"Bash\",\"arguments\":\"\"}}]}}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"rm\\\"\n\n" +
				"data: [DONE]\n\n",
			refused: []string{"Bash"},
			want: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}}]}\n\n" +
				"data: [DONE]\n\n",
		},
		{
			name:    "chat: a chunk no decoder can read passes while nothing was refused",
			api:     streaming.APIChat,
			in:      "data: {\"choices\":[\n\ndata: [DONE]\n\n",
			refused: []string{"Bash"},
			want:    "data: {\"choices\":[\n\ndata: [DONE]\n\n",
		},
		{
			name: "chat: a rewritten chunk spread over data lines comes out whole",
			api:  streaming.APIChat,
			in: "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\n" +
				"data: \"function\":{\"name\":\"Bash\",\"arguments\":\"\"}}]}}]}\n\n",
			refused: []string{"Bash"},
			want:    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}}]}\n\n",
		},
		{
			name: "responses: the message item takes the call's item id when it has no call id",
			api:  streaming.APIResponses,
			in: "data: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"{}\"}\n\n" +
				"data: {\"type\":\"response.function_call_arguments.done\",\"item_id\":\"fc_1\",\"output_index\":0,\"arguments\":\"{}\"}\n\n",
			refused: []string{""},
			want: "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_fc_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n" +
				"data: {\"type\":\"response.content_part.added\",\"output_index\":0,\"item_id\":\"msg_fc_1\",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"text\":\"\"}}\n\n" +
				"data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"item_id\":\"msg_fc_1\",\"content_index\":0,\"delta\":\"gatekeeper withheld a call to : this run may only use read-only tools now.\",\"logprobs\":[]}\n\n" +
				"data: {\"type\":\"response.output_text.done\",\"output_index\":0,\"item_id\":\"msg_fc_1\",\"content_index\":0,\"text\":\"gatekeeper withheld a call to : this run may only use read-only tools now.\",\"logprobs\":[]}\n\n" +
				"data: {\"type\":\"response.content_part.done\",\"output_index\":0,\"item_id\":\"msg_fc_1\",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"text\":\"gatekeeper withheld a call to : this run may only use read-only tools now.\"}}\n\n" +
				"data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"msg_fc_1\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"text\":\"gatekeeper withheld a call to : this run may only use read-only tools now.\"}],\"role\":\"assistant\"}}\n\n",
		},
		{
			name:    "responses: a call seen first in the final output is judged there",
			api:     streaming.APIResponses,
			in:      "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{\"status\":\"completed\",\"output\":[{\"type\":\"function_call\",\"id\":\"fc_9\",\"call_id\":\"call_9\",\"name\":\"Bash\",\"arguments\":\"{}\"}]}}\n\n",
			refused: []string{"Bash"},
			want:    "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{\"status\":\"completed\",\"output\":[{\"id\":\"msg_call_9\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"text\":\"gatekeeper withheld a call to Bash: this run may only use read-only tools now.\"}],\"role\":\"assistant\"}]}}\n\n",
		},
		{
			name: "responses: server tools pass",
			api:  streaming.APIResponses,
			in: "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"ws_1\",\"type\":\"web_search_call\",\"status\":\"in_progress\"}}\n\n" +
				"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":3,\"output_index\":1,\"item\":{\"id\":\"mcp_1\",\"type\":\"mcp_call\",\"name\":\"Bash\",\"arguments\":\"\"}}\n\n",
			refused: []string{"Bash", "web_search"},
			want: "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"ws_1\",\"type\":\"web_search_call\",\"status\":\"in_progress\"}}\n\n" +
				"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":3,\"output_index\":1,\"item\":{\"id\":\"mcp_1\",\"type\":\"mcp_call\",\"name\":\"Bash\",\"arguments\":\"\"}}\n\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestFilter(t, tt.api, refuseNames(tt.refused...))
			if got := filterChunks(t, f, []byte(tt.in)); string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestCallFilterFirstEventKeepsBOM(t *testing.T) {
	in := "\xEF\xBB\xBFdata: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"Bash\"}}]}}]}\n\n"
	out := filterChunks(t, newTestFilter(t, streaming.APIChat, refuseAll), []byte(in))
	if !bytes.HasPrefix(out, []byte("\xEF\xBB\xBF")) || bytes.Contains(out, []byte("call_1")) {
		t.Fatalf("%q", out)
	}
}

func TestNewCallFilterErrors(t *testing.T) {
	tests := []struct {
		name    string
		api     streaming.API
		allow   func(string) bool
		refusal func(streaming.ToolCall) string
		want    error
	}{
		{"no allow", streaming.APIChat, nil, filterRefusal, streaming.ErrNoCallPolicy},
		{"no refusal", streaming.APIChat, allowAll, nil, streaming.ErrNoCallPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := dialects[tt.api].NewCallFilter(tt.allow, tt.refusal)
			if !errors.Is(err, tt.want) || f != nil {
				t.Fatalf("NewCallFilter = %v, %v; want %v", f, err, tt.want)
			}
		})
	}
}
