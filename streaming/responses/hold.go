package responses

import (
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/callitems"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// Holding OpenAI Responses calls: the events of a client call item
// (internal/callitems) wait for response.completed, .incomplete or .failed.
// Held events leave a gap in the sequence numbers that the events passed
// meanwhile close, and take the numbers before the terminal event's when
// delivered. The final Response lists its items in the order the client
// got them, less those dropped.

// held selects the calls whose events are held or dropped.
func (f *callFilter) held(c responsesFilterCall) bool {
	return c.held >= 0 && f.Held.Calls[c.held].State != callfilter.StateReleased
}

// holdCall starts holding a new client call.
func (f *callFilter) holdCall(dst []byte, ev *sse.Event, call streaming.ToolCall, opens bool, e *responsesFields) []byte {
	h := &f.Held
	ci, _ := callitems.Lookup(call.Type, true)
	call.ID, call.ItemID, call.Name = strings.Clone(call.ID), strings.Clone(call.ItemID), strings.Clone(call.Name)
	call.Type = strings.Clone(call.Type)
	c := h.AddCall(call, -1)
	hc := &h.Calls[c]
	hc.FreeText = ci.FreeText
	if oi, ok := jsonscan.MemberIndex(jsonscan.Member{Val: e.outputIndex}); ok {
		hc.Indexed = true
		f.pos.Hold(oi)
	}
	if e.event == "response.output_item.added" {
		// As the decoder, take the arguments a new item comes with: a
		// string only; an object input comes whole with the done item.
		hc.Args = jsonscan.AppendDecoded(hc.Args, ci.InputRaw(e.item))
	}
	if opens {
		at := f.add(call.Index, call.ItemID, -1, false)
		f.calls[at].held = c
		hc.Key = at
	} else {
		// A done item cut short opens no call in the decoder, and nothing
		// that follows is taken for it.
		hc.Unlisted = true
	}
	return f.keepHeld(dst, ev, c, e)
}

// keepHeld holds an event of held call c, taking what it tells of the
// call's end and arguments. Once the call was dropped, or delivered whole,
// what comes for it is withheld.
func (f *callFilter) keepHeld(dst []byte, ev *sse.Event, c int, e *responsesFields) []byte {
	h := &f.Held
	f.seq.Skip(e.numbered) // its number goes to the events delivered meanwhile
	call := &h.Calls[c]
	if call.State != callfilter.StateHeld {
		return dst
	}
	if !call.Closed {
		// The decoder's reading: deltas add up, a .done event or a completed
		// item gives the whole arguments and ends the call.
		switch e.event {
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			call.Args = jsonscan.AppendDecoded(callfilter.Grow(call.Args, len(e.delta)), e.delta)
		case "response.function_call_arguments.done":
			call.Args, call.Closed = callfilter.AppendArgs(call.Args[:0], e.arguments), true
		case "response.custom_tool_call_input.done":
			call.Args, call.Closed = callfilter.AppendArgs(call.Args[:0], e.input), true
		case "response.output_item.done":
			f.closeItem(call, e.item)
		}
	}
	pos := -1
	if oi, ok := jsonscan.MemberIndex(jsonscan.Member{Val: e.outputIndex}); ok {
		pos = oi
	}
	h.Keep(c, ev, pos, e.seqNum, e.numbered)
	return dst
}

// closeItem ends a held call with a done item, unless the item
// was cut short: as the decoder, it takes only a completed one.
func (f *callFilter) closeItem(call *callfilter.Call, item string) {
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
	call.Args, call.Closed = callfilter.AppendArgs(call.Args[:0], ci.InputRaw(item)), true
}

// closeFromOutput ends the held calls whose end events were lost
// with the items of the final output that the decoder completes them with:
// those with their item id. The decoder also pairs an item with a call by
// its place in the output, but places change when calls are held, and a
// call is not delivered on a guess. Nor is one whose item names a refused
// tool: the filter then refuses the item.
func (f *callFilter) closeFromOutput(output string) {
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
		at := f.findAt(itemID, 0, false)
		if itemID == "" || at < 0 || f.calls[at].held < 0 || f.Renames(ci.CallName(fields[2])) {
			continue
		}
		c := &f.Held.Calls[f.calls[at].held]
		if c.State != callfilter.StateHeld {
			continue
		}
		if swaps(&c.TC, streaming.ToolCall{Type: ci.Typ, ID: jsonscan.Text(fields[3]), Name: ci.CallName(fields[2])}) {
			c.Doubt = true // see call: the output names another call than was held
			continue
		}
		if !c.Closed {
			f.closeItem(c, item)
		}
	}
}

