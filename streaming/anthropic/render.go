package anthropic

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// RenderSSE returns a stream that carries the same reply as the
// non-streamed body (what the SDKs accumulate back into an equal message):
// message_start (the message with empty content, no stop), per block
// content_block_start, its content in deltas (text, input JSON, thinking
// and signature, citations), content_block_stop, then message_delta (stop
// and usage) and message_stop. A body that is not a message fails with an
// error wrapping streaming.ErrInvalidJSON.
func (d Dialect) RenderSSE(body []byte) ([]byte, error) {
	return reshape.Render(d, body, "an anthropic message", isReply, render)
}

// isReply reports whether r, a JSON object, is a reply RenderSSE renders.
func isReply(r gjson.Result) bool {
	return r.Get("type").Str == "message" && r.Get("content").IsArray()
}

func render(s string, r gjson.Result) []byte {
	var out []byte
	emit := func(typ string, members ...jsonscan.Set) {
		out = sse.AppendFrame(out, typ, jsonscan.Event(typ, members...))
	}
	usage := r.Get("usage").Raw
	if !jsonscan.IsObject(usage) {
		usage = `{"input_tokens":0,"output_tokens":0}`
	}
	start := jsonscan.SetMembers(nil, s,
		jsonscan.Set{Key: "content", Val: "[]"}, jsonscan.Set{Key: "stop_reason", Val: "null"}, jsonscan.Set{Key: "stop_sequence", Val: "null"},
		jsonscan.Set{Key: "stop_details", Val: ""}, jsonscan.Set{Key: "usage", Val: string(jsonscan.SetMembers(nil, usage, jsonscan.Set{Key: "output_tokens", Val: "0"}))})
	emit("message_start", jsonscan.Set{Key: "message", Val: string(start)})
	for i, block := range r.Get("content").Array() {
		idx := jsonscan.Set{Key: "index", Val: strconv.Itoa(i)}
		typ := block.Get("type").Str
		var deltas []string
		var open []jsonscan.Set
		switch {
		case typ == "text":
			open = []jsonscan.Set{{Key: "text", Val: `""`}}
			if block.Get("citations").IsArray() {
				open = append(open, jsonscan.Set{Key: "citations", Val: "[]"})
			}
			if t := block.Get("text").Str; t != "" {
				deltas = append(deltas, `{"type":"text_delta","text":`+jsonscan.Quote(t)+`}`)
			}
			for _, c := range block.Get("citations").Array() {
				deltas = append(deltas, `{"type":"citations_delta","citation":`+c.Raw+`}`)
			}
		case typ == "thinking":
			open = []jsonscan.Set{{Key: "thinking", Val: `""`}, {Key: "signature", Val: `""`}}
			if t := block.Get("thinking").Str; t != "" {
				deltas = append(deltas, `{"type":"thinking_delta","thinking":`+jsonscan.Quote(t)+`}`)
			}
			if sig := block.Get("signature"); sig.Type == gjson.String {
				deltas = append(deltas, `{"type":"signature_delta","signature":`+sig.Raw+`}`)
			}
		case block.Get("input").Exists():
			open = []jsonscan.Set{{Key: "input", Val: "{}"}}
			input := strings.TrimSpace(block.Get("input").Raw)
			if input == "{}" {
				input = ""
			}
			deltas = append(deltas, `{"type":"input_json_delta","partial_json":`+jsonscan.Quote(input)+`}`)
		}
		emit("content_block_start", idx, jsonscan.Set{Key: "content_block", Val: string(jsonscan.SetMembers(nil, block.Raw, open...))})
		for _, d := range deltas {
			emit("content_block_delta", idx, jsonscan.Set{Key: "delta", Val: d})
		}
		emit("content_block_stop", idx)
	}
	delta := []jsonscan.Set{{Key: "stop_reason", Val: r.Get("stop_reason").Raw}, {Key: "stop_sequence", Val: r.Get("stop_sequence").Raw}}
	delta = jsonscan.Members(delta, r.Raw, "stop_details", "container")
	for i := range delta {
		if delta[i].Val == "" {
			delta[i].Val = "null"
		}
	}
	emit("message_delta", jsonscan.Set{Key: "delta", Val: string(jsonscan.SetMembers(nil, "{}", delta...))}, jsonscan.Set{Key: "usage", Val: usage})
	emit("message_stop")
	return out
}
