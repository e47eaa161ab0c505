package streaming_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// cutThrough runs stream through a filter of api that holds calls until the
// stop and, when notice is set, puts a notice in place of a cut call; it
// returns the filter and what the client gets.
func cutThrough(t *testing.T, api streaming.API, stream string, notice bool) (*streaming.CallFilter, []byte) {
	t.Helper()
	f := newTestFilter(t, api, func(string) bool { return true })
	f.Hold()
	if notice {
		f.NoticeCut(func(c streaming.ToolCall) string { return "the call to " + c.Name + " was cut" })
	}
	var out []byte
	if err := sse.Each([]byte(stream), func(ev *sse.Event) error { out = f.AppendEvent(out, *ev); return nil }); err != nil {
		t.Fatal(err)
	}
	return f, out
}

func TestNoticeCutAnthropic(t *testing.T) {
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me look.\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"grep -rn\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":20}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, notice := range []bool{false, true} {
		f, out := cutThrough(t, streaming.APIAnthropic, stream, notice)
		got := string(out)
		if strings.Contains(got, "tool_use") || strings.Contains(got, "grep") {
			t.Errorf("notice %v: the cut call reached the client:\n%s", notice, got)
		}
		if has := strings.Contains(got, "the call to Bash was cut"); has != notice {
			t.Errorf("notice %v: text in the reply: %v\n%s", notice, has, got)
		}
		// The text goes where the call stood, as a whole block before the stop.
		var starts []int64
		for _, blk := range strings.Split(got, "\n\n") {
			if i := strings.Index(blk, "data: "); i >= 0 && gjson.Get(blk[i+6:], "type").Str == "content_block_start" {
				starts = append(starts, gjson.Get(blk[i+6:], "index").Int())
			}
		}
		if want := map[bool]int{false: 1, true: 2}[notice]; len(starts) != want || starts[len(starts)-1] != int64(want-1) {
			t.Errorf("notice %v: blocks start at %v", notice, starts)
		}
		if notice && strings.Index(got, "was cut") > strings.Index(got, "message_delta") {
			t.Errorf("the notice comes after the stop:\n%s", got)
		}
		if len(f.Withheld()) != 1 {
			t.Errorf("withheld %v, want the cut call", f.Withheld())
		}
	}
}

// cutBodies are whole replies cut at the output limit while writing a call
// to Bash, after a whole call to Read.
var cutBodies = map[streaming.API]string{
	streaming.APIAnthropic: `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_0","name":"Read","input":{"path":"a"}},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}],"stop_reason":"max_tokens","usage":{"input_tokens":5,"output_tokens":9}}`,
	streaming.APIChat:      `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"Read","arguments":"{\"path\":\"a\"}"}},{"id":"call_1","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"grep -rn"}}]},"finish_reason":"length"}]}`,
	streaming.APIResponses: `{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"id":"fc_0","type":"function_call","status":"completed","arguments":"{\"path\":\"a\"}","call_id":"call_0","name":"Read"},{"id":"fc_1","type":"function_call","status":"incomplete","arguments":"{\"command\":\"grep -rn","call_id":"call_1","name":"Bash"}]}`,
}

// TestNoticeCutBody: in a whole reply cut at its output limit, the call it
// was writing is withheld and the notice stands in its place; the whole
// call before it is delivered, and without NoticeCut nothing changes.
func TestNoticeCutBody(t *testing.T) {
	for api, body := range cutBodies {
		for _, notice := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s notice=%v", api, notice), func(t *testing.T) {
				f := newTestFilter(t, api, func(string) bool { return true })
				if notice {
					f.NoticeCut(func(c streaming.ToolCall) string { return "the call to " + c.Name + " was cut" })
				}
				out, err := f.Body([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				res, err := dialects[api].DecodeJSON(out)
				if err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				var names []string
				for _, tc := range res.ClientToolCalls() {
					names = append(names, tc.Name)
				}
				want := "Read"
				if !notice {
					if !apis[api].cutIsNoCall {
						want = "Read,Bash"
					}
					if string(out) != body {
						t.Errorf("changed without NoticeCut: %s", out)
					}
				}
				if got := strings.Join(names, ","); got != want {
					t.Errorf("calls delivered %q, want %q", got, want)
				}
				if has := strings.Contains(string(out), "the call to Bash was cut"); has != notice {
					t.Errorf("notice in the reply: %v: %s", has, out)
				}
				if w := f.Withheld(); notice && (len(w) != 1 || w[0].Name != "Bash") {
					t.Errorf("withheld %v, want the call to Bash", w)
				}
			})
		}
	}
}

