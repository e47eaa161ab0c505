package streaming

import (
	"slices"
	"strconv"
	"strings"

	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"
)

// Anthropic Messages: a refused tool_use block becomes a text block at the
// same index.

type anthropicCallFilter struct {
	withheld  []int     // indices of refused blocks whose stop has not come
	refused   bool      // a call of the message was refused
	dropped   bool      // a held call was dropped at the stop
	delivered bool      // an allowed client tool_use was delivered
	pos       positions // block indices, with Hold
}

func (f *CallFilter) anthropicEvent(dst []byte, ev *sse.Event) []byte {
	a := &f.anthropic
	js := jsonscan.View(ev.Data)
	if (a.refused || f.hold.held > 0) && !gjson.Valid(js) {
		return dst // see chatEvent
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
		return f.anthropicStart(dst, ev, index, block)
	case "content_block_delta":
		if a.withheldAt(index) >= 0 {
			return dst
		}
		if c := f.anthropicHeldAt(index); c >= 0 {
			return f.anthropicKeep(dst, ev, c, false, delta)
		}
	case "content_block_stop":
		if i := a.withheldAt(index); i >= 0 {
			pos := a.withheld[i]
			a.withheld = slices.Delete(a.withheld, i, i+1)
			b := append(f.scratch[:0], `{"type":"content_block_stop","index":`...)
			b = strconv.AppendInt(b, int64(f.anthropicOut(pos)), 10)
			f.scratch = append(b, '}')
			return f.anthropicFrame(dst, ev, sse.FrameName(ev, "content_block_stop"), pos, f.scratch)
		}
		if c := f.anthropicHeldAt(index); c >= 0 {
			return f.anthropicKeep(dst, ev, c, true, delta)
		}
	case "message_delta":
		if f.hold.held > 0 {
			dst = f.anthropicRelease(dst, js)
		}
		if (a.refused || a.dropped) && !a.delivered {
			return f.anthropicMessageDelta(dst, ev, js)
		}
	case "message_stop", "error":
		// The reply ends, or failed, with no stop said for what is held.
		f.dropHeld(func(int, *heldCall) bool { return true })
		dst = f.flushPassed(dst)
	}
	return f.anthropicPass(dst, ev, index)
}

// withheldAt is the position in withheld of the block index m names, -1
// when that block is not withheld.
func (a *anthropicCallFilter) withheldAt(m jsonscan.Member) int {
	if len(a.withheld) == 0 {
		return -1
	}
	pos, ok := jsonscan.MemberIndex(m)
	if !ok {
		return -1
	}
	return slices.Index(a.withheld, pos)
}

// anthropicOut is the index the client sees for block pos, delivered now;
// while a call is held it is pos, renumbered when it goes out
// (appendPassed).
func (f *CallFilter) anthropicOut(pos int) int {
	if !f.hold.on || f.hold.suffix() {
		return pos
	}
	return f.anthropic.pos.out(pos)
}

// anthropicFrame appends an event the filter wrote about block pos, or
// keeps it in its place while a call before it is held.
func (f *CallFilter) anthropicFrame(dst []byte, ev *sse.Event, name string, pos int, data []byte) []byte {
	if f.hold.suffix() {
		n := len(dst)
		dst = sse.AppendFrame(dst, name, data)
		f.hold.keepPassed(dst[n:], pos, false)
		return dst[:n]
	}
	return sse.AppendFrame(sse.KeepBOM(dst, ev), name, data)
}

// anthropicPass passes an event on, with its block index renumbered when
// a block before it was dropped, or keeps it in its place while a call
// before it is held.
func (f *CallFilter) anthropicPass(dst []byte, ev *sse.Event, index jsonscan.Member) []byte {
	if !f.hold.on {
		return append(dst, ev.Raw...)
	}
	pos, ok := -1, false
	if index.Val != "" {
		if pos, ok = jsonscan.MemberIndex(index); !ok {
			pos = -1
		}
	}
	if f.hold.suffix() {
		f.hold.keepPassed(sse.TrimBOM(ev.Raw), pos, ev.Unterminated)
		return dst
	}
	if pos < 0 {
		return append(dst, ev.Raw...)
	}
	out := f.anthropic.pos.out(pos)
	js := jsonscan.View(ev.Data)
	if out == pos || !gjson.Valid(js) {
		return append(dst, ev.Raw...)
	}
	f.scratch = renumber(f.scratch[:0], js, "index", out, 0, false)
	return sse.AppendFrame(sse.KeepBOM(dst, ev), jsonscan.View(ev.Name), f.scratch)
}

// anthropicHeldAt is the call Hold followed at the block index m names,
// -1 when none.
func (f *CallFilter) anthropicHeldAt(m jsonscan.Member) int {
	if len(f.hold.calls) == 0 {
		return -1
	}
	pos, ok := jsonscan.MemberIndex(m)
	if !ok {
		return -1
	}
	return f.hold.find(pos)
}

// anthropicKeep holds a delta or the stop of held call c. Once the call
// was dropped, or delivered whole, what comes for it is withheld.
func (f *CallFilter) anthropicKeep(dst []byte, ev *sse.Event, c int, stop bool, delta jsonscan.Member) []byte {
	h := &f.hold
	call := &h.calls[c]
	if call.state != callHeld {
		return dst
	}
	if stop {
		call.closed = true
	} else {
		// The decoder reads the first of duplicate members, as readObject.
		fields := jsonscan.ReadObject(delta.Val, "type", "partial_json")
		if jsonscan.IsString(fields[0], "input_json_delta") {
			call.args = jsonscan.AppendDecoded(grow(call.args, len(fields[1])), fields[1])
		}
	}
	h.keep(c, ev, call.tc.Index, 0, false)
	return dst
}

