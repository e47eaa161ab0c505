package streaming_test

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// The hold testdata: a text and a Read call (held-notes in its arguments);
// the same then a Write call cut at the output limit (cut-tar in its
// arguments); a Read call then text.
const (
	heldArgument = "held-notes"
	cutArgument  = "cut-tar"
	cancelType   = "trajectory_canceled"
	cancelText   = "gatekeeper canceled this run: an operator stopped it.\nStart a new one to go on."
)

func newHoldFilter(tb testing.TB, api streaming.API, allow func(string) bool) *streaming.CallFilter {
	tb.Helper()
	f := newTestFilter(tb, api, allow)
	f.Hold()
	return f
}

// holdChunks runs the events a Reader finds in chunks through f, calling
// End after the first end events (never when end < 0, after the last when
// end is past it), and returns what the client would receive.
func holdChunks(tb testing.TB, f *streaming.CallFilter, end int, chunks ...[]byte) []byte {
	tb.Helper()
	var out []byte
	n := 0
	fn := func(ev *sse.Event) error {
		if n == end {
			out = f.End(out, cancelType, cancelText)
		}
		n++
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
	if end >= n {
		out = f.End(out, cancelType, cancelText)
	}
	return out
}

// callEvents tells, for each event of a stream, whether it carries a
// client call (a start, a fragment or the end of one) and which event
// carries the reply's stop, read with gjson apart from the filter's code.
func callEvents(t *testing.T, api streaming.API, evs []sse.Event) (call []bool, stop int) {
	t.Helper()
	call, stop = make([]bool, len(evs)), -1
	blocks := map[int64]bool{} // what the API's events said of the calls so far
	for i, ev := range evs {
		var stops bool
		call[i], stops = apis[api].callEvent(gjson.ParseBytes(ev.Data), blocks)
		if stops && stop < 0 {
			stop = i
		}
	}
	if stop < 0 {
		t.Fatal("the stream has no stop")
	}
	return call, stop
}

// sameCall compares what the agent acts on.
func sameCall(got, want streaming.ToolCall) bool {
	return got.ID == want.ID && got.Name == want.Name && got.Type == want.Type && got.ItemID == want.ItemID &&
		got.Choice == want.Choice && bytes.Equal(got.Arguments, want.Arguments) && got.Complete == want.Complete
}

func sameStops(a, b []streaming.Stop) bool { return slices.Equal(a, b) }

// TestHoldKeepsWhatFollowsTheCall: with Hold, a reply of text and a call
// comes out byte for byte and in the provider's order: from the call's
// first event nothing goes out until the stop, when the call and what came
// between its events (a ping, a keepalive) go out as they came.
func TestHoldKeepsWhatFollowsTheCall(t *testing.T) {
	for _, api := range filterAPIs {
		t.Run(string(api), func(t *testing.T) {
			in := fixturetest.ReadFile(t, filterTestdata, apis[api].holdPrefix+"text-call.sse")
			evs := sseEvents(t, in)
			call, stop := callEvents(t, api, evs)
			first := slices.Index(call, true)
			between := false
			for i := first; i < stop; i++ {
				between = between || !call[i]
			}
			if !between {
				t.Fatal("testdata: nothing comes between the call's events")
			}

			f := newHoldFilter(t, api, allowAll)
			var out []byte
			sent, came := 0, 0
			for i, ev := range evs {
				out = f.AppendEvent(out, ev)
				if held := f.Holding(); held != (i >= first && i < stop) {
					t.Fatalf("event %d: Holding() = %v", i, held)
				}
				if came += len(ev.Raw); i < first || i >= stop {
					sent = came
				}
				if len(out) != sent {
					t.Fatalf("event %d: the client has %d bytes, want %d", i, len(out), sent)
				}
			}
			if !bytes.Equal(out, in) {
				t.Fatalf("got\n%s\nwant\n%s", out, in)
			}
			inRes, _ := mustDecode(t, api, in)
			res, _ := mustDecode(t, api, out)
			if len(res.ToolCalls) != 1 || !sameCall(res.ToolCalls[0], inRes.ToolCalls[0]) || !sameStops(res.Stops, inRes.Stops) {
				t.Errorf("decoded %+v %v, want %+v %v", res.ToolCalls, res.Stops, inRes.ToolCalls, inRes.Stops)
			}
			if len(f.Withheld()) != 0 {
				t.Errorf("Withheld() = %+v", f.Withheld())
			}
		})
	}
}

// TestHoldCutAtOutputLimit: a call the provider cut at its output limit
// reaches the agent in no part, and the reply stays whole around it.
func TestHoldCutAtOutputLimit(t *testing.T) {
	wantStop := map[streaming.API]string{streaming.APIAnthropic: "max_tokens", streaming.APIChat: "length", streaming.APIResponses: "response.incomplete:max_output_tokens"}
	for _, api := range filterAPIs {
		t.Run(string(api), func(t *testing.T) {
			in := fixturetest.ReadFile(t, filterTestdata, apis[api].holdPrefix+"cut.sse")
			inRes, _ := mustDecode(t, api, in)
			read, _ := callByName(inRes.ToolCalls, "Read")
			cut, ok := callByName(inRes.ToolCalls, "Write")
			if !ok || !bytes.Contains(cut.Arguments, []byte(cutArgument)) || gjson.ValidBytes(cut.Arguments) {
				t.Fatalf("testdata: no Write call cut short: %+v", inRes.ToolCalls)
			}

			f := newHoldFilter(t, api, allowAll)
			out := filterChunks(t, f, in)
			for _, secret := range []string{strconv.Quote(cut.ID), `"Write"`, cutArgument} {
				if bytes.Contains(out, []byte(secret)) {
					t.Errorf("the output holds %s", secret)
				}
			}
			if cut.ItemID != "" && bytes.Contains(out, []byte(cut.ItemID)) {
				t.Errorf("the output holds the item %s", cut.ItemID)
			}
			res, _ := mustDecode(t, api, out)
			if res.Truncated || res.Unparsed != 0 || !res.Done {
				t.Errorf("truncated %v, unparsed %d %v, done %v", res.Truncated, res.Unparsed, res.UnparsedErrors, res.Done)
			}
			if len(res.Stops) != 1 || res.Stops[0].Reason != streaming.StopMaxTokens || res.Stops[0].Raw != wantStop[api] {
				t.Errorf("stops %+v, want %s", res.Stops, wantStop[api])
			}
			if calls := res.ClientToolCalls(); len(calls) != 1 || !sameCall(calls[0], read) {
				t.Errorf("delivered %+v, want %+v", calls, read)
			}
			w := f.Withheld()
			if len(w) != 1 || w[0].ID != cut.ID || w[0].Name != "Write" || w[0].Index != cut.Index ||
				w[0].Type != cut.Type || w[0].ItemID != cut.ItemID || w[0].Choice != cut.Choice {
				t.Errorf("Withheld() = %+v, want %+v", w, cut)
			}
			if len(f.Refused()) != 0 || f.Holding() {
				t.Errorf("Refused() = %+v, Holding() = %v", f.Refused(), f.Holding())
			}
			apis[api].order(t, in, out)
		})
	}
}

// TestHoldEnd ends replies early: mid-call, where the call goes nowhere,
// and between calls.
func TestHoldEnd(t *testing.T) {
	wantEvent := map[streaming.API]string{
		streaming.APIAnthropic: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"trajectory_canceled\",\"message\":\"gatekeeper canceled this run: an operator stopped it.\\nStart a new one to go on.\"}}\n\n",
		streaming.APIChat:      "data: {\"error\":{\"message\":\"gatekeeper canceled this run: an operator stopped it.\\nStart a new one to go on.\",\"type\":\"trajectory_canceled\",\"code\":\"trajectory_canceled\",\"param\":null}}\n\n",
		streaming.APIResponses: "event: error\ndata: {\"type\":\"error\",\"code\":\"trajectory_canceled\",\"message\":\"gatekeeper canceled this run: an operator stopped it.\\nStart a new one to go on.\",\"param\":null,\"sequence_number\":%d}\n\n",
	}
	for _, api := range filterAPIs {
		in := fixturetest.ReadFile(t, filterTestdata, apis[api].holdPrefix+"text-call.sse")
		evs := sseEvents(t, in)
		call, _ := callEvents(t, api, evs)
		first := slices.Index(call, true)
		var fragments []int // the call's events after its start, in order
		for i := first + 1; i < len(evs); i++ {
			if call[i] {
				fragments = append(fragments, i)
			}
		}
		inRes, _ := mustDecode(t, api, in)
		held := inRes.ClientToolCalls()[0]
		for _, tc := range []struct {
			name   string
			end    int // End comes before this event
			inCall bool
		}{
			{"mid-call, after half its fragments", fragments[len(fragments)/2], true},
			{"with no call open", first, false},
			{"before anything", 0, false},
		} {
			t.Run(string(api)+"/"+tc.name, func(t *testing.T) {
				f := newHoldFilter(t, api, allowAll)
				var out, want []byte
				lastSeq := int64(-1)
				for i, ev := range evs[:tc.end] {
					out = f.AppendEvent(out, ev)
					if !call[i] {
						want = append(want, ev.Raw...)
						if seq := gjson.GetBytes(ev.Data, "sequence_number"); seq.Exists() {
							lastSeq = seq.Int()
						}
					}
				}
				if f.Holding() != tc.inCall {
					t.Fatalf("Holding() = %v before End", f.Holding())
				}
				out = f.End(out, cancelType, cancelText)
				event := strings.Replace(wantEvent[api], "%d", strconv.FormatInt(lastSeq+1, 10), 1) // Responses numbers it
				want = append(want, event...)
				if !bytes.Equal(out, want) {
					t.Fatalf("got\n%s\nwant\n%s", out, want)
				}
				for _, ev := range evs[tc.end:] {
					if more := f.AppendEvent(nil, ev); len(more) != 0 {
						t.Fatalf("after End: %q", more)
					}
				}
				if more := f.End(nil, cancelType, "again"); len(more) != 0 {
					t.Fatalf("End twice: %q", more)
				}
				if f.Holding() {
					t.Error("holding after End")
				}

				res, _ := mustDecode(t, api, out)
				if len(res.ToolCalls) != 0 || res.Truncated || res.Unparsed != 0 {
					t.Errorf("calls %+v, truncated %v, unparsed %d", res.ToolCalls, res.Truncated, res.Unparsed)
				}
				if len(res.Errors) != 1 || res.Errors[0].Type != cancelType || res.Errors[0].Message != cancelText ||
					res.StopReason() != streaming.StopError {
					t.Errorf("errors %+v, stops %+v", res.Errors, res.Stops)
				}
				for _, secret := range []string{strconv.Quote(held.ID), `"Read"`, heldArgument} {
					if bytes.Contains(out, []byte(secret)) {
						t.Errorf("the output holds %s", secret)
					}
				}
				w := f.Withheld()
				switch {
				case !tc.inCall && len(w) != 0:
					t.Errorf("Withheld() = %+v, no call had started", w)
				case tc.inCall && (len(w) != 1 || w[0].ID != held.ID || w[0].Name != "Read"):
					t.Errorf("Withheld() = %+v, want %s", w, held.ID)
				}
			})
		}
	}
}

// TestHoldEndAfterDelivery: a call delivered before End stays delivered,
// and the error comes after the reply's last event.
func TestHoldEndAfterDelivery(t *testing.T) {
	for _, api := range filterAPIs {
		t.Run(string(api), func(t *testing.T) {
			in := fixturetest.ReadFile(t, filterTestdata, apis[api].holdPrefix+"text-call.sse")
			f := newHoldFilter(t, api, allowAll)
			out := holdChunks(t, f, 1<<30, in)
			res, _ := mustDecode(t, api, out)
			if len(res.ClientToolCalls()) != 1 || !res.ClientToolCalls()[0].Complete || len(res.Errors) != 1 {
				t.Errorf("calls %+v, errors %+v", res.ClientToolCalls(), res.Errors)
			}
			if len(f.Withheld()) != 0 {
				t.Errorf("Withheld() = %+v", f.Withheld())
			}
		})
	}
}

// TestHoldEndAfterUnterminatedEvent: an event the stream's end cut off is
// closed before the error, which then stands as an event of its own.
func TestHoldEndAfterUnterminatedEvent(t *testing.T) {
	in := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}"
	f := newHoldFilter(t, streaming.APIAnthropic, allowAll)
	out := holdChunks(t, f, 1<<30, []byte(in))
	res, _ := mustDecode(t, streaming.APIAnthropic, out)
	if len(res.Errors) != 1 || res.Errors[0].Type != cancelType || res.Unparsed != 0 {
		t.Fatalf("errors %+v, unparsed %d %v\n%s", res.Errors, res.Unparsed, res.UnparsedErrors, out)
	}
}

