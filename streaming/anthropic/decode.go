package anthropic

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

var _ streaming.Decoder = (*decoder)(nil)

// decoder decodes an Anthropic Messages stream: message_start,
// content blocks (start, deltas, stop) by index, message_delta and
// message_stop, with ping and error events anywhere.
//
// Content blocks are tracked by their index, because the index is what the
// final message's content array uses and what deltas and stops refer to.
type decoder struct {
	res streaming.Result

	// open holds the content blocks started and not yet stopped. A map keeps
	// lookups constant-time whatever indices or how many unclosed blocks a
	// stream brings.
	open map[int]anthropicBlock
	// errored is set once an error event arrived: the stream ended, not
	// cleanly, but it was not cut off either.
	errored bool

	scratch []byte // unescaped text of the delta being counted
}

type anthropicBlockKind uint8

const (
	anthropicOpaque anthropicBlockKind = iota // redacted thinking, results, unknown types
	anthropicText
	anthropicThinking
	anthropicTool
)

type anthropicBlock struct {
	kind anthropicBlockKind
	call int // position in Result.ToolCalls, for tool blocks
	// input is the block's input given whole in content_block_start, used
	// only when no input_json_delta follows.
	input []byte
}

func newDecoder() *decoder {
	return &decoder{res: streaming.Result{API: streaming.APIAnthropic}}
}

// Result is the reply so far.
func (d *decoder) Result() *streaming.Result { return &d.res }

// Finish marks the reply truncated when neither message_stop nor an error
// event arrived. Tool calls whose block never stopped stay incomplete.
func (d *decoder) Finish() *streaming.Result {
	d.res.Truncated = !d.res.Done && !d.errored
	return &d.res
}

// Decode handles one event. The event type is taken from the JSON "type"
// field, which Anthropic always repeats, and from the SSE event name when
// the payload has none. Events without data are keepalives or comments.
// An unterminated event (the stream ended before its blank line) is decoded
// like any other when its data is whole JSON, as the SDKs do when they flush
// their decoder at the end of a stream.
func (d *decoder) Decode(ev *sse.Event) {
	if !ev.HasData {
		return
	}
	if !streaming.ValidJSON(ev) {
		d.res.AddUnparsed(fmt.Errorf("%w: anthropic %q event data", streaming.ErrInvalidJSON, ev.Name))
		return
	}
	// The data as ValidJSON left it: rewritten into one reading when it
	// repeated a member.
	data := ev.Data
	d.res.Ambiguous = d.res.Ambiguous || ev.JSON == sse.JSONRepeated
	js := jsonscan.View(data)
	// One pass over the top level finds what a content_block_delta, by far
	// the most frequent event, needs; the rarer events use gjson paths.
	var typ, index, delta jsonscan.Member
	for m, next, ok := jsonscan.NextMember(js, jsonscan.ObjectStart(js)); ok; m, next, ok = jsonscan.NextMember(js, next) {
		switch m.Name() {
		case "type":
			typ = jsonscan.FirstMember(typ, m)
		case "index":
			index = jsonscan.FirstMember(index, m)
		case "delta":
			delta = jsonscan.FirstMember(delta, m)
		}
	}
	name, _ := jsonscan.StringValue(typ.Val)
	if name == "" || string(ev.Name) == "error" {
		name = jsonscan.View(ev.Name)
	}
	var err error
	switch name {
	case "content_block_delta":
		err = d.blockDelta(data, index, delta)
	case "content_block_start":
		err = d.blockStart(data, js, index)
	case "content_block_stop":
		err = d.blockStop(index)
	case "message_start":
		err = d.messageStart(js)
	case "message_delta":
		err = d.messageDelta(js)
	case "message_stop":
		d.res.Done = true
	case "ping":
	case "error":
		err = d.error(data, js)
	default:
		// Anthropic announces it will add event types; they carry nothing
		// this decoder accounts for.
	}
	if err != nil {
		d.res.AddUnparsed(err)
	}
}