// anthropicRelease delivers the held calls before a message_delta that
// carries the stop, dropping those the reply did not finish.
func (f *CallFilter) anthropicRelease(dst []byte, js string) []byte {
	sr := gjson.Get(js, "delta.stop_reason")
	if sr.Type != gjson.String {
		return dst // no stop yet
	}
	h := &f.hold
	a := &f.anthropic
	cut := sr.Str == "max_tokens" || sr.Str == "model_context_window_exceeded"
	last := h.last(nil)
	var cutCall *ToolCall
	f.dropHeld(func(i int, c *heldCall) bool {
		// A call streamed with no input has "{}": empty arguments are whole.
		drop := !c.closed || cut && i == last && len(c.args) > 0 && !gjson.ValidBytes(c.args)
		a.dropped = a.dropped || drop
		if drop && cut && f.cutNotice != nil && !c.unlisted {
			tc := c.tc
			cutCall = &tc
		}
		return drop
	})
	// What is left is delivered in its places: only the dropped blocks
	// leave gaps for the blocks after them to close.
	for i := range h.calls {
		if c := &h.calls[i]; c.state == callHeld {
			a.pos.unskip(c.tc.Index)
		}
	}
	dst = f.release(dst, func(int, *heldCall) bool { return true }, func(c *heldCall) {
		c.out = a.pos.deliver(c.tc.Index)
		a.delivered = true
	}, func(dst []byte, e *heldEvent, c *heldCall) []byte {
		if e.pos < 0 || e.pos == c.out {
			return h.appendHeld(dst, e)
		}
		return f.appendRenumbered(dst, e, "index", c.out, 0, false)
	})
	if cutCall != nil {
		dst = f.anthropicCutNotice(dst, *cutCall) // filter_cut.go
	}
	return dst
}

func (f *CallFilter) anthropicStart(dst []byte, ev *sse.Event, index, block jsonscan.Member) []byte {
	a := &f.anthropic
	pos, ok := jsonscan.MemberIndex(index)
	if i := slices.Index(a.withheld, pos); ok && i >= 0 {
		// A block started again at a withheld index replaces it.
		a.withheld = slices.Delete(a.withheld, i, i+1)
	}
	if ok && f.hold.on {
		f.hold.forget(pos) // a block started again at an index replaces it
	}
	fields := jsonscan.ReadObject(block.Val, "type", "id", "name")
	if !jsonscan.IsString(fields[0], "tool_use") {
		return f.anthropicPass(dst, ev, index) // server tools, text, thinking, results
	}
	name, _ := jsonscan.StringValue(fields[2])
	if id, _ := jsonscan.StringValue(fields[1]); f.permitsCall(id, name) {
		// The decoder skips an event that is not JSON: no call came with it.
		valid := gjson.Valid(jsonscan.View(ev.Data))
		if f.hold.on {
			return f.anthropicHoldStart(dst, ev, pos, ok, valid, fields)
		}
		a.delivered = a.delivered || valid
		return append(dst, ev.Raw...)
	}
	id, _ := jsonscan.StringValue(fields[1])
	text := f.refuse(ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
	a.refused = true
	if !ok {
		return dst // no index to put the text at
	}
	a.withheld = append(a.withheld, pos)
	out := f.anthropicOut(pos)
	b := append(f.scratch[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `,"content_block":{"type":"text","text":""}}`...)
	dst = f.anthropicFrame(dst, ev, sse.FrameName(ev, "content_block_start"), pos, b)
	b = append(b[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = jsonscan.AppendQuoted(b, text)
	b = append(b, "}}"...)
	f.scratch = b
	return f.anthropicFrame(dst, ev, sse.FrameName(ev, "content_block_delta"), pos, b)
}

// anthropicHoldStart starts holding an allowed tool_use block.
func (f *CallFilter) anthropicHoldStart(dst []byte, ev *sse.Event, pos int, indexed, valid bool, fields [4]string) []byte {
	h := &f.hold
	if !indexed || !valid {
		// No call is read from it (no index, no JSON), but its bytes name
		// one: withheld, with whatever follows at its index.
		if indexed {
			h.addDead(pos)
		}
		return dst
	}
	id, _ := jsonscan.StringValue(fields[1])
	name, _ := jsonscan.StringValue(fields[2])
	c := h.addCall(ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)}, pos)
	h.calls[c].indexed = true
	f.anthropic.pos.hold(pos)
	h.keep(c, ev, pos, 0, false)
	return dst
}

// anthropicMessageDelta turns a tool_use stop into end_turn once every
// call of the message was withheld: the agent has no call to answer.
func (f *CallFilter) anthropicMessageDelta(dst []byte, ev *sse.Event, js string) []byte {
	if !gjson.Valid(js) {
		return f.anthropicPass(dst, ev, jsonscan.Member{})
	}
	changed := false
	f.scratch = jsonscan.FilterObject(f.scratch[:0], js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
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
		return f.anthropicPass(dst, ev, jsonscan.Member{})
	}
	return f.anthropicFrame(dst, ev, jsonscan.View(ev.Name), -1, f.scratch)
}

// anthropicBody rewrites a Message: refused tool_use blocks become text
// blocks, and stop_reason follows. It returns nil when nothing changes.
func (f *CallFilter) anthropicBody(js string) []byte {
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
				if id, _ := jsonscan.StringValue(fields[1]); f.permitsCall(id, name) {
					delivered = true
				} else {
					f.refuse(ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
					r, refused = len(f.refused)-1, true
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
				return append(jsonscan.AppendQuoted(dst, f.texts[r]), '}'), jsonscan.Replace
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
