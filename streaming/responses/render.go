package responses

import (
	"strconv"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// RenderSSE returns a stream that carries the same reply as the
// non-streamed body (what the SDKs accumulate back into an equal
// response): response.created and .in_progress, per output item
// output_item.added, its content, argument or summary events,
// output_item.done, then response.completed (.incomplete or .failed, by
// the body's status), sequence numbers from 0. A body that is not a
// response object fails with an error wrapping streaming.ErrInvalidJSON.
func (d Dialect) RenderSSE(body []byte) ([]byte, error) {
	return reshape.Render(d, body, "a response object", isReply, render)
}

// isReply reports whether r, a JSON object, is a reply RenderSSE renders.
func isReply(r gjson.Result) bool {
	return r.Get("output").IsArray() && (!r.Get("error").IsObject() || r.Get("id").Exists())
}

// unfinished reports whether a call item was cut short: its stream had no
// done events for it, and a rendered one has none either.
func unfinished(item gjson.Result) bool {
	st := item.Get("status")
	return st.Exists() && st.Str != "completed"
}

func render(s string, r gjson.Result) []byte {
	var out []byte
	seq := 0
	emit := func(typ string, members ...jsonscan.Set) {
		members = append(members, jsonscan.Set{Key: "sequence_number", Val: strconv.Itoa(seq)})
		seq++
		out = sse.AppendFrame(out, typ, jsonscan.Event(typ, members...))
	}
	open := string(jsonscan.SetMembers(nil, s, jsonscan.Set{Key: "status", Val: `"in_progress"`}, jsonscan.Set{Key: "output", Val: "[]"}, jsonscan.Set{Key: "usage", Val: "null"}))
	emit("response.created", jsonscan.Set{Key: "response", Val: open})
	emit("response.in_progress", jsonscan.Set{Key: "response", Val: open})
	for i, item := range r.Get("output").Array() {
		oi := jsonscan.Set{Key: "output_index", Val: strconv.Itoa(i)}
		id := jsonscan.Set{Key: "item_id", Val: jsonscan.Quote(item.Get("id").Str)}
		switch typ := item.Get("type").Str; typ {
		case "message":
			emit("response.output_item.added", oi, jsonscan.Set{Key: "item", Val: string(jsonscan.SetMembers(nil, item.Raw,
				jsonscan.Set{Key: "status", Val: `"in_progress"`}, jsonscan.Set{Key: "content", Val: "[]"}))})
			for j, part := range item.Get("content").Array() {
				ci := jsonscan.Set{Key: "content_index", Val: strconv.Itoa(j)}
				switch part.Get("type").Str {
				case "output_text":
					empty := jsonscan.SetMembers(nil, part.Raw, jsonscan.Set{Key: "text", Val: `""`}, jsonscan.Set{Key: "annotations", Val: "[]"})
					emit("response.content_part.added", id, oi, ci, jsonscan.Set{Key: "part", Val: string(empty)})
					text := part.Get("text").Raw
					emit("response.output_text.delta", id, oi, ci, jsonscan.Set{Key: "delta", Val: text}, jsonscan.Set{Key: "logprobs", Val: "[]"})
					emit("response.output_text.done", id, oi, ci, jsonscan.Set{Key: "text", Val: text}, jsonscan.Set{Key: "logprobs", Val: "[]"})
				case "refusal":
					empty := jsonscan.SetMembers(nil, part.Raw, jsonscan.Set{Key: "refusal", Val: `""`})
					emit("response.content_part.added", id, oi, ci, jsonscan.Set{Key: "part", Val: string(empty)})
					text := part.Get("refusal").Raw
					emit("response.refusal.delta", id, oi, ci, jsonscan.Set{Key: "delta", Val: text})
					emit("response.refusal.done", id, oi, ci, jsonscan.Set{Key: "refusal", Val: text})
				default:
					emit("response.content_part.added", id, oi, ci, jsonscan.Set{Key: "part", Val: part.Raw})
				}
				emit("response.content_part.done", id, oi, ci, jsonscan.Set{Key: "part", Val: part.Raw})
			}
		case "function_call", "custom_tool_call":
			key, events := "arguments", "response.function_call_arguments."
			if typ == "custom_tool_call" {
				key, events = "input", "response.custom_tool_call_input."
			}
			emit("response.output_item.added", oi, jsonscan.Set{Key: "item", Val: string(jsonscan.SetMembers(nil, item.Raw,
				jsonscan.Set{Key: "status", Val: `"in_progress"`}, jsonscan.Set{Key: key, Val: `""`}))})
			input := item.Get(key).Raw
			if input == "" {
				input = `""`
			}
			emit(events+"delta", id, oi, jsonscan.Set{Key: "delta", Val: input})
			if unfinished(item) {
				continue
			}
			done := []jsonscan.Set{id, oi, {Key: key, Val: input}}
			if typ == "function_call" {
				done = []jsonscan.Set{id, oi, {Key: "name", Val: jsonscan.Quote(item.Get("name").Str)}, done[2]}
			}
			emit(events+"done", done...)
		case "reasoning":
			emit("response.output_item.added", oi, jsonscan.Set{Key: "item", Val: string(jsonscan.SetMembers(nil, item.Raw, jsonscan.Set{Key: "summary", Val: "[]"}))})
			for j, part := range item.Get("summary").Array() {
				si := jsonscan.Set{Key: "summary_index", Val: strconv.Itoa(j)}
				text := part.Get("text").Raw
				if text == "" {
					text = `""`
				}
				emit("response.reasoning_summary_part.added", id, oi, si, jsonscan.Set{Key: "part", Val: `{"type":"summary_text","text":""}`})
				emit("response.reasoning_summary_text.delta", id, oi, si, jsonscan.Set{Key: "delta", Val: text})
				emit("response.reasoning_summary_text.done", id, oi, si, jsonscan.Set{Key: "text", Val: text})
				emit("response.reasoning_summary_part.done", id, oi, si, jsonscan.Set{Key: "part", Val: part.Raw})
			}
		default:
			emit("response.output_item.added", oi, jsonscan.Set{Key: "item", Val: item.Raw})
		}
		emit("response.output_item.done", oi, jsonscan.Set{Key: "item", Val: item.Raw})
	}
	terminal := "response.completed"
	switch r.Get("status").Str {
	case "incomplete":
		terminal = "response.incomplete"
	case "failed", "cancelled":
		terminal = "response.failed"
	}
	emit(terminal, jsonscan.Set{Key: "response", Val: s})
	return out
}