// TestHoldWithRefusal: in the restrict stage a refused call becomes text
// at once while the allowed one is held, and the reply decodes as it does
// without Hold.
func TestHoldWithRefusal(t *testing.T) {
	for _, api := range filterAPIs {
		for _, file := range []string{"text-refused-allowed.sse", "refused-only.sse"} {
			t.Run(string(api)+"/"+file, func(t *testing.T) {
				prefix := strings.TrimSuffix(apis[api].holdPrefix, "hold-")
				in := fixturetest.ReadFile(t, filterTestdata, prefix+file)
				plain := newTestFilter(t, api, refuseNames("Bash", "Write"))
				want, wantSaid := mustDecode(t, api, filterChunks(t, plain, in))

				f := newHoldFilter(t, api, refuseNames("Bash", "Write"))
				var out []byte
				refusedBeforeStop := false
				for _, ev := range sseEvents(t, in) {
					out = f.AppendEvent(out, ev)
					if f.Holding() && bytes.Contains(out, []byte("gatekeeper withheld a call to")) {
						refusedBeforeStop = true
					}
				}
				res, said := mustDecode(t, api, out)
				if len(res.ToolCalls) != len(want.ToolCalls) || !sameStops(res.Stops, want.Stops) || res.Unparsed != 0 {
					t.Fatalf("decoded %+v %+v, want %+v %+v", res.ToolCalls, res.Stops, want.ToolCalls, want.Stops)
				}
				for i := range res.ToolCalls {
					if !sameCall(res.ToolCalls[i], want.ToolCalls[i]) {
						t.Errorf("call %d: %+v, want %+v", i, res.ToolCalls[i], want.ToolCalls[i])
					}
				}
				if got, w := said.Text, wantSaid.Text; got != w {
					t.Errorf("text %q, want %q", got, w)
				}
				if bytes.Contains(out, []byte(withheldArgument)) {
					t.Error("the refused call's arguments went out")
				}
				if file == "text-refused-allowed.sse" && !refusedBeforeStop {
					t.Error("the refusal waited for the held call")
				}
				if w, r := f.Withheld(), f.Refused(); len(w) != 1 || len(r) != 1 || w[0].ID != r[0].ID {
					t.Errorf("Withheld() = %+v, Refused() = %+v", w, r)
				}
			})
		}
	}
}

