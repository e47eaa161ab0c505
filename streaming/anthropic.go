package streaming

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

var _ Decoder = (*anthropicDecoder)(nil)

// anthropicDecoder decodes an Anthropic Messages stream (WIRE.md §3).
//
// Content blocks are tracked by their index, because the index is what the
// final message's content array uses and what deltas and stops refer to.
type anthropicDecoder struct {
	res Result

	// open holds the content blocks started and not yet stopped. A map keeps
	// lookups constant-time whatever indices or how many unclosed blocks a
	// stream brings.
	open map[int]anthropicBlock
	// errored is set once an error event arrived: the stream ended, not
	// cleanly, but it was not cut off either.
	errored bool

	part    Part   // reused for every emit: a Part is only valid during its callback
	scratch []byte // unescaped text of the delta being emitted
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

func newAnthropicDecoder() *anthropicDecoder {
	return &anthropicDecoder{res: Result{API: APIAnthropic}}
}

// Result is the reply so far.
func (d *anthropicDecoder) Result() *Result { return &d.res }

// Finish marks the reply truncated when neither message_stop nor an error
// event arrived. Tool calls whose block never stopped stay incomplete.
func (d *anthropicDecoder) Finish() *Result {
	d.res.Truncated = !d.res.Done && !d.errored
	return &d.res
}

// Decode handles one event. The event type is taken from the JSON "type"
// field, which Anthropic always repeats, and from the SSE event name when
// the payload has none. Events without data are keepalives or comments.
// An unterminated event (the stream ended before its blank line) is decoded
// like any other when its data is whole JSON, as the SDKs do when they flush
// their decoder at the end of a stream.
func (d *anthropicDecoder) Decode(ev *Event, emit func(*Part)) {
	if !ev.HasData {
		return
	}
	data := ev.Data
	if !gjson.ValidBytes(data) {
		d.res.unparsed(fmt.Errorf("%w: anthropic %q event data", ErrInvalidJSON, ev.Name))
		return
	}
	js := jsonView(data)
	typ := gjson.Get(js, "type").Str
	if typ == "" || string(ev.Name) == "error" {
		typ = jsonView(ev.Name)
	}
	var err error
	switch typ {
	case "content_block_delta":
		err = d.blockDelta(data, js, emit)
	case "content_block_start":
		err = d.blockStart(data, js, emit)
	case "content_block_stop":
		err = d.blockStop(js, emit)
	case "message_start":
		err = d.messageStart(js, emit)
	case "message_delta":
		err = d.messageDelta(js, emit)
	case "message_stop":
		d.res.Done = true
		d.emit(emit, Part{Kind: PartDone})
	case "ping":
		d.emit(emit, Part{Kind: PartPing})
	case "error":
		err = d.error(data, js, emit)
	default:
		// Anthropic announces it will add event types; they carry nothing
		// this decoder accounts for.
	}
	if err != nil {
		d.res.unparsed(err)
	}
}

func (d *anthropicDecoder) emit(emit func(*Part), p Part) {
	if emit == nil {
		return
	}
	d.part = p
	emit(&d.part)
}

func (d *anthropicDecoder) messageStart(js string, emit func(*Part)) error {
	msg := gjson.Get(js, "message")
	if !msg.IsObject() {
		return anthropicEventErr("message_start", "no message object")
	}
	d.res.MessageID = cloneStr(msg.Get("id"))
	d.res.Model = cloneStr(msg.Get("model"))
	var err error
	if u := msg.Get("usage"); u.IsObject() {
		err = overlayAnthropicUsage(&d.res.Usage, u)
		d.res.UsageSeen = true
	}
	d.emit(emit, Part{Kind: PartMessageStart, ID: d.res.MessageID, Model: d.res.Model, Usage: d.res.Usage})
	return err
}

func (d *anthropicDecoder) messageDelta(js string, emit func(*Part)) error {
	var err error
	// Usage first: a stop seen by the caller then has the final counts.
	if u := gjson.Get(js, "usage"); u.IsObject() {
		err = overlayAnthropicUsage(&d.res.Usage, u)
		d.res.UsageSeen = true
		d.emit(emit, Part{Kind: PartUsage, Usage: d.res.Usage})
	}
	delta := gjson.Get(js, "delta")
	if !delta.IsObject() {
		return anthropicEventErr("message_delta", "no delta object")
	}
	switch sr := delta.Get("stop_reason"); sr.Type {
	case gjson.String:
		d.stop(anthropicStop(sr.Str), emit)
	case gjson.Null: // absent or null: no stop in this delta
	default:
		return anthropicEventErr("message_delta", "stop_reason is not a string")
	}
	return err
}

// stop records the stop of choice 0. Anthropic has one choice, so a later
// stop (an error after message_delta) replaces the earlier one.
func (d *anthropicDecoder) stop(s Stop, emit func(*Part)) {
	if len(d.res.Stops) == 0 {
		d.res.Stops = append(d.res.Stops, s)
	} else {
		d.res.Stops[0] = s
	}
	d.emit(emit, Part{Kind: PartStop, Stop: s})
}

func (d *anthropicDecoder) error(data []byte, js string, emit func(*Part)) error {
	pe := ProviderError{Raw: bytes.Clone(data)}
	var err error
	if e := gjson.Get(js, "error"); e.IsObject() {
		pe.Type = cloneStr(e.Get("type"))
		pe.Message = cloneStr(e.Get("message"))
	}
	if pe.Type == "" {
		err = anthropicEventErr("error", "no error type")
	}
	d.res.Errors = append(d.res.Errors, pe)
	d.errored = true
	d.emit(emit, Part{Kind: PartError, Err: &pe})
	d.stop(Stop{Reason: StopError, Raw: string(StopError)}, emit)
	return err
}

func (d *anthropicDecoder) blockStart(data []byte, js string, emit func(*Part)) error {
	index, ok := blockIndex(gjson.Get(js, "index"))
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
			d.emitText(PartTextDelta, index, jsonBytes(data, t), emit)
		}
	case "thinking":
		b.kind = anthropicThinking
		if t := cb.Get("thinking"); t.Type == gjson.String && t.Str != "" {
			d.emitText(PartThinkingDelta, index, jsonBytes(data, t), emit)
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
		tc := ToolCall{
			Index:  index,
			Type:   anthropicToolType(typ.Str),
			ID:     cloneStr(id),
			Name:   cloneStr(name),
			Server: typ.Str != "tool_use",
		}
		if in := cb.Get("input"); in.IsObject() && !emptyJSONObject(in.Raw) {
			b.input = []byte(in.Raw)
		}
		b.kind, b.call = anthropicTool, len(d.res.ToolCalls)
		d.res.ToolCalls = append(d.res.ToolCalls, tc)
		d.emit(emit, Part{Kind: PartToolCallStart, Index: index, ID: tc.ID, Name: tc.Name, Type: tc.Type})
	}
	d.open[index] = b
	return err
}