func (d *decoder) messageStart(js string) error {
	msg := gjson.Get(js, "message")
	if !msg.IsObject() {
		return anthropicEventErr("message_start", "no message object")
	}
	d.res.MessageID = jsonscan.CloneString(msg.Get("id"))
	d.res.Model = jsonscan.CloneString(msg.Get("model"))
	var err error
	if u := msg.Get("usage"); u.IsObject() {
		err = overlayAnthropicUsage(&d.res.Usage, u)
		d.res.UsageSeen = true
	}
	return err
}

func (d *decoder) messageDelta(js string) error {
	var err error
	// Usage first: a stop seen by the caller then has the final counts.
	if u := gjson.Get(js, "usage"); u.IsObject() {
		err = overlayAnthropicUsage(&d.res.Usage, u)
		d.res.UsageSeen, d.res.UsageFinal = true, true
	}
	delta := gjson.Get(js, "delta")
	if !delta.IsObject() {
		return anthropicEventErr("message_delta", "no delta object")
	}
	switch sr := delta.Get("stop_reason"); sr.Type {
	case gjson.String:
		d.stop(anthropicStop(sr.Str))
	case gjson.Null: // absent or null: no stop in this delta
	default:
		return anthropicEventErr("message_delta", "stop_reason is not a string")
	}
	return err
}

// stop records the stop of choice 0. Anthropic has one choice, so a later
// stop (an error after message_delta) replaces the earlier one.
func (d *decoder) stop(s streaming.Stop) {
	if len(d.res.Stops) == 0 {
		d.res.Stops = append(d.res.Stops, s)
	} else {
		d.res.Stops[0] = s
	}
}

func (d *decoder) error(data []byte, js string) error {
	pe := streaming.ProviderError{Raw: bytes.Clone(data)}
	var err error
	if e := gjson.Get(js, "error"); e.IsObject() {
		pe.Type = jsonscan.CloneString(e.Get("type"))
		pe.Message = jsonscan.CloneString(e.Get("message"))
	}
	if pe.Type == "" {
		err = anthropicEventErr("error", "no error type")
	}
	d.res.Errors = append(d.res.Errors, pe)
	d.errored = true
	d.stop(streaming.Stop{Reason: streaming.StopError, Raw: string(streaming.StopError)})
	return err
}

func (d *decoder) blockStart(data []byte, js string, indexMember jsonscan.Member) error {
	index, ok := jsonscan.MemberIndex(indexMember)
	if !ok {
		return anthropicEventErr("content_block_start", "no valid index")
	}
	cb := gjson.Get(js, "content_block")
	typ := cb.Get("type")
	if !cb.IsObject() || typ.Type != gjson.String {
		return anthropicEventErr("content_block_start", "no content_block type")
	}
	var err error
	if d.open == nil {
		d.open = make(map[int]anthropicBlock)
	} else if _, dup := d.open[index]; dup {
		err = anthropicEventErr("content_block_start", "block started twice")
	}
	var b anthropicBlock
	switch typ.Str {
	case "text":
		b.kind = anthropicText
		if t := cb.Get("text"); t.Type == gjson.String && t.Str != "" {
			d.countText(true, jsonscan.Bytes(data, t))
		}
	case "thinking":
		b.kind = anthropicThinking
		if t := cb.Get("thinking"); t.Type == gjson.String && t.Str != "" {
			d.countText(false, jsonscan.Bytes(data, t))
		}
	default:
		id, name := cb.Get("id"), cb.Get("name")
		named := id.Type == gjson.String && name.Type == gjson.String
		if !isAnthropicToolType(typ.Str, named) {
			break // redacted_thinking, *_tool_result and unknown blocks are opaque
		}
		if !named && err == nil {
			err = anthropicEventErr("content_block_start", typ.Str+" block without id or name")
		}
		tc := streaming.ToolCall{
			Index:  index,
			Type:   anthropicToolType(typ.Str),
			ID:     jsonscan.CloneString(id),
			Name:   jsonscan.CloneString(name),
			Server: typ.Str != "tool_use",
		}
		if in := cb.Get("input"); in.IsObject() && !emptyJSONObject(in.Raw) {
			b.input = []byte(in.Raw)
		}
		b.kind, b.call = anthropicTool, len(d.res.ToolCalls)
		d.res.ToolCalls = append(d.res.ToolCalls, tc)
	}
	d.open[index] = b
	return err
}

