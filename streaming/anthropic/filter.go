package anthropic

import (
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// Anthropic Messages: a refused tool_use block becomes a text block at the
// same index.

// callFilter is the call filter's Rules for Messages, run by the engine
// it embeds.
type callFilter struct {
	*callfilter.Filter

	withheld  []int                // indices of refused blocks whose stop has not come
	refused   bool                 // a call of the message was refused
	dropped   bool                 // a held call was dropped at the stop
	delivered bool                 // an allowed client tool_use was delivered
	pos       callfilter.Positions // block indices, with Hold
}

var _ callfilter.Rules = (*callFilter)(nil)

// newRules returns the rules run by the engine e.
func newRules(e *callfilter.Filter) *callFilter {
	r := &callFilter{Filter: e}
	r.pos.Init()
	return r
}

// API is streaming.APIAnthropic.
func (*callFilter) API() streaming.API { return streaming.APIAnthropic }

// FilterEvent reads one event of a Messages stream.
func (f *callFilter) FilterEvent(dst []byte, ev *sse.Event) []byte {
	js := jsonscan.View(ev.Data)
	if (f.refused || f.Held.Count > 0) && !streaming.ValidJSON(ev) {
		return dst // f data line that is not JSON
	}
	var typ, index, block, delta jsonscan.Member
	for m, next, ok := jsonscan.NextMember(js, jsonscan.ObjectStart(js)); ok; m, next, ok = jsonscan.NextMember(js, next) {
		switch m.Name() {
		case "type":
			typ = jsonscan.FirstMember(typ, m)
		case "index":
			index = jsonscan.FirstMember(index, m)
		case "content_block":
			block = jsonscan.FirstMember(block, m)
		case "delta":
			delta = jsonscan.FirstMember(delta, m)
		}
	}
	name, _ := jsonscan.StringValue(typ.Val)
	if name == "" || string(ev.Name) == "error" {
		name = jsonscan.View(ev.Name)
	}
	switch name {
	case "content_block_start":
		return f.start(dst, ev, index, block)
	case "content_block_delta":
		if f.withheldAt(index) >= 0 {
			return dst
		}
		if c := f.heldAt(index); c >= 0 {
			return f.keepHeld(dst, ev, c, false, delta)
		}
	case "content_block_stop":
		if i := f.withheldAt(index); i >= 0 {
			pos := f.withheld[i]
			f.withheld = slices.Delete(f.withheld, i, i+1)
			b := append(f.Scratch[:0], `{"type":"content_block_stop","index":`...)
			b = strconv.AppendInt(b, int64(f.out(pos)), 10)
			f.Scratch = append(b, '}')
			return f.frame(dst, ev, sse.FrameName(ev, "content_block_stop"), pos, f.Scratch)
		}
		if c := f.heldAt(index); c >= 0 {
			return f.keepHeld(dst, ev, c, true, delta)
		}
	case "message_delta":
		if f.Held.Count > 0 {
			dst = f.releaseHeld(dst, js)
		}
		if (f.refused || f.dropped) && !f.delivered {
			return f.messageDelta(dst, ev, js)
		}
	case "message_stop", "error":
		// The reply ends, or failed, with no stop said for what is held.
		dst = f.DropAll(dst)
	}
	return f.pass(dst, ev, index)
}

// withheldAt is the position in withheld of the block index m names, -1
// when that block is not withheld.
func (a *callFilter) withheldAt(m jsonscan.Member) int {
	if len(a.withheld) == 0 {
		return -1
	}
	pos, ok := jsonscan.MemberIndex(m)
	if !ok {
		return -1
	}
	return slices.Index(a.withheld, pos)
}

// out is the index the client sees for block pos, delivered now;
// while a call is held it is pos, renumbered when it goes out
// (AppendPassed).
func (f *callFilter) out(pos int) int {
	if !f.Held.On || f.Held.Suffix() {
		return pos
	}
	return f.pos.Out(pos)
}

// frame appends an event the filter wrote about block pos, or
// keeps it in its place while a call before it is held.
func (f *callFilter) frame(dst []byte, ev *sse.Event, name string, pos int, data []byte) []byte {
	if f.Held.Suffix() {
		n := len(dst)
		dst = sse.AppendFrame(dst, name, data)
		f.Held.KeepPassed(dst[n:], pos, false)
		return dst[:n]
	}
	return sse.AppendFrame(sse.KeepBOM(dst, ev), name, data)
}

// pass passes an event on, with its block index renumbered when
// a block before it was dropped, or keeps it in its place while a call
// before it is held.
func (f *callFilter) pass(dst []byte, ev *sse.Event, index jsonscan.Member) []byte {
	if !f.Held.On {
		return append(dst, ev.Raw...)
	}
	pos, ok := -1, false
	if index.Val != "" {
		if pos, ok = jsonscan.MemberIndex(index); !ok {
			pos = -1
		}
	}
	if f.Held.Suffix() {
		f.Held.KeepPassed(sse.TrimBOM(ev.Raw), pos, ev.Unterminated)
		return dst
	}
	if pos < 0 {
		return append(dst, ev.Raw...)
	}
	out := f.pos.Out(pos)
	js := jsonscan.View(ev.Data)
	if out == pos || !streaming.ValidJSON(ev) {
		return append(dst, ev.Raw...)
	}
	f.Scratch = callfilter.Renumber(f.Scratch[:0], js, "index", out, 0, false)
	return sse.AppendFrame(sse.KeepBOM(dst, ev), jsonscan.View(ev.Name), f.Scratch)
}

// heldAt is the call Hold followed at the block index m names,
// -1 when none.
func (f *callFilter) heldAt(m jsonscan.Member) int {
	if len(f.Held.Calls) == 0 {
		return -1
	}
	pos, ok := jsonscan.MemberIndex(m)
	if !ok {
		return -1
	}
	return f.Held.Find(pos)
}

// keepHeld holds a delta or the stop of held call c. Once the call
// was dropped, or delivered whole, what comes for it is withheld.
func (f *callFilter) keepHeld(dst []byte, ev *sse.Event, c int, stop bool, delta jsonscan.Member) []byte {
	h := &f.Held
	call := &h.Calls[c]
	if call.State != callfilter.StateHeld {
		return dst
	}
	if stop {
		call.Closed = true
	} else {
		// The decoder reads the first of duplicate members, as readObject.
		fields := jsonscan.ReadObject(delta.Val, "type", "partial_json")
		if jsonscan.IsString(fields[0], "input_json_delta") {
			call.Args = jsonscan.AppendDecoded(callfilter.Grow(call.Args, len(fields[1])), fields[1])
		}
	}
	h.Keep(c, ev, call.TC.Index, 0, false)
	return dst
}

// releaseHeld delivers the held calls before a message_delta that
// carries the stop, dropping those the reply did not finish.
func (f *callFilter) releaseHeld(dst []byte, js string) []byte {
	sr := gjson.Get(js, "delta.stop_reason")
	if sr.Type != gjson.String {
		return dst // no stop yet
	}
	h := &f.Held
	cut := sr.Str == "max_tokens" || sr.Str == "model_context_window_exceeded"
	last := h.Last(nil)
	var cutCall *streaming.ToolCall
	f.DropHeld(func(i int, c *callfilter.Call) bool {
		// A call streamed with no input has "{}": empty arguments are whole.
		drop := !c.Closed || cut && i == last && len(c.Args) > 0 && !gjson.ValidBytes(c.Args)
		f.dropped = f.dropped || drop
		if drop && cut && f.CutNotice != nil && !c.Unlisted {
			tc := c.TC
			cutCall = &tc
		}
		return drop
	})
	// What is left is delivered in its places: only the dropped blocks
	// leave gaps for the blocks after them to close.
	for i := range h.Calls {
		if c := &h.Calls[i]; c.State == callfilter.StateHeld {
			f.pos.Unskip(c.TC.Index)
		}
	}
	dst = f.Release(dst, func(int, *callfilter.Call) bool { return true }, func(c *callfilter.Call) {
		c.Out = f.pos.Deliver(c.TC.Index)
		f.delivered = true
	}, func(dst []byte, e *callfilter.Event, c *callfilter.Call) []byte {
		if e.Pos < 0 || e.Pos == c.Out {
			return h.AppendHeld(dst, e)
		}
		return f.AppendRenumbered(dst, e, "index", c.Out, 0, false)
	})
	if cutCall != nil {
		dst = f.cutNoticeBlock(dst, *cutCall)
	}
	return dst
}

func (f *callFilter) start(dst []byte, ev *sse.Event, index, block jsonscan.Member) []byte {
	pos, ok := jsonscan.MemberIndex(index)
	if i := slices.Index(f.withheld, pos); ok && i >= 0 {
		// A block started again at a withheld index replaces it.
		f.withheld = slices.Delete(f.withheld, i, i+1)
	}
	if ok && f.Held.On {
		f.Held.Forget(pos) // f block started again at an index replaces it
	}
	fields := jsonscan.ReadObject(block.Val, "type", "id", "name")
	if !jsonscan.IsString(fields[0], "tool_use") {
		return f.pass(dst, ev, index) // server tools, text, thinking, results
	}
	name, _ := jsonscan.StringValue(fields[2])
	if id, _ := jsonscan.StringValue(fields[1]); f.PermitsCall(id, name) {
		// The decoder skips an event that is not JSON: no call came with it.
		valid := streaming.ValidJSON(ev)
		if f.Held.On {
			return f.holdStart(dst, ev, pos, ok, valid, fields)
		}
		f.delivered = f.delivered || valid
		return append(dst, ev.Raw...)
	}
	id, _ := jsonscan.StringValue(fields[1])
	text := f.Refuse(streaming.ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
	f.refused = true
	if !ok {
		return dst // no index to put the text at
	}
	f.withheld = append(f.withheld, pos)
	out := f.out(pos)
	b := append(f.Scratch[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `,"content_block":{"type":"text","text":""}}`...)
	dst = f.frame(dst, ev, sse.FrameName(ev, "content_block_start"), pos, b)
	b = append(b[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = jsonscan.AppendQuoted(b, text)
	b = append(b, "}}"...)
	f.Scratch = b
	return f.frame(dst, ev, sse.FrameName(ev, "content_block_delta"), pos, b)
}

// holdStart starts holding an allowed tool_use block.
func (f *callFilter) holdStart(dst []byte, ev *sse.Event, pos int, indexed, valid bool, fields [4]string) []byte {
	h := &f.Held
	if !indexed || !valid {
		// No call is read from it (no index, no JSON), but its bytes name
		// one: withheld, with whatever follows at its index.
		if indexed {
			h.AddDead(pos)
		}
		return dst
	}
	id, _ := jsonscan.StringValue(fields[1])
	name, _ := jsonscan.StringValue(fields[2])
	c := h.AddCall(streaming.ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)}, pos)
	h.Calls[c].Indexed = true
	f.pos.Hold(pos)
	h.Keep(c, ev, pos, 0, false)
	return dst
}

// messageDelta turns a tool_use stop into end_turn once every
// call of the message was withheld: the agent has no call to answer.
func (f *callFilter) messageDelta(dst []byte, ev *sse.Event, js string) []byte {
	if !streaming.ValidJSON(ev) {
		return f.pass(dst, ev, jsonscan.Member{})
	}
	changed := false
	f.Scratch = jsonscan.FilterObject(f.Scratch[:0], js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		if m.Name() != "delta" || !jsonscan.IsObject(m.Val) {
			return dst, jsonscan.Keep
		}
		return jsonscan.FilterObject(dst, m.Val, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
			if m.Name() == "stop_reason" && jsonscan.IsString(m.Val, "tool_use") {
				changed = true
				return append(dst, `"end_turn"`...), jsonscan.Replace
			}
			return dst, jsonscan.Keep
		}, nil), jsonscan.Replace
	}, nil)
	if !changed {
		return f.pass(dst, ev, jsonscan.Member{})
	}
	return f.frame(dst, ev, jsonscan.View(ev.Name), -1, f.Scratch)
}

// FilterBody rewrites a Message: refused tool_use blocks become text
// blocks, and stop_reason follows. It returns nil when nothing changes.
func (f *callFilter) FilterBody(js string) []byte {
	if jsonscan.IsString(jsonscan.MemberRaw(js, "type"), "error") {
		return nil
	}
	var texts []int // per content block in walk order: the refused call replacing it, or -1
	refused, delivered := false, false
	for m, next, ok := jsonscan.NextMember(js, jsonscan.ObjectStart(js)); ok; m, next, ok = jsonscan.NextMember(js, next) {
		if m.Name() != "content" {
			continue
		}
		it := jsonscan.NewArrayIter(m.Val)
		pos := 0
		for block, ok := it.Next(); ok; block, ok = it.Next() {
			fields := jsonscan.ReadObject(block, "type", "id", "name")
			r := -1
			if jsonscan.IsString(fields[0], "tool_use") {
				name, _ := jsonscan.StringValue(fields[2])
				if id, _ := jsonscan.StringValue(fields[1]); f.PermitsCall(id, name) {
					delivered = true
				} else {
					f.Refuse(streaming.ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
					r, refused = len(f.RefusedCalls)-1, true
				}
			}
			texts = append(texts, r)
			pos++
		}
	}
	if !refused {
		return nil
	}
	next := 0
	return jsonscan.FilterObject(nil, js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		switch m.Name() {
		case "content":
			if !jsonscan.IsArray(m.Val) {
				return dst, jsonscan.Keep
			}
			dst, _, _ = jsonscan.FilterArray(dst, m.Val, func(dst []byte, block string) ([]byte, jsonscan.Action) {
				r := texts[next]
				next++
				if r < 0 {
					return dst, jsonscan.Keep
				}
				dst = append(dst, `{"type":"text","text":`...)
				return append(jsonscan.AppendQuoted(dst, f.Texts[r]), '}'), jsonscan.Replace
			})
			return dst, jsonscan.Replace
		case "stop_reason":
			if !delivered && jsonscan.IsString(m.Val, "tool_use") {
				return append(dst, `"end_turn"`...), jsonscan.Replace
			}
		}
		return dst, jsonscan.Keep
	}, nil)
}

// cutNoticeBlock appends a whole text block, numbered after every
// block delivered, holding the notice for call, which was dropped at the
// output limit at its block index.
func (f *callFilter) cutNoticeBlock(dst []byte, call streaming.ToolCall) []byte {
	out := int64(f.pos.Release(call.Index))
	f.delivered = true
	b := append(f.Scratch[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"content_block":{"type":"text","text":""}}`...)
	dst = sse.AppendFrame(dst, "content_block_start", b)
	b = append(b[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = jsonscan.AppendQuoted(b, f.CutNotice(call))
	b = append(b, "}}"...)
	dst = sse.AppendFrame(dst, "content_block_delta", b)
	b = append(b[:0], `{"type":"content_block_stop","index":`...)
	b = strconv.AppendInt(b, out, 10)
	f.Scratch = append(b, '}')
	return sse.AppendFrame(dst, "content_block_stop", f.Scratch)
}

// MarkBodyCut finds the call a whole Message was still writing at its
// output limit: a reply stopped by max_tokens (or the context window)
// whose last block is a tool_use; its input is an object whatever was
// cut, so the body cannot show it whole and it is withheld.
func (f *callFilter) MarkBodyCut(js string) {
	sr := gjson.Get(js, "stop_reason").Str
	last := gjson.Get(js, "content.@reverse.0")
	if (sr == "max_tokens" || sr == "model_context_window_exceeded") && last.Get("type").Str == "tool_use" {
		f.CutIDs = append(f.CutIDs, last.Get("id").Str)
	}
}

// AppendEnd appends event: error, {"type":"error","error":{"type","message"}}.
func (f *callFilter) AppendEnd(dst []byte, typ, msg string) []byte {
	b := jsonscan.AppendQuoted(append(f.Scratch[:0], `{"type":"error","error":{"type":`...), typ)
	b = jsonscan.AppendQuoted(append(b, `,"message":`...), msg)
	f.Scratch = append(b, "}}"...)
	return sse.AppendFrame(dst, "error", f.Scratch)
}

// AppendPassed renumbers the block index of an event passed while a call
// was held, when a block before it was dropped.
func (f *callFilter) AppendPassed(dst []byte, e *callfilter.Event) []byte {
	if e.Pos >= 0 {
		if out := f.pos.Out(e.Pos); out != e.Pos {
			return f.AppendRenumbered(dst, e, "index", out, 0, false)
		}
	}
	return f.Held.AppendHeld(dst, e)
}