func (d *anthropicDecoder) blockDelta(data []byte, js string, emit func(*Part)) error {
	index, ok := blockIndex(gjson.Get(js, "index"))
	if !ok {
		return anthropicEventErr("content_block_delta", "no valid index")
	}
	delta := gjson.Get(js, "delta")
	typ := delta.Get("type")
	if !delta.IsObject() || typ.Type != gjson.String {
		return anthropicEventErr("content_block_delta", "no delta type")
	}
	b, ok := d.open[index]
	if !ok {
		return anthropicEventErr("content_block_delta", "delta for a block not started")
	}
	var field string
	switch typ.Str {
	case "text_delta":
		field = "text"
	case "thinking_delta":
		field = "thinking"
	case "input_json_delta":
		field = "partial_json"
	case "signature_delta":
		field = "signature"
	default:
		return nil // citations_delta and future delta types carry nothing counted here
	}
	v := delta.Get(field)
	if v.Type != gjson.String {
		return anthropicEventErr("content_block_delta", typ.Str+" without "+field)
	}
	switch typ.Str {
	case "text_delta":
		d.emitText(PartTextDelta, index, jsonBytes(data, v), emit)
	case "thinking_delta":
		d.emitText(PartThinkingDelta, index, jsonBytes(data, v), emit)
	case "input_json_delta":
		switch b.kind {
		case anthropicTool:
			tc := &d.res.ToolCalls[b.call]
			n := len(tc.Arguments)
			tc.Arguments = appendJSONString(tc.Arguments, v.Raw)
			frag := tc.Arguments[n:len(tc.Arguments):len(tc.Arguments)]
			d.res.OutputBytes += int64(len(frag))
			d.emit(emit, Part{Kind: PartToolCallArgs, Index: index, Text: frag})
		case anthropicText, anthropicThinking:
			return anthropicEventErr("content_block_delta", "input_json_delta for a text block")
		}
	}
	return nil
}