func (d *decoder) blockDelta(data []byte, indexMember, deltaMember jsonscan.Member) error {
	index, ok := jsonscan.MemberIndex(indexMember)
	if !ok {
		return anthropicEventErr("content_block_delta", "no valid index")
	}
	// The field a delta carries is named by its type, which may come after
	// it: keep each candidate until the type is known.
	var typ jsonscan.Member
	var fields [4]jsonscan.Member // text, thinking, partial_json, signature
	dv := deltaMember.Val
	for m, next, ok := jsonscan.NextMember(dv, jsonscan.ObjectStart(dv)); ok; m, next, ok = jsonscan.NextMember(dv, next) {
		switch m.Name() {
		case "type":
			typ = jsonscan.FirstMember(typ, m)
		case "text":
			fields[0] = jsonscan.FirstMember(fields[0], m)
		case "thinking":
			fields[1] = jsonscan.FirstMember(fields[1], m)
		case "partial_json":
			fields[2] = jsonscan.FirstMember(fields[2], m)
		case "signature":
			fields[3] = jsonscan.FirstMember(fields[3], m)
		}
	}
	kind, ok := jsonscan.StringValue(typ.Val)
	if !ok {
		return anthropicEventErr("content_block_delta", "no delta type")
	}
	b, ok := d.open[index]
	if !ok {
		return anthropicEventErr("content_block_delta", "delta for a block not started")
	}
	var text jsonscan.Member
	switch kind {
	case "text_delta":
		text = fields[0]
	case "thinking_delta":
		text = fields[1]
	case "input_json_delta":
		text = fields[2]
	case "signature_delta":
		text = fields[3]
	default:
		return nil // citations_delta and future delta types carry nothing counted here
	}
	if !jsonscan.IsStringRaw(text.Val) {
		return anthropicEventErr("content_block_delta", kind+" without its string field")
	}
	off := deltaMember.Off + text.Off
	raw := data[off : off+len(text.Val) : off+len(text.Val)]
	switch kind {
	case "text_delta":
		d.countText(true, raw)
	case "thinking_delta":
		d.countText(false, raw)
	case "input_json_delta":
		switch b.kind {
		case anthropicTool:
			tc := &d.res.ToolCalls[b.call]
			n := len(tc.Arguments)
			tc.Arguments = jsonscan.AppendDecoded(tc.Arguments, text.Val)
			frag := tc.Arguments[n:len(tc.Arguments):len(tc.Arguments)]
			d.res.OutputBytes += int64(len(frag))
		case anthropicText, anthropicThinking:
			return anthropicEventErr("content_block_delta", "input_json_delta for a text block")
		case anthropicOpaque: // nothing is assembled from opaque blocks
		}
	}
	return nil
}

// countText counts one text (isText) or thinking fragment in the output;
// s is the JSON string literal, quotes included, as it sits in the event
// data.
func (d *decoder) countText(isText bool, s []byte) {
	var text []byte
	if bytes.IndexByte(s, '\\') < 0 {
		text = s[1 : len(s)-1 : len(s)-1]
	} else {
		d.scratch = jsonscan.AppendDecoded(d.scratch[:0], jsonscan.View(s))
		text = d.scratch[:len(d.scratch):len(d.scratch)]
	}
	d.res.OutputBytes += int64(len(text))
	if isText {
		d.res.TextBytes += int64(len(text))
	}
}

