package streaming

import (
	"cmp"
	"slices"
	"strings"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"

	"gatekeeper/streaming/internal/callitems"
)

// Holding OpenAI Responses calls: the events of a client call item
// (internal/callitems) wait for response.completed, .incomplete or .failed.
// Held events leave a gap in the sequence numbers that the events passed
// meanwhile close, and take the numbers before the terminal event's when
// delivered. The final Response lists its items in the order the client
// got them, less those dropped.

// responsesHeld selects the calls whose events are held or dropped.
func (f *CallFilter) responsesHeld(c responsesFilterCall) bool {
	return c.held >= 0 && f.hold.calls[c.held].state != callReleased
}

// responsesHoldCall starts holding a new client call.
func (f *CallFilter) responsesHoldCall(dst []byte, ev *sse.Event, call ToolCall, opens bool, e *responsesFields) []byte {
	r := &f.responses
	h := &f.hold
	ci, _ := callitems.Lookup(call.Type, true)
	call.ID, call.ItemID, call.Name = strings.Clone(call.ID), strings.Clone(call.ItemID), strings.Clone(call.Name)
	call.Type = strings.Clone(call.Type)
	c := h.addCall(call, -1)
	hc := &h.calls[c]
	hc.freeText = ci.FreeText
	if oi, ok := jsonscan.MemberIndex(jsonscan.Member{Val: e.outputIndex}); ok {
		hc.indexed = true
		r.pos.hold(oi)
	}
	if e.event == "response.output_item.added" {
		// As the decoder, take the arguments a new item comes with: a
		// string only; an object input comes whole with the done item.
		hc.args = jsonscan.AppendDecoded(hc.args, ci.InputRaw(e.item))
	}
	if opens {
		at := r.add(call.Index, call.ItemID, -1, false)
		r.calls[at].held = c
		hc.key = at
	} else {
		// A done item cut short opens no call in the decoder, and nothing
		// that follows is taken for it.
		hc.unlisted = true
	}
	return f.responsesKeep(dst, ev, c, e)
}

// responsesKeep holds an event of held call c, taking what it tells of the
// call's end and arguments. Once the call was dropped, or delivered whole,
// what comes for it is withheld.
func (f *CallFilter) responsesKeep(dst []byte, ev *sse.Event, c int, e *responsesFields) []byte {
	r := &f.responses
	h := &f.hold
	if e.numbered {
		r.offset-- // its number goes to the events delivered meanwhile
	}
	call := &h.calls[c]
	if call.state != callHeld {
		return dst
	}
	if !call.closed {
		// The decoder's reading: deltas add up, a .done event or a completed
		// item gives the whole arguments and ends the call.
		switch e.event {
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			call.args = jsonscan.AppendDecoded(grow(call.args, len(e.delta)), e.delta)
		case "response.function_call_arguments.done":
			call.args, call.closed = appendArgsRaw(call.args[:0], e.arguments), true
		case "response.custom_tool_call_input.done":
			call.args, call.closed = appendArgsRaw(call.args[:0], e.input), true
		case "response.output_item.done":
			f.responsesCloseItem(call, e.item)
		}
	}
	pos := -1
	if oi, ok := jsonscan.MemberIndex(jsonscan.Member{Val: e.outputIndex}); ok {
		pos = oi
	}
	h.keep(c, ev, pos, e.seqNum, e.numbered)
	return dst
}

// responsesCloseItem ends a held call with a done item, unless the item
// was cut short: as the decoder, it takes only a completed one.
func (f *CallFilter) responsesCloseItem(call *heldCall, item string) {
	fields := jsonscan.ReadObject(item, "type", "status", "call_id")
	if fields[1] != "" && !jsonscan.IsString(fields[1], "completed") {
		return
	}
	itype, _ := jsonscan.StringValue(fields[0])
	ci, ok := callitems.Lookup(itype, jsonscan.IsStringRaw(fields[2]))
	if !ok {
		// The decoder completes the call it pairs with an item only when
		// that item is a call.
		return
	}
	call.args, call.closed = appendArgsRaw(call.args[:0], ci.InputRaw(item)), true
}

// responsesCloseFromOutput ends the held calls whose end events were lost
// with the items of the final output that the decoder completes them with:
// those with their item id. The decoder also pairs an item with a call by
// its place in the output, but places change when calls are held, and a
// call is not delivered on a guess. Nor is one whose item names a refused
// tool: the filter then refuses the item.
func (f *CallFilter) responsesCloseFromOutput(output string) {
	r := &f.responses
	it := jsonscan.NewArrayIter(output)
	for {
		item, ok := it.Next()
		if !ok {
			return
		}
		fields := jsonscan.ReadObject(item, "type", "id", "name", "call_id")
		itype, _ := jsonscan.StringValue(fields[0])
		ci, isCall := callitems.Lookup(itype, jsonscan.IsStringRaw(fields[3]))
		if !isCall {
			continue
		}
		itemID, _ := jsonscan.StringValue(fields[1])
		at := r.findAt(itemID, 0, false)
		if itemID == "" || at < 0 || r.calls[at].held < 0 || f.renames(ci.CallName(fields[2])) {
			continue
		}
		if c := &f.hold.calls[r.calls[at].held]; c.state == callHeld && !c.closed {
			f.responsesCloseItem(c, item)
		}
	}
}