// TestHoldRenumbers: text that comes after a held call waits for it in
// Anthropic, so the call keeps its place and the reply goes out as it
// came; in Responses the text goes out first and takes the call's place.
// What points at places follows the order the client gets things in.
func TestHoldRenumbers(t *testing.T) {
	for _, api := range []streaming.API{streaming.APIAnthropic, streaming.APIResponses} {
		t.Run(string(api), func(t *testing.T) {
			in := fixturetest.ReadFile(t, filterTestdata, apis[api].holdPrefix+"call-then-text.sse")
			inRes, inSaid := mustDecode(t, api, in)
			f := newHoldFilter(t, api, allowAll)
			out := filterChunks(t, f, in)
			res, said := mustDecode(t, api, out)
			calls := res.ClientToolCalls()
			at := 1
			if apis[api].textWaits {
				at = 0
				if !bytes.Equal(out, in) {
					t.Errorf("got\n%s\nwant the reply as it came", out)
				}
			}
			if len(calls) != 1 || calls[0].Index != at || inRes.ToolCalls[0].Index != 0 || res.Unparsed != 0 {
				t.Fatalf("calls %+v (unparsed %d), want the call at %d (in: %+v)", calls, res.Unparsed, at, inRes.ToolCalls)
			}
			want := inRes.ToolCalls[0]
			if got := calls[0]; got.ID != want.ID || !bytes.Equal(got.Arguments, want.Arguments) || !got.Complete {
				t.Errorf("delivered %+v, want %+v", got, want)
			}
			if said.Text != inSaid.Text || !sameStops(res.Stops, inRes.Stops) {
				t.Errorf("text %q stops %+v", said.Text, res.Stops)
			}
			apis[api].order(t, in, out)
		})
	}
}