func (d *decoder) blockStop(indexMember jsonscan.Member) error {
	index, ok := jsonscan.MemberIndex(indexMember)
	if !ok {
		return anthropicEventErr("content_block_stop", "no valid index")
	}
	b, ok := d.open[index]
	if !ok {
		return anthropicEventErr("content_block_stop", "stop for a block not started")
	}
	delete(d.open, index)
	if b.kind != anthropicTool {
		return nil
	}
	tc := &d.res.ToolCalls[b.call]
	if len(tc.Arguments) == 0 {
		// Streams send input as deltas; a call without any has no input.
		tc.Arguments = b.input
		if tc.Arguments == nil {
			tc.Arguments = []byte("{}")
		}
	}
	tc.Complete = true
	return nil
}

// decodeJSON decodes a non-streaming Messages reply: a Message or
// an error body.
func decodeJSON(body []byte) (*streaming.Result, error) {
	body, repeated := streaming.Unrepeated(body)
	if !gjson.ValidBytes(body) {
		return nil, fmt.Errorf("%w: anthropic reply body", streaming.ErrInvalidJSON)
	}
	js := jsonscan.View(body)
	root := gjson.Parse(js)
	if !root.IsObject() {
		return nil, fmt.Errorf("%w: anthropic reply body is not an object", streaming.ErrInvalidJSON)
	}
	res := &streaming.Result{API: streaming.APIAnthropic, Ambiguous: repeated}
	content := root.Get("content")
	switch typ := root.Get("type"); {
	case typ.Str == "error":
		pe := streaming.ProviderError{Raw: bytes.Clone(body)}
		if e := root.Get("error"); e.IsObject() {
			pe.Type = jsonscan.CloneString(e.Get("type"))
			pe.Message = jsonscan.CloneString(e.Get("message"))
		}
		if pe.Type == "" {
			res.AddUnparsed(anthropicEventErr("error", "no error type"))
		}
		res.Errors = append(res.Errors, pe)
		res.Stops = append(res.Stops, streaming.Stop{Reason: streaming.StopError, Raw: string(streaming.StopError)})
		return res, nil
	case typ.Str == "message", !typ.Exists() && content.IsArray():
	default:
		return nil, fmt.Errorf("%w: anthropic reply body is neither a message nor an error", streaming.ErrInvalidJSON)
	}
	res.MessageID = jsonscan.CloneString(root.Get("id"))
	res.Model = jsonscan.CloneString(root.Get("model"))
	index := 0
	content.ForEach(func(_, block gjson.Result) bool {
		decodeAnthropicBlock(res, index, block)
		index++
		return true
	})
	switch sr := root.Get("stop_reason"); sr.Type {
	case gjson.String:
		res.Stops = append(res.Stops, anthropicStop(sr.Str))
	case gjson.Null:
	default:
		res.AddUnparsed(anthropicEventErr("message", "stop_reason is not a string"))
	}
	if u := root.Get("usage"); u.IsObject() {
		if err := overlayAnthropicUsage(&res.Usage, u); err != nil {
			res.AddUnparsed(err)
		}
		res.UsageSeen, res.UsageFinal = true, true
	}
	res.Done = true
	return res, nil
}

// decodeAnthropicBlock adds one content block of a whole Message to res.
func decodeAnthropicBlock(res *streaming.Result, index int, block gjson.Result) {
	typ := block.Get("type")
	if typ.Type != gjson.String {
		res.AddUnparsed(anthropicEventErr("message", "content block without type"))
		return
	}
	switch typ.Str {
	case "text":
		res.OutputBytes += int64(len(block.Get("text").Str))
		res.TextBytes += int64(len(block.Get("text").Str))
		return
	case "thinking":
		res.OutputBytes += int64(len(block.Get("thinking").Str))
		return
	}
	id, name := block.Get("id"), block.Get("name")
	named := id.Type == gjson.String && name.Type == gjson.String
	if !isAnthropicToolType(typ.Str, named) {
		return
	}
	if !named {
		res.AddUnparsed(anthropicEventErr("message", typ.Str+" block without id or name"))
	}
	args := []byte("{}")
	if in := block.Get("input"); in.Exists() {
		args = []byte(in.Raw)
	}
	res.OutputBytes += int64(len(args))
	res.ToolCalls = append(res.ToolCalls, streaming.ToolCall{
		Index:     index,
		Type:      anthropicToolType(typ.Str),
		ID:        jsonscan.CloneString(id),
		Name:      jsonscan.CloneString(name),
		Arguments: args,
		Complete:  true,
		Server:    typ.Str != "tool_use",
	})
}