// emitText emits one text or thinking fragment; s is the JSON string
// literal, quotes included, as it sits in the event data.
func (d *anthropicDecoder) emitText(kind PartKind, index int, s []byte, emit func(*Part)) {
	var text []byte
	if bytes.IndexByte(s, '\\') < 0 {
		text = s[1 : len(s)-1 : len(s)-1]
	} else {
		d.scratch = appendJSONString(d.scratch[:0], jsonView(s))
		text = d.scratch[:len(d.scratch):len(d.scratch)]
	}
	d.res.OutputBytes += int64(len(text))
	d.emit(emit, Part{Kind: kind, Index: index, Text: text})
}

func (d *anthropicDecoder) blockStop(js string, emit func(*Part)) error {
	index, ok := blockIndex(gjson.Get(js, "index"))
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
	args := tc.Arguments[:len(tc.Arguments):len(tc.Arguments)]
	d.emit(emit, Part{Kind: PartToolCallEnd, Index: index, ID: tc.ID, Name: tc.Name, Type: tc.Type, Text: args})
	return nil
}

// decodeAnthropicJSON decodes a non-streaming Messages reply: a Message or
// an error body.
func decodeAnthropicJSON(body []byte) (*Result, error) {
	if !gjson.ValidBytes(body) {
		return nil, fmt.Errorf("%w: anthropic reply body", ErrInvalidJSON)
	}
	js := jsonView(body)
	root := gjson.Parse(js)
	if !root.IsObject() {
		return nil, fmt.Errorf("%w: anthropic reply body is not an object", ErrInvalidJSON)
	}
	res := &Result{API: APIAnthropic}
	content := root.Get("content")
	switch typ := root.Get("type"); {
	case typ.Str == "error":
		pe := ProviderError{Raw: bytes.Clone(body)}
		if e := root.Get("error"); e.IsObject() {
			pe.Type = cloneStr(e.Get("type"))
			pe.Message = cloneStr(e.Get("message"))
		}
		if pe.Type == "" {
			res.unparsed(anthropicEventErr("error", "no error type"))
		}
		res.Errors = append(res.Errors, pe)
		res.Stops = append(res.Stops, Stop{Reason: StopError, Raw: string(StopError)})
		return res, nil
	case typ.Str == "message", !typ.Exists() && content.IsArray():
	default:
		return nil, fmt.Errorf("%w: anthropic reply body is neither a message nor an error", ErrInvalidJSON)
	}
	res.MessageID = cloneStr(root.Get("id"))
	res.Model = cloneStr(root.Get("model"))
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
		res.unparsed(anthropicEventErr("message", "stop_reason is not a string"))
	}
	if u := root.Get("usage"); u.IsObject() {
		if err := overlayAnthropicUsage(&res.Usage, u); err != nil {
			res.unparsed(err)
		}
		res.UsageSeen = true
	}
	res.Done = true
	return res, nil
}