// droppedItem reports whether a held call dropped before the
// decoder took it for a call (its only event was a done item cut short)
// had the item id itemID.
func (f *callFilter) droppedItem(itemID string) bool {
	if itemID == "" {
		return false
	}
	for i := range f.Held.Calls {
		if c := &f.Held.Calls[i]; c.State == callfilter.StateDropped && c.Unlisted && c.TC.ItemID == itemID {
			return true
		}
	}
	return false
}

// releaseHeld delivers the held calls before the terminal event ev
// (read as e), dropping those the reply did not finish.
func (f *callFilter) releaseHeld(dst []byte, ev *sse.Event, e *responsesFields) []byte {
	h := &f.Held
	if jsonscan.IsObject(e.response) {
		f.closeFromOutput(jsonscan.MemberRaw(e.response, "output"))
	}
	cut := e.event == "response.incomplete" && gjson.Get(e.response, "incomplete_details.reason").Str == "max_output_tokens"
	last := h.Last(nil)
	cutCall := -1
	f.DropHeld(func(i int, c *callfilter.Call) bool {
		drop := !c.Closed || c.Doubt || cut && i == last && !c.FreeText && !gjson.ValidBytes(c.Args)
		if drop && cut && i == last && f.CutNotice != nil && !c.Unlisted && c.Indexed {
			cutCall = i
		}
		return drop
	})
	// Delivered calls take the numbers from the one the terminal event
	// would have; it follows them.
	next, renumbered := f.seq.Next(e.seqNum, e.numbered)
	start := next
	dst = f.Release(dst, func(int, *callfilter.Call) bool { return true }, func(c *callfilter.Call) {
		if c.Indexed {
			c.Out = f.pos.Release(c.TC.Index)
		}
	}, func(dst []byte, ev *callfilter.Event, c *callfilter.Call) []byte {
		seq := ev.Seq
		if ev.Numbered && renumbered {
			seq = next
			next++
		}
		pos := -1
		if c.Out >= 0 && ev.Pos == c.TC.Index && ev.Pos != c.Out {
			pos = c.Out
		}
		f.seq.Delivered(seq, ev.Numbered)
		if pos < 0 && seq == ev.Seq {
			return h.AppendHeld(dst, ev)
		}
		return f.AppendRenumbered(dst, ev, "output_index", pos, seq, ev.Numbered)
	})
	f.seq.Offset += next - start
	if cutCall >= 0 && e.numbered {
		dst = f.cutNoticeItem(dst, ev, e, cutCall)
	}
	return dst
}

// reorderOutput writes the output array arr of a final Response
// as planned, its items in the order their events were delivered in; next
// is the plan entry its first item takes.
func (f *callFilter) reorderOutput(dst []byte, arr string, next *int) []byte {
	first := *next
	f.order = f.pos.Order(f.order[:0], arr, func(in int) bool {
		*next++
		return f.plan[first+in] != dropItem
	})
	dst = append(dst, '[')
	for i, p := range f.order {
		if i > 0 {
			dst = append(dst, ',')
		}
		if replace := f.plan[first+p.In]; replace == keepItem {
			dst = append(dst, p.Elem...)
		} else {
			dst = f.appendMessageItem(dst, replace, true)
		}
	}
	return append(dst, ']')
}
