package streaming

import (
	"strconv"

	"gatekeeper/streaming/sse"
)

// Telling the agent about a call cut at the output limit.
//
// With Hold, a call the reply did not finish before its output limit is
// dropped, and an agent that sees a clean stop without it cannot tell that
// it was ever asked for. With NoticeCut the filter puts a text block in
// its place, just before the stop, saying what happened.

// NoticeCut makes the filter replace a client tool call that Hold drops
// at a stop for the output limit with a text block of text(call), in an
// Anthropic reply (the other APIs keep dropping it silently). Call it
// before the first AppendEvent.
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
	b = appendJSONLiteral(b, f.cutNotice(call))
	b = append(b, "}}"...)
	dst = sse.AppendFrame(dst, "content_block_delta", b)
	b = append(b[:0], `{"type":"content_block_stop","index":`...)
	b = strconv.AppendInt(b, out, 10)
	f.scratch = append(b, '}')
	return sse.AppendFrame(dst, "content_block_stop", f.scratch)
}
