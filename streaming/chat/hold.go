package chat

import (
	"slices"
	"strconv"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// Holding Chat Completions calls: the tool_calls elements of a choice wait
// for its finish_reason. A chunk that carries nothing but one held call's
// elements is held as it came; from any other, the held elements are taken
// out and kept in a chunk of their own per call, with the id, object,
// created and model of the chunk they came in. Nothing in Chat refers to
// a position in the stream, so moving them renumbers nothing.

// chatHeldElem is a held element of the chunk being edited, written in
// callFilter.heldBytes.
type chatHeldElem struct {
	call       int // position in Filter.Held.Calls
	legacy     bool
	start, end int
}

// holdElement plans an element of an allowed call with Hold: held
// while its choice has not finished, withheld once its call was dropped or
// delivered. args is its arguments member as written; custom marks a
// free-text input.
func (f *callFilter) holdElement(ep chatElemPlan, args string, custom bool) chatElemPlan {
	p := &f.plan
	if !f.Held.On || ep.call < 0 || f.calls[ep.call].held < 0 {
		return ep
	}
	held := f.calls[ep.call].held
	hc := &f.Held.Calls[held]
	if hc.State != callfilter.StateHeld {
		// Dropped, or delivered whole at the finish: a fragment after it
		// would change a call the agent may already run.
		p.changed, p.edits = true, true
		ep.drop = true
		return ep
	}
	hc.Args = callfilter.AppendArgs(hc.Args, args)
	hc.FreeText = hc.FreeText || custom
	if f.finishing {
		return ep // delivered in place, after the call's earlier elements
	}
	ep.hold, p.changed = true, true
	switch {
	case p.holds == 0:
		p.holdCall = held
	case p.holdCall != held:
		p.holdCall = -1
	}
	p.holds++
	return ep
}

// keepElement writes a held element, renumbered as planned.
func (c *callFilter) keepElement(ep chatElemPlan, el string, legacy bool) {
	start := len(c.heldBytes)
	if ep.out >= 0 && !legacy {
		c.heldBytes = chatRenumber(c.heldBytes, el, ep.out)
	} else {
		c.heldBytes = append(c.heldBytes, el...)
	}
	c.held = append(c.held, chatHeldElem{call: c.calls[ep.call].held, legacy: legacy, start: start, end: len(c.heldBytes)})
}

// chatRenumber writes a tool_calls element with the index out.
func chatRenumber(dst []byte, el string, out int) []byte {
	return jsonscan.FilterObject(dst, el, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		if m.Name() == "index" && jsonscan.IsNumber(m.Val) {
			return strconv.AppendInt(dst, int64(out), 10), jsonscan.Replace
		}
		return dst, jsonscan.Keep
	}, nil)
}

// holdEvent writes what the client gets for a chunk with Hold: first
// the held calls of the choices it finishes, less a call cut at the output
// limit, then the chunk less the elements it holds.
func (f *callFilter) holdEvent(dst []byte, ev *sse.Event, js string, p *chatPlan) []byte {
	h := &f.Held
	var cut []streaming.ToolCall // calls cut at the output limit, for the notice
	for _, fin := range p.finishes {
		if !fin.cut {
			continue
		}
		last := -1
		for i := range fin.upto {
			if hc := &h.Calls[i]; hc.State == callfilter.StateHeld && hc.TC.Choice == fin.choice {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		if hc := &h.Calls[last]; !hc.FreeText && gjson.ValidBytes(hc.Args) {
			continue
		}
		if f.CutNotice != nil && !h.Calls[last].Unlisted {
			cut = append(cut, h.Calls[last].TC)
		}
		f.DropHeld(func(i int, _ *callfilter.Call) bool { return i == last })
		for i := range p.elems {
			if ep := &p.elems[i]; ep.call >= 0 && f.calls[ep.call].held == last {
				ep.drop, p.changed, p.edits = true, true, true
			}
		}
	}
	// The elements this chunk holds are kept first: a finish in a later
	// choice object of the chunk delivers them too, as the decoder ends the
	// calls a choice has when its finish comes.
	wholly := p.holds > 0 && p.holdCall >= 0 && p.holds == len(p.elems) && len(p.choices) == 1 && !p.edits && !p.extra
	kept := len(h.Events)
	switch {
	case wholly:
		h.Keep(p.holdCall, ev, -1, 0, false)
	case p.changed:
		f.held, f.heldBytes = f.held[:0], f.heldBytes[:0]
		f.edited = f.edit(f.edited[:0], js, false)
		f.keepChunks(ev, js)
	}
	kept = len(h.Events) - kept
	for _, fin := range p.finishes {
		dst = f.Release(dst, func(i int, hc *callfilter.Call) bool { return i < fin.upto && hc.TC.Choice == fin.choice }, nil,
			func(dst []byte, e *callfilter.Event, _ *callfilter.Call) []byte { return h.AppendHeld(dst, e) })
	}
	// What the chunk itself gives waits behind a call still held that came
	// before it, and goes before the calls it holds: the rest of a delta
	// comes first, then its calls. A finish in it follows the calls it
	// delivers.
	at := len(h.Events) - min(kept, len(h.Events))
	if slices.ContainsFunc(h.Events[at:], func(e callfilter.Event) bool {
		return e.Call == callfilter.Passed || h.Calls[e.Call].State != callfilter.StateHeld
	}) {
		at = len(h.Events)
	}
	mark := len(dst)
	for _, tc := range cut {
		dst = f.cutNoticeChunk(dst, ev, js, tc)
	}
	switch {
	case wholly:
	case p.changed:
		dst = sse.AppendFrame(sse.KeepBOM(dst, ev), jsonscan.View(ev.Name), f.edited)
		dst = f.extraChunks(dst, ev, js, p)
	default:
		dst = append(dst, ev.Raw...)
	}
	if h.Suffix() && len(dst) > mark {
		h.KeepPassedAt(at, sse.TrimBOM(dst[mark:]), -1, ev.Unterminated)
		dst = f.FlushPassed(dst[:mark])
	}
	if p.failed || string(ev.Name) == "error" {
		dst = f.DropAll(dst) // the reply failed
	}
	return dst
}

// keepChunks keeps the elements chatEdit took out of the chunk js, in
// a chunk per call.
func (f *callFilter) keepChunks(ev *sse.Event, js string) {
	for i, e := range f.held {
		first := true
		for _, prev := range f.held[:i] {
			first = first && prev.call != e.call
		}
		if !first {
			continue
		}
		b := appendDeltaHead(f.Scratch[:0], js, f.Held.Calls[e.call].TC.Choice)
		n := 0
		for _, el := range f.held[i:] {
			if el.call != e.call || el.legacy {
				continue
			}
			if n == 0 {
				b = append(b, `"tool_calls":[`...)
			} else {
				b = append(b, ',')
			}
			b = append(b, f.heldBytes[el.start:el.end]...)
			n++
		}
		if n > 0 {
			b = append(b, ']')
		}
		for _, el := range f.held[i:] {
			if el.call != e.call || !el.legacy {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, `"function_call":`...)
			b = append(b, f.heldBytes[el.start:el.end]...)
			n++
		}
		f.Scratch = append(b, "}}]}"...)
		f.Held.KeepFramed(e.call, jsonscan.View(ev.Name), f.Scratch)
	}
}