// checkBlockOrder checks that content blocks start at 0, 1, 2... each
// stopped before the next starts, and every delta names the open block.
func checkBlockOrder(t *testing.T, out []byte) {
	t.Helper()
	next, open := 0, -1
	for _, ev := range sseEvents(t, out) {
		js := gjson.ParseBytes(ev.Data)
		i := int(js.Get("index").Int())
		switch js.Get("type").Str {
		case "content_block_start":
			if i != next || open >= 0 {
				t.Fatalf("block %d starts after %d blocks, with %d open", i, next, open)
			}
			open, next = i, next+1
		case "content_block_delta", "content_block_stop":
			if i != open {
				t.Fatalf("%s for block %d while %d is open", js.Get("type").Str, i, open)
			}
			if js.Get("type").Str == "content_block_stop" {
				open = -1
			}
		}
	}
}

// checkOutputOrder checks that Responses items are added at 0, 1, 2...
// and that every event of an item names the index it was added at.
func checkOutputOrder(t *testing.T, out []byte) {
	t.Helper()
	at := map[string]int64{}
	for _, ev := range sseEvents(t, out) {
		js := gjson.ParseBytes(ev.Data)
		oi := js.Get("output_index")
		switch js.Get("type").Str {
		case "response.output_item.added":
			if oi.Int() != int64(len(at)) {
				t.Fatalf("item %s added at %d after %d items", js.Get("item.id").Str, oi.Int(), len(at))
			}
			at[js.Get("item.id").Str] = oi.Int()
		default:
			id := js.Get("item_id").Str
			if id == "" {
				id = js.Get("item.id").Str
			}
			if want, ok := at[id]; ok && oi.Exists() && oi.Int() != want {
				t.Fatalf("%s for %s at %d, added at %d", js.Get("type").Str, id, oi.Int(), want)
			}
		}
	}
}