// isAnthropicToolType says whether a content block of type typ is a call
// the model made. Beyond the known types, any named block whose type ends in
// "tool_use" counts, so that a new server tool is seen as a call rather than
// dropped.
func isAnthropicToolType(typ string, named bool) bool {
	switch typ {
	case "tool_use", "server_tool_use", "mcp_tool_use":
		return true
	}
	return named && strings.HasSuffix(typ, "tool_use")
}

// anthropicToolType returns typ without allocating for the known types.
func anthropicToolType(typ string) string {
	switch typ {
	case "tool_use":
		return "tool_use"
	case "server_tool_use":
		return "server_tool_use"
	case "mcp_tool_use":
		return "mcp_tool_use"
	}
	return strings.Clone(typ)
}

// anthropicStop normalizes a stop_reason. Only
// model_context_window_exceeded changes name: it is a length stop like
// max_tokens. Values not known today are kept as they came.
func anthropicStop(raw string) streaming.Stop {
	var r streaming.StopReason
	switch raw {
	case "end_turn":
		r = streaming.StopEndTurn
	case "max_tokens":
		r = streaming.StopMaxTokens
	case "stop_sequence":
		r = streaming.StopSequence
	case "tool_use":
		r = streaming.StopToolUse
	case "pause_turn":
		r = streaming.StopPauseTurn
	case "refusal":
		r = streaming.StopRefusal
	case "model_context_window_exceeded":
		return streaming.Stop{Reason: streaming.StopMaxTokens, Raw: "model_context_window_exceeded"}
	default:
		raw = strings.Clone(raw)
		return streaming.Stop{Reason: streaming.StopReason(raw), Raw: raw}
	}
	return streaming.Stop{Reason: r, Raw: string(r)}
}

// overlayAnthropicUsage sets in u every count present in v. Anthropic's
// counts are cumulative, so the last report of a field wins; a field a
// report leaves out (or sets to null) keeps its earlier value. A count that
// is not a non-negative number is skipped and reported.
func overlayAnthropicUsage(u *streaming.Usage, v gjson.Result) error {
	var bad string
	set := func(dst *int64, r gjson.Result, name string) {
		switch {
		case r.Type == gjson.Null:
		case r.Type == gjson.Number && r.Num >= 0:
			*dst = r.Int()
		default:
			bad = name
		}
	}
	v.ForEach(func(key, val gjson.Result) bool {
		switch key.Str {
		case "input_tokens":
			set(&u.InputTokens, val, key.Str)
		case "cache_read_input_tokens":
			set(&u.CachedInputTokens, val, key.Str)
		case "cache_creation_input_tokens":
			set(&u.CacheWriteTokens, val, key.Str)
		case "output_tokens":
			set(&u.OutputTokens, val, key.Str)
		case "output_tokens_details":
			set(&u.ReasoningTokens, val.Get("thinking_tokens"), "output_tokens_details.thinking_tokens")
		}
		return true
	})
	if bad != "" {
		return anthropicEventErr("usage", bad+" is not a count")
	}
	return nil
}

func anthropicEventErr(event, what string) error {
	return fmt.Errorf("%w: anthropic %s: %s", streaming.ErrInvalidJSON, event, what)
}

// emptyJSONObject reports whether raw is an object with no members.
func emptyJSONObject(raw string) bool {
	return strings.TrimSpace(raw[1:len(raw)-1]) == ""
}