// TestNoticeCutChat: a streamed Chat Completions call cut at the output
// limit is dropped, and with NoticeCut a content chunk of its choice
// carries the notice before the finish chunk.
func TestNoticeCutChat(t *testing.T) {
	head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[`
	stream := "data: " + head + `{"index":0,"delta":{"role":"assistant","content":"Let me look."},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Bash","arguments":""}}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\": \"grep -rn"}}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n" +
		"data: [DONE]\n\n"
	for _, notice := range []bool{false, true} {
		f, out := cutThrough(t, streaming.APIChat, stream, notice)
		got := string(out)
		if strings.Contains(got, "tool_calls") || strings.Contains(got, "grep") {
			t.Errorf("notice %v: the cut call reached the client:\n%s", notice, got)
		}
		dec := dialects[streaming.APIChat].NewDecoder()
		var text strings.Builder
		if err := sse.Each(out, func(ev *sse.Event) error {
			if d := gjson.Get(string(ev.Data), "choices.0.delta.content"); d.Exists() {
				if gjson.Get(string(ev.Data), "choices.0.index").Int() != 0 {
					t.Errorf("content on another choice: %s", ev.Data)
				}
				text.WriteString(d.Str)
			}
			dec.Decode(ev)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		res := dec.Finish()
		if res.Truncated || res.Unparsed > 0 || len(res.ClientToolCalls()) != 0 {
			t.Errorf("notice %v: truncated %v, %d unparsed, calls %v", notice, res.Truncated, res.Unparsed, res.ClientToolCalls())
		}
		want := "Let me look."
		if notice {
			want += "\n\nthe call to Bash was cut"
		}
		if text.String() != want {
			t.Errorf("content %q, want %q", text.String(), want)
		}
		if notice && strings.Index(got, "was cut") > strings.Index(got, `"length"`) {
			t.Errorf("the notice comes after the finish:\n%s", got)
		}
		if len(f.Withheld()) != 1 {
			t.Errorf("withheld %v, want the cut call", f.Withheld())
		}
	}
}

// TestNoticeCutResponses: a streamed Responses call cut at the output
// limit is dropped, and with NoticeCut a message item at its output index
// carries the notice; sequence numbers run on and the final output lists
// the message in the call's place.
func TestNoticeCutResponses(t *testing.T) {
	ev := func(typ, data string) string {
		return "event: " + typ + "\ndata: {\"type\":\"" + typ + "\"," + data + "}\n\n"
	}
	stream := ev("response.created", `"sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}`) +
		ev("response.output_item.added", `"sequence_number":1,"output_index":0,"item":{"id":"msg_0","type":"message","status":"in_progress","content":[],"role":"assistant"}`) +
		ev("response.output_text.delta", `"sequence_number":2,"output_index":0,"item_id":"msg_0","content_index":0,"delta":"Let me look."`) +
		ev("response.output_item.done", `"sequence_number":3,"output_index":0,"item":{"id":"msg_0","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Let me look."}],"role":"assistant"}`) +
		ev("response.output_item.added", `"sequence_number":4,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"Bash"}`) +
		ev("response.function_call_arguments.delta", `"sequence_number":5,"output_index":1,"item_id":"fc_1","delta":"{\"command\": \"grep -rn"`) +
		ev("response.incomplete", `"sequence_number":6,"response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"id":"msg_0","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Let me look."}],"role":"assistant"},{"id":"fc_1","type":"function_call","status":"incomplete","arguments":"{\"command\": \"grep -rn","call_id":"call_1","name":"Bash"}]}`)
	for _, notice := range []bool{false, true} {
		f, out := cutThrough(t, streaming.APIResponses, stream, notice)
		got := string(out)
		if strings.Contains(got, "function_call") || strings.Contains(got, "grep") {
			t.Errorf("notice %v: the cut call reached the client:\n%s", notice, got)
		}
		dec := dialects[streaming.APIResponses].NewDecoder()
		var seqs []int64
		var text strings.Builder
		var final gjson.Result
		if err := sse.Each(out, func(ev *sse.Event) error {
			js := gjson.ParseBytes(ev.Data)
			seqs = append(seqs, js.Get("sequence_number").Int())
			if js.Get("type").Str == "response.output_text.delta" {
				if oi := js.Get("output_index").Int(); oi != 1 && js.Get("item_id").Str != "msg_0" {
					t.Errorf("notice at output index %d, want 1", oi)
				}
				text.WriteString(js.Get("delta").Str)
			}
			if js.Get("type").Str == "response.incomplete" {
				final = js.Get("response.output")
			}
			dec.Decode(ev)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		res := dec.Finish()
		if res.Truncated || res.Unparsed > 0 || len(res.ClientToolCalls()) != 0 {
			t.Errorf("notice %v: truncated %v, %d unparsed, calls %v", notice, res.Truncated, res.Unparsed, res.ClientToolCalls())
		}
		for i, n := range seqs {
			if n != int64(i) {
				t.Errorf("notice %v: sequence numbers %v", notice, seqs)
				break
			}
		}
		want, items := "Let me look.", 1
		if notice {
			want, items = want+"the call to Bash was cut", 2
		}
		if text.String() != want {
			t.Errorf("text %q, want %q", text.String(), want)
		}
		if n := len(final.Array()); n != items || final.Get("1.content.0.text").Str != strings.TrimPrefix(want, "Let me look.") {
			t.Errorf("notice %v: final output %s", notice, final.Raw)
		}
		if len(f.Withheld()) != 1 {
			t.Errorf("withheld %v, want the cut call", f.Withheld())
		}
	}
}

// TestCutCallsAgreeWithFilter: the calls Result.CutCalls lists are the
// calls a filter with Hold withholds at the reply's stop, in every API: a
// gate that leaves them out never leaves out a call the agent gets.
func TestCutCallsAgreeWithFilter(t *testing.T) {
	chat := func(args, finish string) string {
		head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[`
		return "data: " + head + `{"index":0,"delta":{"role":"assistant","content":"Let me look."},"finish_reason":null}]}` + "\n\n" +
			"data: " + head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Bash","arguments":""}}]},"finish_reason":null}]}` + "\n\n" +
			"data: " + head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + args + `}}]},"finish_reason":null}]}` + "\n\n" +
			"data: " + head + `{"index":0,"delta":{},"finish_reason":"` + finish + `"}]}` + "\n\n" +
			"data: [DONE]\n\n"
	}
	anthropic := func(args, stop string) string {
		return "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":" + args + "}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"" + stop + "\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":20}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	}
	responses := func(args string, cut bool) string {
		ev := func(typ, data string) string {
			return "event: " + typ + "\ndata: {\"type\":\"" + typ + "\"," + data + "}\n\n"
		}
		end := ev("response.completed", `"sequence_number":4,"response":{"id":"resp_1","status":"completed","output":[{"id":"fc_1","type":"function_call","status":"completed","arguments":`+args+`,"call_id":"call_1","name":"Bash"}]}`)
		if cut {
			end = ev("response.incomplete", `"sequence_number":4,"response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"id":"fc_1","type":"function_call","status":"completed","arguments":`+args+`,"call_id":"call_1","name":"Bash"}]}`)
		}
		return ev("response.created", `"sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}`) +
			ev("response.output_item.added", `"sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"Bash"}`) +
			ev("response.function_call_arguments.delta", `"sequence_number":2,"output_index":0,"item_id":"fc_1","delta":`+args) +
			ev("response.function_call_arguments.done", `"sequence_number":3,"output_index":0,"item_id":"fc_1","arguments":`+args) + end
	}
	const half, whole = `"{\"command\": \"grep -rn"`, `"{\"command\": \"grep -rn x\"}"`
	tests := []struct {
		name   string
		api    streaming.API
		stream string
		cut    bool
	}{
		{"anthropic cut", streaming.APIAnthropic, anthropic(half, "max_tokens"), true},
		{"anthropic context window", streaming.APIAnthropic, anthropic(half, "model_context_window_exceeded"), true},
		{"anthropic whole at the limit", streaming.APIAnthropic, anthropic(whole, "max_tokens"), false},
		{"anthropic tool_use", streaming.APIAnthropic, anthropic(whole, "tool_use"), false},
		{"chat cut", streaming.APIChat, chat(half, "length"), true},
		{"chat whole at the limit", streaming.APIChat, chat(whole, "length"), false},
		{"chat tool_calls", streaming.APIChat, chat(whole, "tool_calls"), false},
		{"responses cut", streaming.APIResponses, responses(half, true), true},
		{"responses whole at the limit", streaming.APIResponses, responses(whole, true), false},
		{"responses completed", streaming.APIResponses, responses(whole, false), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dec := dialects[tc.api].NewDecoder()
			if err := sse.Each([]byte(tc.stream), func(ev *sse.Event) error { dec.Decode(ev); return nil }); err != nil {
				t.Fatal(err)
			}
			res := dec.Finish()
			if res.Unparsed > 0 || res.Truncated || len(res.ClientToolCalls()) != 1 {
				t.Fatalf("decoded %d unparsed, truncated %v, calls %v", res.Unparsed, res.Truncated, res.ClientToolCalls())
			}
			f, _ := cutThrough(t, tc.api, tc.stream, true)
			var cut, withheld []string
			for _, c := range res.CutCalls() {
				cut = append(cut, c.ID)
			}
			for _, c := range f.Withheld() {
				withheld = append(withheld, c.ID)
			}
			if fmt.Sprint(cut) != fmt.Sprint(withheld) || (len(cut) == 1) != tc.cut {
				t.Errorf("CutCalls %v, the filter withheld %v; want cut %v", cut, withheld, tc.cut)
			}
		})
	}
}