// responsesDroppedItem reports whether a held call dropped before the
// decoder took it for a call (its only event was a done item cut short)
// had the item id itemID.
func (f *CallFilter) responsesDroppedItem(itemID string) bool {
	if itemID == "" {
		return false
	}
	for i := range f.hold.calls {
		if c := &f.hold.calls[i]; c.state == callDropped && c.unlisted && c.tc.ItemID == itemID {
			return true
		}
	}
	return false
}

// appendArgsRaw appends an arguments value as the decoder takes it: a
// string decoded, an object or array as written.
func appendArgsRaw(dst []byte, raw string) []byte {
	dst = grow(dst, len(raw))
	if jsonscan.IsStringRaw(raw) {
		return jsonscan.AppendDecoded(dst, raw)
	}
	if jsonscan.IsObject(raw) || jsonscan.IsArray(raw) {
		return append(dst, raw...)
	}
	return dst
}

// responsesRelease delivers the held calls before the terminal event ev
// (read as e), dropping those the reply did not finish.
func (f *CallFilter) responsesRelease(dst []byte, ev *sse.Event, e *responsesFields) []byte {
	r := &f.responses
	h := &f.hold
	if jsonscan.IsObject(e.response) {
		f.responsesCloseFromOutput(jsonscan.MemberRaw(e.response, "output"))
	}
	cut := e.event == "response.incomplete" && gjson.Get(e.response, "incomplete_details.reason").Str == "max_output_tokens"
	last := h.last(nil)
	cutCall := -1
	f.dropHeld(func(i int, c *heldCall) bool {
		drop := !c.closed || c.doubt || cut && i == last && !c.freeText && !gjson.ValidBytes(c.args)
		if drop && cut && i == last && f.cutNotice != nil && !c.unlisted && c.indexed {
			cutCall = i
		}
		return drop
	})
	// Delivered calls take the numbers from the one the terminal event
	// would have; it follows them.
	var next int64
	renumbered := true
	switch {
	case e.numbered:
		next = e.seqNum + r.offset
	case r.seqOut:
		next = r.lastSeq + 1
	default:
		renumbered = false
	}
	start := next
	dst = f.release(dst, func(int, *heldCall) bool { return true }, func(c *heldCall) {
		if c.indexed {
			c.out = r.pos.release(c.tc.Index)
		}
	}, func(dst []byte, ev *heldEvent, c *heldCall) []byte {
		seq := ev.seq
		if ev.numbered && renumbered {
			seq = next
			next++
		}
		pos := -1
		if c.out >= 0 && ev.pos == c.tc.Index && ev.pos != c.out {
			pos = c.out
		}
		r.delivered(seq, ev.numbered)
		if pos < 0 && seq == ev.seq {
			return h.appendHeld(dst, ev)
		}
		return f.appendRenumbered(dst, ev, "output_index", pos, seq, ev.numbered)
	})
	r.offset += next - start
	if cutCall >= 0 && e.numbered {
		dst = f.responsesCutNotice(dst, ev, e, cutCall) // filter_cut.go
	}
	return dst
}

// placedItem is an item of a final output: where the client got it, its
// text, and what replaces it.
type placedItem struct {
	out     int
	item    string
	replace int
}

// responsesReorderOutput writes the output array arr of a final Response
// as planned, its items in the order their events were delivered in; next
// is the plan entry its first item takes.
func (f *CallFilter) responsesReorderOutput(dst []byte, arr string, next *int) []byte {
	r := &f.responses
	r.order = r.order[:0]
	it := jsonscan.NewArrayIter(arr)
	for pos := 0; ; pos++ {
		item, ok := it.Next()
		if !ok {
			break
		}
		replace := r.plan[*next]
		*next++
		if replace != dropItem {
			r.order = append(r.order, placedItem{out: r.pos.peek(pos), item: item, replace: replace})
		}
	}
	slices.SortStableFunc(r.order, func(a, b placedItem) int { return cmp.Compare(a.out, b.out) })
	dst = append(dst, '[')
	for i, p := range r.order {
		if i > 0 {
			dst = append(dst, ',')
		}
		if p.replace == keepItem {
			dst = append(dst, p.item...)
		} else {
			dst = f.appendMessageItem(dst, p.replace, true)
		}
	}
	return append(dst, ']')
}
