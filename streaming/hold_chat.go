package streaming

import (
	"slices"
	"strconv"
	"strings"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// Holding Chat Completions calls: the tool_calls elements of a choice wait
// for its finish_reason. A chunk that carries nothing but one held call's
// elements is held as it came; from any other, the held elements are taken
// out and kept in a chunk of their own per call, with the id, object,
// created and model of the chunk they came in. Nothing in Chat refers to
// a position in the stream, so moving them renumbers nothing.

// chatHeldElem is a held element of the chunk being edited, written in
// chatCallFilter.heldBytes.
type chatHeldElem struct {
	call       int // position in holdState.calls
	legacy     bool
	start, end int
}

// chatHoldCall starts holding a new allowed call and returns its position
// in holdState.calls. It is keyed by the position it is about to take in
// chatCallFilter.calls.
func (f *CallFilter) chatHoldCall(choice, key int, legacy bool, typ, id, name, custom string) int {
	tc := ToolCall{Choice: choice, Index: key, Type: "function", ID: strings.Clone(jsonscan.Text(id)), Name: strings.Clone(name)}
	switch t := jsonscan.Text(typ); {
	case legacy:
		tc.Type = "function_call"
	case t != "":
		tc.Type = strings.Clone(t)
	}
	if tc.Name == "" {
		tc.Name = strings.Clone(custom)
	}
	return f.hold.addCall(tc, len(f.chat.calls))
}

// chatHoldElement plans an element of an allowed call with Hold: held
// while its choice has not finished, withheld once its call was dropped or
// delivered. args is its arguments member as written; custom marks a
// free-text input.
func (f *CallFilter) chatHoldElement(ep chatElemPlan, args string, custom bool) chatElemPlan {
	c := &f.chat
	p := &c.plan
	if !f.hold.on || ep.call < 0 || c.calls[ep.call].held < 0 {
		return ep
	}
	held := c.calls[ep.call].held
	hc := &f.hold.calls[held]
	if hc.state != callHeld {
		// Dropped, or delivered whole at the finish: a fragment after it
		// would change a call the agent may already run.
		p.changed, p.edits = true, true
		ep.drop = true
		return ep
	}
	hc.args = appendArgsRaw(hc.args, args)
	hc.freeText = hc.freeText || custom
	if c.finishing {
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
func (c *chatCallFilter) keepElement(ep chatElemPlan, el string, legacy bool) {
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

// chatHoldEvent writes what the client gets for a chunk with Hold: first
// the held calls of the choices it finishes, less a call cut at the output
// limit, then the chunk less the elements it holds.
func (f *CallFilter) chatHoldEvent(dst []byte, ev *sse.Event, js string, p *chatPlan) []byte {
	h := &f.hold
	c := &f.chat
	var cut []ToolCall // calls cut at the output limit, for the notice
	for _, fin := range p.finishes {
		if !fin.cut {
			continue
		}
		last := -1
		for i := range fin.upto {
			if hc := &h.calls[i]; hc.state == callHeld && hc.tc.Choice == fin.choice {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		if hc := &h.calls[last]; !hc.freeText && gjson.ValidBytes(hc.args) {
			continue
		}
		if f.cutNotice != nil && !h.calls[last].unlisted {
			cut = append(cut, h.calls[last].tc)
		}
		f.dropHeld(func(i int, _ *heldCall) bool { return i == last })
		for i := range p.elems {
			if ep := &p.elems[i]; ep.call >= 0 && c.calls[ep.call].held == last {
				ep.drop, p.changed, p.edits = true, true, true
			}
		}
	}
	// The elements this chunk holds are kept first: a finish in a later
	// choice object of the chunk delivers them too, as the decoder ends the
	// calls a choice has when its finish comes.
	wholly := p.holds > 0 && p.holdCall >= 0 && p.holds == len(p.elems) && len(p.choices) == 1 && !p.edits && !p.extra
	kept := len(h.events)
	switch {
	case wholly:
		h.keep(p.holdCall, ev, -1, 0, false)
	case p.changed:
		c.held, c.heldBytes = c.held[:0], c.heldBytes[:0]
		c.edited = f.chatEdit(c.edited[:0], js, false)
		f.chatKeepChunks(ev, js)
	}
	kept = len(h.events) - kept
	for _, fin := range p.finishes {
		dst = f.release(dst, func(i int, hc *heldCall) bool { return i < fin.upto && hc.tc.Choice == fin.choice }, nil,
			func(dst []byte, e *heldEvent, _ *heldCall) []byte { return h.appendHeld(dst, e) })
	}
	// What the chunk itself gives waits behind a call still held that came
	// before it, and goes before the calls it holds: the rest of a delta
	// comes first, then its calls. A finish in it follows the calls it
	// delivers.
	at := len(h.events) - min(kept, len(h.events))
	if slices.ContainsFunc(h.events[at:], func(e heldEvent) bool { return e.call == passed || h.calls[e.call].state != callHeld }) {
		at = len(h.events)
	}
	mark := len(dst)
	for _, tc := range cut {
		dst = f.chatCutNotice(dst, ev, js, tc) // filter_cut.go
	}
	switch {
	case wholly:
	case p.changed:
		dst = sse.AppendFrame(sse.KeepBOM(dst, ev), jsonscan.View(ev.Name), c.edited)
		dst = f.chatExtraChunks(dst, ev, js, p)
	default:
		dst = append(dst, ev.Raw...)
	}
	if h.suffix() && len(dst) > mark {
		h.keepPassedAt(at, sse.TrimBOM(dst[mark:]), -1, ev.Unterminated)
		dst = f.flushPassed(dst[:mark])
	}
	if p.failed || string(ev.Name) == "error" {
		f.dropHeld(func(int, *heldCall) bool { return true }) // the reply failed
		dst = f.flushPassed(dst)
	}
	return dst
}

// chatKeepChunks keeps the elements chatEdit took out of the chunk js, in
// a chunk per call.
func (f *CallFilter) chatKeepChunks(ev *sse.Event, js string) {
	c := &f.chat
	for i, e := range c.held {
		first := true
		for _, prev := range c.held[:i] {
			first = first && prev.call != e.call
		}
		if !first {
			continue
		}
		b := appendChunkHead(f.scratch[:0], js)
		b = append(b, `"choices":[{"index":`...)
		b = strconv.AppendInt(b, int64(f.hold.calls[e.call].tc.Choice), 10)
		b = append(b, `,"delta":{`...)
		n := 0
		for _, el := range c.held[i:] {
			if el.call != e.call || el.legacy {
				continue
			}
			if n == 0 {
				b = append(b, `"tool_calls":[`...)
			} else {
				b = append(b, ',')
			}
			b = append(b, c.heldBytes[el.start:el.end]...)
			n++
		}
		if n > 0 {
			b = append(b, ']')
		}
		for _, el := range c.held[i:] {
			if el.call != e.call || !el.legacy {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, `"function_call":`...)
			b = append(b, c.heldBytes[el.start:el.end]...)
			n++
		}
		f.scratch = append(b, "}}]}"...)
		f.hold.keepFramed(e.call, jsonscan.View(ev.Name), f.scratch)
	}
}
