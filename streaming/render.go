package streaming

import (
	"fmt"
	"strconv"
	"strings"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// Rendering a whole reply as a stream.
//
// An agent that asked for a stream and re-attached to a held turn whose
// reply was kept as a body (or the other way round) gets the reply in the
// grammar it asked for: every block or item opened, its content in one
// delta, closed, then the stop; what the SDKs' accumulators rebuild from it
// is the body.

// RenderSSE returns a stream that carries the same reply as the non-streamed
// body, in the provider's event grammar (what the SDKs accumulate back into
// an equal message).
//
// Anthropic: message_start (the message with empty content, no stop),
// per block content_block_start, its content in deltas (text, input JSON,
// thinking and signature, citations), content_block_stop, then
// message_delta (stop and usage) and message_stop. Chat: per choice a role
// chunk, content, refusal and reasoning chunks, per call a chunk naming it
// and one with its arguments, a finish chunk; a usage chunk when the body
// has usage; data: [DONE]. Responses: response.created and .in_progress,
// per output item output_item.added, its content, argument or summary
// events, output_item.done, then response.completed (.incomplete or
// .failed, by the body's status), sequence numbers from 0.
//
// A body that is not a reply of api (not JSON, an error body) fails with
// an error wrapping ErrInvalidJSON.
func RenderSSE(api API, body []byte) ([]byte, error) {
	s, err := replyObject(api, body)
	if err != nil {
		return nil, err
	}
	r := gjson.Parse(s)
	switch api {
	case APIAnthropic:
		if r.Get("type").Str != "message" || !r.Get("content").IsArray() {
			return nil, fmt.Errorf("%w: not an anthropic message", ErrInvalidJSON)
		}
		return checkRendered(api, renderAnthropic(s, r))
	case APIChat:
		if !r.Get("choices").IsArray() {
			return nil, fmt.Errorf("%w: not a chat completion", ErrInvalidJSON)
		}
		return checkRendered(api, renderChat(r))
	case APIResponses:
		if !r.Get("output").IsArray() || r.Get("error").IsObject() && !r.Get("id").Exists() {
			return nil, fmt.Errorf("%w: not a response object", ErrInvalidJSON)
		}
		return checkRendered(api, renderResponses(s, r))
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
}

// event builds one event's JSON: {"type":typ, members...}.
func eventJSON(typ string, members ...rawMember) []byte {
	b := jsonscan.AppendQuoted([]byte(`{"type":`), typ)
	for _, m := range members {
		b = append(b, ',')
		b = jsonscan.AppendQuoted(b, m.key)
		b = append(append(b, ':'), m.val...)
	}
	return append(b, '}')
}

func itoa(n int) string { return strconv.Itoa(n) }

// checkRendered reads a rendered stream back with api's decoder: a body
// whose blocks or items the decoder cannot read (a block without a type, a
// call without an id or name) is not a reply of api, and rendering it
// would hand the agent events its SDK cannot read either.
func checkRendered(api API, stream []byte) ([]byte, error) {
	dec, err := NewDecoder(api)
	if err != nil {
		return nil, err
	}
	err = sse.Each(stream, func(ev *sse.Event) error {
		dec.Decode(ev, nil)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: rendered stream: %v", ErrInvalidJSON, err)
	}
	if res := dec.Finish(); res.Unparsed > 0 || res.Truncated {
		if len(res.UnparsedErrors) > 0 {
			return nil, fmt.Errorf("%w: %s reply body: %v", ErrInvalidJSON, api, res.UnparsedErrors[0])
		}
		return nil, fmt.Errorf("%w: %s reply body renders no whole reply", ErrInvalidJSON, api)
	}
	return stream, nil
}

func renderAnthropic(s string, r gjson.Result) []byte {
	var out []byte
	emit := func(typ string, members ...rawMember) {
		out = sse.AppendFrame(out, typ, eventJSON(typ, members...))
	}
	usage := r.Get("usage").Raw
	if !jsonscan.IsObject(usage) {
		usage = `{"input_tokens":0,"output_tokens":0}`
	}
	start := setMembers(nil, s,
		rawMember{"content", "[]"}, rawMember{"stop_reason", "null"}, rawMember{"stop_sequence", "null"},
		rawMember{"stop_details", ""}, rawMember{"usage", string(setMembers(nil, usage, rawMember{"output_tokens", "0"}))})
	emit("message_start", rawMember{"message", string(start)})
	for i, block := range r.Get("content").Array() {
		idx := rawMember{"index", itoa(i)}
		typ := block.Get("type").Str
		var deltas []string
		var open []rawMember
		switch {
		case typ == "text":
			open = []rawMember{{"text", `""`}}
			if block.Get("citations").IsArray() {
				open = append(open, rawMember{"citations", "[]"})
			}
			if t := block.Get("text").Str; t != "" {
				deltas = append(deltas, `{"type":"text_delta","text":`+quoted(t)+`}`)
			}
			for _, c := range block.Get("citations").Array() {
				deltas = append(deltas, `{"type":"citations_delta","citation":`+c.Raw+`}`)
			}
		case typ == "thinking":
			open = []rawMember{{"thinking", `""`}, {"signature", `""`}}
			if t := block.Get("thinking").Str; t != "" {
				deltas = append(deltas, `{"type":"thinking_delta","thinking":`+quoted(t)+`}`)
			}
			if sig := block.Get("signature"); sig.Type == gjson.String {
				deltas = append(deltas, `{"type":"signature_delta","signature":`+sig.Raw+`}`)
			}
		case block.Get("input").Exists():
			open = []rawMember{{"input", "{}"}}
			input := strings.TrimSpace(block.Get("input").Raw)
			if input == "{}" {
				input = ""
			}
			deltas = append(deltas, `{"type":"input_json_delta","partial_json":`+quoted(input)+`}`)
		}
		emit("content_block_start", idx, rawMember{"content_block", string(setMembers(nil, block.Raw, open...))})
		for _, d := range deltas {
			emit("content_block_delta", idx, rawMember{"delta", d})
		}
		emit("content_block_stop", idx)
	}
	delta := []rawMember{{"stop_reason", r.Get("stop_reason").Raw}, {"stop_sequence", r.Get("stop_sequence").Raw}}
	for _, k := range []string{"stop_details", "container"} {
		if v := r.Get(k); v.Exists() {
			delta = append(delta, rawMember{k, v.Raw})
		}
	}
	for i := range delta {
		if delta[i].val == "" {
			delta[i].val = "null"
		}
	}
	emit("message_delta", rawMember{"delta", string(setMembers(nil, "{}", delta...))}, rawMember{"usage", usage})
	emit("message_stop")
	return out
}

func renderChat(r gjson.Result) []byte {
	var head []rawMember
	for _, k := range []string{"id", "created", "model", "service_tier", "system_fingerprint"} {
		if v := r.Get(k); v.Exists() {
			head = append(head, rawMember{k, v.Raw})
		}
	}
	var out []byte
	chunk := func(choices string, extra ...rawMember) {
		b := []byte(`{"object":"chat.completion.chunk"`)
		for _, m := range append(head[:len(head):len(head)], extra...) {
			b = jsonscan.AppendQuoted(append(b, ','), m.key)
			b = append(append(b, ':'), m.val...)
		}
		b = append(append(append(b, `,"choices":`...), choices...), '}')
		out = sse.AppendFrame(out, "", b)
	}
	for _, ch := range r.Get("choices").Array() {
		idx := ch.Get("index").Raw
		if idx == "" {
			idx = "0"
		}
		delta := func(d, finish string) {
			chunk(`[{"index":` + idx + `,"delta":` + d + `,"logprobs":null,"finish_reason":` + finish + `}]`)
		}
		msg := ch.Get("message")
		role := msg.Get("role").Raw
		if role == "" {
			role = `"assistant"`
		}
		first := `{"role":` + role
		if c := msg.Get("content"); c.Type != gjson.String {
			first += `,"content":null`
		}
		delta(first+`}`, "null")
		for _, k := range []string{"reasoning_content", "content", "refusal"} {
			if v := msg.Get(k); v.Type == gjson.String {
				delta(`{`+quoted(k)+`:`+v.Raw+`}`, "null")
			}
		}
		for j, tc := range msg.Get("tool_calls").Array() {
			typ := tc.Get("type").Str
			inner, argKey := "function", "arguments"
			if typ == "custom" {
				inner, argKey = "custom", "input"
			}
			if typ == "" {
				typ = "function"
			}
			fn := tc.Get(inner)
			name := fn.Get("name").Raw
			if name == "" {
				name = `""`
			}
			el := `{"index":` + itoa(j) + `,"id":` + quoted(tc.Get("id").Str) + `,"type":` + quoted(typ) +
				`,"` + inner + `":{"name":` + name + `,"` + argKey + `":""}}`
			delta(`{"tool_calls":[`+el+`]}`, "null")
			if a := fn.Get(argKey).Str; a != "" {
				delta(`{"tool_calls":[{"index":`+itoa(j)+`,"`+inner+`":{"`+argKey+`":`+quoted(a)+`}}]}`, "null")
			}
		}
		if fc := msg.Get("function_call"); fc.IsObject() {
			delta(`{"function_call":{"name":`+quoted(fc.Get("name").Str)+`,"arguments":""}}`, "null")
			if a := fc.Get("arguments").Str; a != "" {
				delta(`{"function_call":{"arguments":`+quoted(a)+`}}`, "null")
			}
		}
		finish := ch.Get("finish_reason").Raw
		if finish == "" {
			finish = "null"
		}
		delta(`{}`, finish)
	}
	if u := r.Get("usage"); u.IsObject() {
		chunk(`[]`, rawMember{"usage", u.Raw})
	}
	return sse.AppendFrame(out, "", []byte("[DONE]"))
}

// unfinished reports whether a call item was cut short: its stream had no
// done events for it, and a rendered one has none either.
func unfinished(item gjson.Result) bool {
	st := item.Get("status")
	return st.Exists() && st.Str != "completed"
}

func renderResponses(s string, r gjson.Result) []byte {
	var out []byte
	seq := 0
	emit := func(typ string, members ...rawMember) {
		members = append(members, rawMember{"sequence_number", itoa(seq)})
		seq++
		out = sse.AppendFrame(out, typ, eventJSON(typ, members...))
	}
	open := string(setMembers(nil, s, rawMember{"status", `"in_progress"`}, rawMember{"output", "[]"}, rawMember{"usage", "null"}))
	emit("response.created", rawMember{"response", open})
	emit("response.in_progress", rawMember{"response", open})
	for i, item := range r.Get("output").Array() {
		oi := rawMember{"output_index", itoa(i)}
		id := rawMember{"item_id", quoted(item.Get("id").Str)}
		switch item.Get("type").Str {
		case "message":
			emit("response.output_item.added", oi, rawMember{"item", string(setMembers(nil, item.Raw,
				rawMember{"status", `"in_progress"`}, rawMember{"content", "[]"}))})
			for j, part := range item.Get("content").Array() {
				ci := rawMember{"content_index", itoa(j)}
				switch part.Get("type").Str {
				case "output_text":
					empty := setMembers(nil, part.Raw, rawMember{"text", `""`}, rawMember{"annotations", "[]"})
					emit("response.content_part.added", id, oi, ci, rawMember{"part", string(empty)})
					text := part.Get("text").Raw
					emit("response.output_text.delta", id, oi, ci, rawMember{"delta", text}, rawMember{"logprobs", "[]"})
					emit("response.output_text.done", id, oi, ci, rawMember{"text", text}, rawMember{"logprobs", "[]"})
				case "refusal":
					empty := setMembers(nil, part.Raw, rawMember{"refusal", `""`})
					emit("response.content_part.added", id, oi, ci, rawMember{"part", string(empty)})
					text := part.Get("refusal").Raw
					emit("response.refusal.delta", id, oi, ci, rawMember{"delta", text})
					emit("response.refusal.done", id, oi, ci, rawMember{"refusal", text})
				default:
					emit("response.content_part.added", id, oi, ci, rawMember{"part", part.Raw})
				}
				emit("response.content_part.done", id, oi, ci, rawMember{"part", part.Raw})
			}
		case "function_call":
			emit("response.output_item.added", oi, rawMember{"item", string(setMembers(nil, item.Raw,
				rawMember{"status", `"in_progress"`}, rawMember{"arguments", `""`}))})
			args := item.Get("arguments").Raw
			if args == "" {
				args = `""`
			}
			emit("response.function_call_arguments.delta", id, oi, rawMember{"delta", args})
			if unfinished(item) {
				continue
			}
			emit("response.function_call_arguments.done", id, oi, rawMember{"name", quoted(item.Get("name").Str)}, rawMember{"arguments", args})
		case "custom_tool_call":
			emit("response.output_item.added", oi, rawMember{"item", string(setMembers(nil, item.Raw,
				rawMember{"status", `"in_progress"`}, rawMember{"input", `""`}))})
			input := item.Get("input").Raw
			if input == "" {
				input = `""`
			}
			emit("response.custom_tool_call_input.delta", id, oi, rawMember{"delta", input})
			if unfinished(item) {
				continue
			}
			emit("response.custom_tool_call_input.done", id, oi, rawMember{"input", input})
		case "reasoning":
			emit("response.output_item.added", oi, rawMember{"item", string(setMembers(nil, item.Raw, rawMember{"summary", "[]"}))})
			for j, part := range item.Get("summary").Array() {
				si := rawMember{"summary_index", itoa(j)}
				text := part.Get("text").Raw
				if text == "" {
					text = `""`
				}
				emit("response.reasoning_summary_part.added", id, oi, si, rawMember{"part", `{"type":"summary_text","text":""}`})
				emit("response.reasoning_summary_text.delta", id, oi, si, rawMember{"delta", text})
				emit("response.reasoning_summary_text.done", id, oi, si, rawMember{"text", text})
				emit("response.reasoning_summary_part.done", id, oi, si, rawMember{"part", part.Raw})
			}
		default:
			emit("response.output_item.added", oi, rawMember{"item", item.Raw})
		}
		emit("response.output_item.done", oi, rawMember{"item", item.Raw})
	}
	terminal := "response.completed"
	switch r.Get("status").Str {
	case "incomplete":
		terminal = "response.incomplete"
	case "failed", "cancelled":
		terminal = "response.failed"
	}
	emit(terminal, rawMember{"response", s})
	return out
}