// TestHoldChatShapes covers the ways a Chat Completions chunk may carry a
// held call's elements.
func TestHoldChatShapes(t *testing.T) {
	head := `{"id":"chatcmpl-H","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1","choices":[`
	chunk := func(choices string) string { return "data: " + head + choices + "]}\n\n" }
	own := func(choice, elems string) string {
		return `{"id":"chatcmpl-H","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1","choices":[{"index":` + choice + `,"delta":{` + elems + `}}]}`
	}
	tests := []struct {
		name string
		in   string
		want []string // the output's chunks (data only), in order
	}{
		{
			name: "content in the same delta goes at once, the call waits in a chunk of its own, and what follows it waits behind it",
			in: chunk(`{"index":0,"delta":{"content":"Reading.","tool_calls":[{"index":0,"id":"call_r","type":"function","function":{"name":"Read","arguments":"{}"}}]},"finish_reason":null}`) +
				chunk(`{"index":0,"delta":{"content":" Done."},"finish_reason":null}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"tool_calls"}`) + "data: [DONE]\n\n",
			want: []string{
				head + `{"index":0,"delta":{"content":"Reading."},"finish_reason":null}]}`,
				own("0", `"tool_calls":[{"index":0,"id":"call_r","type":"function","function":{"name":"Read","arguments":"{}"}}]`),
				head + `{"index":0,"delta":{"content":" Done."},"finish_reason":null}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				"[DONE]",
			},
		},
		{
			name: "two calls in one delta wait in a chunk each",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"Glob","arguments":"{}"}}]},"finish_reason":null}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"tool_calls"}`),
			want: []string{
				head + `{"index":0,"delta":{},"finish_reason":null}]}`,
				own("0", `"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}}]`),
				own("0", `"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"Glob","arguments":"{}"}}]`),
				head + `{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
		},
		{
			name: "each choice's calls go out once finished, in the provider's order: the first choice's finish waits behind the second's call",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}}]}}`) +
				chunk(`{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]}}`) +
				chunk(`{"index":0,"delta":{},"finish_reason":"tool_calls"}`) +
				chunk(`{"index":1,"delta":{},"finish_reason":"tool_calls"}`),
			want: []string{
				head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}}]}}]}`,
				head + `{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"Read","arguments":"{}"}}]}}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				head + `{"index":1,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
		},
		{
			name: "a call cut at the length stop in the finishing chunk goes nowhere",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}}]}}`) +
				chunk(`{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_cut","type":"function","function":{"name":"Write","arguments":"{\"pa"}}]},"finish_reason":"length"}`),
			want: []string{
				head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}}]}}]}`,
				head + `{"index":0,"delta":{},"finish_reason":"length"}]}`,
			},
		},
		{
			name: "an error drops what is held",
			in: chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{}"}}]}}`) +
				"event: error\ndata: {\"error\":{\"message\":\"Tool call validation failed\",\"type\":\"invalid_request_error\"}}\n\n",
			want: []string{`{"error":{"message":"Tool call validation failed","type":"invalid_request_error"}}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHoldFilter(t, streaming.APIChat, allowAll)
			out := filterChunks(t, f, []byte(tt.in))
			var got []string
			for _, ev := range sseEvents(t, out) {
				got = append(got, string(ev.Data))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("chunks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if res, _ := mustDecode(t, streaming.APIChat, out); res.Unparsed != 0 {
				t.Errorf("unparsed: %v", res.UnparsedErrors)
			}
			if f.Holding() {
				t.Error("still holding")
			}
		})
	}
}