// decodeAnthropicBlock adds one content block of a whole Message to res.
func decodeAnthropicBlock(res *Result, index int, block gjson.Result) {
	typ := block.Get("type")
	if typ.Type != gjson.String {
		res.unparsed(anthropicEventErr("message", "content block without type"))
		return
	}
	switch typ.Str {
	case "text":
		res.OutputBytes += int64(len(block.Get("text").Str))
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
		res.unparsed(anthropicEventErr("message", typ.Str+" block without id or name"))
	}
	args := []byte("{}")
	if in := block.Get("input"); in.Exists() {
		args = []byte(in.Raw)
	}
	res.OutputBytes += int64(len(args))
	res.ToolCalls = append(res.ToolCalls, ToolCall{
		Index:     index,
		Type:      anthropicToolType(typ.Str),
		ID:        cloneStr(id),
		Name:      cloneStr(name),
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
func anthropicStop(raw string) Stop {
	var r StopReason
	switch raw {
	case "end_turn":
		r = StopEndTurn
	case "max_tokens":
		r = StopMaxTokens
	case "stop_sequence":
		r = StopSequence
	case "tool_use":
		r = StopToolUse
	case "pause_turn":
		r = StopPauseTurn
	case "refusal":
		r = StopRefusal
	case "model_context_window_exceeded":
		return Stop{Reason: StopMaxTokens, Raw: "model_context_window_exceeded"}
	default:
		raw = strings.Clone(raw)
		return Stop{Reason: StopReason(raw), Raw: raw}
	}
	return Stop{Reason: r, Raw: string(r)}
}

// overlayAnthropicUsage sets in u every count present in v. Anthropic's
// counts are cumulative, so the last report of a field wins; a field a
// report leaves out (or sets to null) keeps its earlier value. A count that
// is not a non-negative number is skipped and reported.
func overlayAnthropicUsage(u *Usage, v gjson.Result) error {
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
	return fmt.Errorf("%w: anthropic %s: %s", ErrInvalidJSON, event, what)
}

// blockIndex reads a content block index: a non-negative integer.
func blockIndex(r gjson.Result) (int, bool) {
	if r.Type != gjson.Number || r.Num < 0 || r.Num > 1<<31 || r.Num != float64(int64(r.Num)) {
		return 0, false
	}
	return int(r.Num), true
}

// emptyJSONObject reports whether raw is an object with no members.
func emptyJSONObject(raw string) bool {
	return strings.TrimSpace(raw[1:len(raw)-1]) == ""
}

// cloneStr copies a string value out of the event data (which the Reader
// reuses), or returns "" when r is not a string.
func cloneStr(r gjson.Result) string {
	if r.Type != gjson.String {
		return ""
	}
	return strings.Clone(r.Str)
}

// jsonView returns b as a string without copying, so gjson can read event
// data without an allocation per lookup. The string must not outlive b's
// contents: every value kept past the event goes through cloneStr or a copy.
func jsonView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// jsonBytes returns the bytes of the JSON value r, found in data, without
// copying.
func jsonBytes(data []byte, r gjson.Result) []byte {
	end := r.Index + len(r.Raw)
	if r.Index > 0 && end <= len(data) && jsonView(data[r.Index:end]) == r.Raw {
		return data[r.Index:end:end]
	}
	return []byte(r.Raw) // gjson did not know the position: copy
}

// appendJSONString appends the decoded value of the JSON string literal lit
// (quotes included, already validated) to dst. It exists so that argument
// fragments are decoded straight into the call's buffer, with no string
// allocated per fragment.
func appendJSONString(dst []byte, lit string) []byte {
	s := lit[1 : len(lit)-1]
	for {
		i := strings.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) < 2 {
			return dst // cannot happen in validated JSON
		}
		c := s[1]
		s = s[2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, rest := hex4(s)
			s = rest
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					r2, _ = hex4(s[2:])
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					s = s[6:]
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(s string) (rune, string) {
	if len(s) < 4 {
		return utf8.RuneError, ""
	}
	var r rune
	for i := range 4 {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return utf8.RuneError, s[4:]
		}
		r = r<<4 | rune(c)
	}
	return r, s[4:]
}
