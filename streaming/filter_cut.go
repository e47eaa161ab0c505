package streaming

import (
	"slices"
	"strconv"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// Telling the agent about a call cut at the output limit.
//
// With Hold, a call the reply did not finish before its output limit is
// dropped, and an agent that sees a clean stop without it cannot tell that
// it was ever asked for. With NoticeCut the filter puts a text block in
// its place, just before the stop, saying what happened.

// NoticeCut makes the filter replace a client tool call that Hold drops
// at a stop for the output limit with a text block of text(call), in an
// Anthropic reply, or with a content chunk of its choice before the finish
// in a Chat Completions one, or with a message item at its output index in
// a Responses one (its final output lists that item in the call's place).
// In a whole
// reply (Body) cut at its output limit, the last call is withheld the
// same way, in every API, and text(call) stands in its place. Call it
// before the first AppendEvent or Body.
func (f *CallFilter) NoticeCut(text func(call ToolCall) string) {
	if !f.seen {
		f.cutNotice = text
	}
}

// anthropicCutNotice appends a whole text block, numbered after every
// block delivered, holding the notice for call, which was dropped at the
// output limit at its block index.
func (f *CallFilter) anthropicCutNotice(dst []byte, call ToolCall) []byte {
	out := int64(f.anthropic.pos.release(call.Index))
	f.anthropic.delivered = true
	b := append(f.scratch[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"content_block":{"type":"text","text":""}}`...)
	dst = sse.AppendFrame(dst, "content_block_start", b)
	b = append(b[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = jsonscan.AppendQuoted(b, f.cutNotice(call))
	b = append(b, "}}"...)
	dst = sse.AppendFrame(dst, "content_block_delta", b)
	b = append(b[:0], `{"type":"content_block_stop","index":`...)
	b = strconv.AppendInt(b, out, 10)
	f.scratch = append(b, '}')
	return sse.AppendFrame(dst, "content_block_stop", f.scratch)
}

// markBodyCut finds, in the whole reply js, the client calls the reply was
// still writing when it reached its output limit, for refuse to replace
// with the notice. The decoders take such a call as whole, the agent would
// run it:
//   - Anthropic: a reply stopped by max_tokens (or the context window)
//     whose last block is a tool_use; its input is an object whatever was
//     cut, so the body cannot show it whole and it is withheld;
//   - Chat: the last call of a choice finished by length, when its
//     arguments are not valid JSON;
//   - Responses: an incomplete reply for max_output_tokens whose last
//     item is a call not completed, or whose arguments are not valid JSON.
func (f *CallFilter) markBodyCut(js string) {
	switch f.api {
	case APIAnthropic:
		sr := gjson.Get(js, "stop_reason").Str
		last := gjson.Get(js, "content.@reverse.0")
		if (sr == "max_tokens" || sr == "model_context_window_exceeded") && last.Get("type").Str == "tool_use" {
			f.cutIDs = append(f.cutIDs, last.Get("id").Str)
		}
	case APIChat:
		for _, c := range gjson.Get(js, "choices").Array() {
			if c.Get("finish_reason").Str != "length" {
				continue
			}
			last := c.Get("message.tool_calls.@reverse.0")
			if last.Get("type").Str != "custom" && !gjson.Valid(last.Get("function.arguments").Str) {
				f.cutIDs = append(f.cutIDs, last.Get("id").Str)
			}
		}
	case APIResponses:
		if gjson.Get(js, "status").Str != "incomplete" || gjson.Get(js, "incomplete_details.reason").Str != "max_output_tokens" {
			return
		}
		last := gjson.Get(js, "output.@reverse.0")
		st := last.Get("status")
		switch last.Get("type").Str {
		case "function_call":
			if st.Exists() && st.Str != "completed" || !gjson.Valid(last.Get("arguments").Str) {
				f.cutIDs = append(f.cutIDs, last.Get("call_id").Str)
			}
		case "custom_tool_call":
			if st.Exists() && st.Str != "completed" {
				f.cutIDs = append(f.cutIDs, last.Get("call_id").Str)
			}
		}
	}
	f.cutIDs = slices.DeleteFunc(f.cutIDs, func(id string) bool { return id == "" })
}

// isCut reports whether markBodyCut found the call with id cut.
func (f *CallFilter) isCut(id string) bool { return id != "" && slices.Contains(f.cutIDs, id) }

// chatCutNotice appends a chunk carrying the notice for call, dropped at
// the output limit, as content of its choice, with the id, object,
// created and model of the chunk js that finishes the choice. A blank
// line sets it apart from any text the choice had.
func (f *CallFilter) chatCutNotice(dst []byte, ev *sse.Event, js string, call ToolCall) []byte {
	text := "\n\n" + f.cutNotice(call)
	b := appendChunkHead(f.scratch[:0], js)
	b = append(b, `"choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(call.Choice), 10)
	b = append(b, `,"delta":{"content":`...)
	b = jsonscan.AppendQuoted(b, text)
	f.scratch = append(b, `},"logprobs":null,"finish_reason":null}]}`...)
	return sse.AppendFrame(dst, jsonscan.View(ev.Name), f.scratch)
}

// responsesCutNotice appends, before the terminal event ev (read as e), the events of a
// message item holding the notice for held call c, dropped at the output
// limit, at the output index it would have had. The call is then listed
// as refused, with the notice as its text: the final output puts the
// message item in its place, and the terminal event's number follows.
func (f *CallFilter) responsesCutNotice(dst []byte, ev *sse.Event, e *responsesFields, c int) []byte {
	r := &f.responses
	h := &f.hold
	hc := &h.calls[c]
	tc := hc.tc
	r.pos.release(tc.Index)
	f.refused = append(f.refused, tc)
	f.texts = append(f.texts, f.cutNotice(tc))
	if i := slices.IndexFunc(h.dropped, func(d ToolCall) bool { return d.ItemID == tc.ItemID && d.Index == tc.Index }); i >= 0 {
		h.dropped = slices.Delete(h.dropped, i, i+1) // Withheld lists it once, as refused
	}
	r.calls[hc.key].refused = len(f.refused) - 1
	dst = f.responsesMessageEvents(dst, ev, len(f.refused)-1, e.seqNum, true)
	r.offset++ // six events where none was
	return dst
}
