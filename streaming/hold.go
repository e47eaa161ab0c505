package streaming

import (
	"slices"
	"strconv"

	"gatekeeper/streaming/sse"

	"gatekeeper/streaming/internal/jsonscan"
)

// Holding client tool calls until they are safe to deliver.
//
// A call must reach the agent whole or not at all. A reply the provider cut
// at its output limit, or one an operator canceled, may stop in the middle
// of a call, and what the agent makes of half a call is up to the agent
// (Claude Code takes a stream that ends cleanly inside a tool_use for a
// finished reply and loses the call without a word). With Hold the filter
// keeps the events of every client call until the reply's stop tells
// whether the calls are whole, and delivers them just before that stop; End
// drops whatever is held and closes the reply with the provider's own error
// event, which the SDKs raise.
//
// A held call holds what comes after it: in Anthropic and Chat, every
// event after a held call's first one (a ping, text, another choice's
// chunks, another call) waits with it and goes out in the provider's
// order once no call before it is held, so that the client gets a prefix
// of what the provider sent. Only a call dropped (or refused) moves what
// refers to positions in the stream, and the filter fixes that up as it
// goes: Anthropic block indices close the gap it leaves. In Responses,
// events that are not a held call's (comments aside) still go out at
// once, and the held calls are moved just before the stop: block and
// output indices follow the order in which the client receives blocks and
// items (the SDKs append each new one and find it again by that index),
// and Responses sequence numbers stay one apart. Text, thinking and the
// calls the provider runs itself are never held themselves: before a held
// call the agent sees them as they come.

// Hold makes the filter keep every client tool call's events (Anthropic
// tool_use blocks, Chat tool_calls deltas, Responses client call items:
// function_call, custom_tool_call, local_shell_call, shell_call,
// apply_patch_call, computer_call and unknown *_call items with a call_id,
// see internal/callitems) instead of passing them on, until the reply's stop
// is known (Anthropic message_delta with a stop_reason; Chat the
// finish_reason of the call's choice; Responses response.completed,
// .incomplete or .failed). Then the held calls are delivered, in their
// places relative to each other, just before the stop event, except a call
// the reply did not finish:
//
//   - at a stop for the output limit (Anthropic max_tokens or
//     model_context_window_exceeded, Chat length, Responses incomplete for
//     max_output_tokens), the last call when its arguments are not complete
//     JSON (or are free text, in Chat, where nothing marks an input done);
//   - at any stop, a call whose end never came (no Anthropic
//     content_block_stop; no Responses .done event nor completed item).
//
// Those are dropped and listed by Withheld; the stop reason is kept as the
// provider sent it. A provider error event, or the stream's terminal marker
// ([DONE], message_stop) coming before the stop, drops what is held. What
// came after a held call's first event (text, thinking, server-tool
// events, pings, comments) waits for it and goes out in its place
// (Anthropic and Chat; in Responses only comments wait).
//
// Call Hold before the first AppendEvent; later it has no effect.
func (f *CallFilter) Hold() {
	if !f.seen {
		f.hold.on = true
	}
}

// End appends the bytes that end the reply now with the provider's own error
// event carrying typ and msg, and drops every held call (listed by
// Withheld):
//
//   - Anthropic: event: error, {"type":"error","error":{"type","message"}};
//   - Chat: a data-only {"error":{"message","type","code","param"}} chunk,
//     with code set to typ;
//   - Responses: event: error, {"type":"error","code","message","param":null,
//     "sequence_number"}, numbered after the last event delivered (omitted
//     when the stream numbers none of its events).
//
// After End, AppendEvent appends nothing and End itself no more. Calls
// already delivered stay delivered: with Hold they were whole.
func (f *CallFilter) End(dst []byte, typ, msg string) []byte {
	h := &f.hold
	if h.ended {
		return dst
	}
	h.ended = true
	f.dropHeld(func(int, *heldCall) bool { return true })
	dst = f.flushPassed(dst) // what came after the calls came before the end
	if h.openTail {
		// The last event delivered broke off without its blank line: end it
		// so that the error is an event of its own.
		dst = append(dst, "\n\n"...)
	}
	b := f.scratch[:0]
	switch f.api {
	case APIAnthropic:
		b = jsonscan.AppendQuoted(append(b, `{"type":"error","error":{"type":`...), typ)
		b = jsonscan.AppendQuoted(append(b, `,"message":`...), msg)
		b = append(b, "}}"...)
		f.scratch = b
		return sse.AppendFrame(dst, "error", b)
	case APIChat:
		b = jsonscan.AppendQuoted(append(b, `{"error":{"message":`...), msg)
		b = jsonscan.AppendQuoted(append(b, `,"type":`...), typ)
		b = jsonscan.AppendQuoted(append(b, `,"code":`...), typ)
		b = append(b, `,"param":null}}`...)
		f.scratch = b
		return sse.AppendFrame(dst, "", b)
	}
	r := &f.responses
	b = jsonscan.AppendQuoted(append(b, `{"type":"error","code":`...), typ)
	b = jsonscan.AppendQuoted(append(b, `,"message":`...), msg)
	b = append(b, `,"param":null`...)
	switch {
	case r.seqOut:
		b = strconv.AppendInt(append(b, `,"sequence_number":`...), r.lastSeq+1, 10)
	case r.seqFirst:
		b = strconv.AppendInt(append(b, `,"sequence_number":`...), r.firstSeq, 10)
	case !f.seen:
		b = append(b, `,"sequence_number":0`...)
	}
	f.scratch = append(b, '}')
	return sse.AppendFrame(dst, "error", f.scratch)
}

// Holding reports whether any call's bytes are held now.
func (f *CallFilter) Holding() bool { return f.hold.held > 0 }

// Withheld lists every call the agent did not receive: the refused ones (as
// Refused lists them), then the held ones dropped, in the order they were
// dropped.
func (f *CallFilter) Withheld() []ToolCall {
	out := make([]ToolCall, 0, len(f.refused)+len(f.hold.dropped))
	out = append(out, f.refused...)
	return append(out, f.hold.dropped...)
}

// holdState is what Hold keeps: the calls it follows and their events, in
// the order they came.
type holdState struct {
	on       bool
	ended    bool // End ran
	openTail bool // the last event delivered is an Unterminated one
	held     int  // calls in callHeld state

	calls   []heldCall
	events  []heldEvent
	buf     []byte     // the held events' bytes, back to back
	dropped []ToolCall // for Withheld
}

type heldState uint8

const (
	callHeld       heldState = iota // its events are kept
	callReleased                    // delivered; later events pass
	callDropped                     // withheld; later events are withheld too
	callReleasing                   // being delivered, none of its events yet
	callDelivering                  // being delivered
)

// heldCall is one call whose events Hold kept.
type heldCall struct {
	tc    ToolCall // as Withheld lists it
	state heldState
	// key is what the API's events find the call by: the Anthropic block
	// index, or the position of the call in the Chat or Responses filter.
	key    int
	closed bool // its end came: Anthropic content_block_stop, Responses .done
	// freeText marks an input that is not JSON (custom tools).
	freeText bool
	indexed  bool // the call has a position to renumber (tc.Index)
	// doubt is set when an event was taken for the call on a guess that
	// moving events may turn: it is not delivered.
	doubt bool
	// unlisted marks a call no decoder reads as one (a Responses item done
	// cut short, with nothing before it): dropped, Withheld does not list
	// it.
	unlisted bool
	// args is the arguments as the decoder assembles them, to tell whether
	// a call cut at the output limit is whole.
	args []byte
	out  int // the position it was delivered at (Anthropic, Responses)
}

// heldEvent is one event kept for a call, or passed while a call is held
// (call is passed): its bytes, and what a release may have to renumber in
// it. Only the bytes are kept: the event is read again in the rare case it
// must be rewritten.
type heldEvent struct {
	call     int // position in holdState.calls, or passed
	raw      span
	pos      int // the index or output_index the event names, -1 for none
	seq      int64
	numbered bool
	open     bool // an Unterminated event, passed
}

// passed marks a heldEvent that belongs to no call: one that came after a
// held call's first event and waits to go out in its place.
const passed = -1

type span struct{ start, end int }

func (h *holdState) bytes(s span) []byte { return h.buf[s.start:s.end:s.end] }

// addCall starts following a call and returns its position.
func (h *holdState) addCall(tc ToolCall, key int) int {
	h.calls = append(h.calls, heldCall{tc: tc, key: key, out: -1})
	h.held++
	return len(h.calls) - 1
}

// addDead follows a call that no decoder reads, so that the events which
// follow it are withheld with it; Withheld does not list it.
func (h *holdState) addDead(key int) {
	h.calls = append(h.calls, heldCall{key: key, state: callDropped, out: -1})
}

// find is the call with the given key, -1 when none: the latest, since a
// key may be reused by a later call.
func (h *holdState) find(key int) int {
	if key < 0 {
		return -1
	}
	for i := len(h.calls) - 1; i >= 0; i-- {
		if h.calls[i].key == key {
			return i
		}
	}
	return -1
}

// forget stops finding calls by key: something else took it.
func (h *holdState) forget(key int) {
	for i := range h.calls {
		if h.calls[i].key == key {
			h.calls[i].key = -1
		}
	}
}

// last is the latest call still held that keep selects (any when nil),
// -1 when none.
func (h *holdState) last(keep func(*heldCall) bool) int {
	for i := len(h.calls) - 1; i >= 0; i-- {
		if c := &h.calls[i]; c.state == callHeld && (keep == nil || keep(c)) {
			return i
		}
	}
	return -1
}

// keep stores ev for call: its bytes with any byte order mark left out,
// since it will not be the first thing the client receives. Only a held
// call keeps events.
func (h *holdState) keep(call int, ev *sse.Event, pos int, seq int64, numbered bool) {
	if h.calls[call].state != callHeld {
		return
	}
	h.events = append(h.events, heldEvent{call: call, raw: h.put(sse.TrimBOM(ev.Raw)), pos: pos, seq: seq, numbered: numbered})
}

// keepFramed stores an event the filter wrote, data framed as
// appendEventFrame frames it.
func (h *holdState) keepFramed(call int, name string, data []byte) {
	if h.calls[call].state != callHeld {
		return
	}
	start := len(h.buf)
	h.buf = sse.AppendFrame(grow(h.buf, len(name)+len(data)+32), name, data)
	h.events = append(h.events, heldEvent{call: call, raw: span{start, len(h.buf)}, pos: -1})
}

// keepPassed stores the bytes b the client gets for an event that is no
// held call's but came after one: they go out in the provider's order,
// when every call before them is delivered or dropped. pos is the block
// index they name (Anthropic), renumbered then, -1 for none.
func (h *holdState) keepPassed(b []byte, pos int, open bool) {
	h.keepPassedAt(len(h.events), b, pos, open)
}

// keepPassedAt is keepPassed with the bytes going out before the kept
// events from i on.
func (h *holdState) keepPassedAt(i int, b []byte, pos int, open bool) {
	h.events = slices.Insert(h.events, i, heldEvent{call: passed, raw: h.put(b), pos: pos, open: open})
}

// suffix reports whether what the filter passes now must wait: a call
// before it is held.
func (h *holdState) suffix() bool { return h.held > 0 }

func (h *holdState) put(b []byte) span {
	start := len(h.buf)
	h.buf = append(grow(h.buf, len(b)), b...)
	return span{start, len(h.buf)}
}

// grow makes room for n more bytes in b, doubling its capacity when it
// must: held calls run to megabytes, and append grows a large slice by a
// quarter at a time, copying it over and over.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 512))
	copy(nb, b)
	return nb
}

// dropHeld drops the held calls which selects, listing them for Withheld,
// and forgets their events.
func (f *CallFilter) dropHeld(which func(i int, c *heldCall) bool) {
	h := &f.hold
	n := 0
	for i := range h.calls {
		c := &h.calls[i]
		if c.state != callHeld || !which(i, c) {
			continue
		}
		c.state = callDropped
		c.args = nil
		h.held--
		if !c.unlisted {
			h.dropped = append(h.dropped, c.tc)
		}
		n++
	}
	if n > 0 {
		h.events = slices.DeleteFunc(h.events, func(e heldEvent) bool { return e.call != passed && h.calls[e.call].state == callDropped })
		h.compact()
	}
}

// release delivers the held calls which selects: their events, in the
// order they came, each through write, which appends it to dst (as kept, or
// rewritten), and the events passed among them, in their places. Nothing
// overtakes a call still held: the events from its first on stay kept,
// those of the calls delivered now among them, until it is delivered or
// dropped. first is called once per call, before its first event goes out.
// With nothing to select it delivers what a dropped call left at the head.
func (f *CallFilter) release(dst []byte, which func(i int, c *heldCall) bool, first func(*heldCall), write func(dst []byte, e *heldEvent, c *heldCall) []byte) []byte {
	h := &f.hold
	for i := range h.calls {
		c := &h.calls[i]
		if c.state != callHeld || !which(i, c) {
			continue
		}
		c.state = callReleasing
		h.held--
	}
	// A call goes out only with everything up to the end of what is kept:
	// the event that delivers it (a Chat finish) comes after that, and a
	// call must not go out without it.
	whole := !slices.ContainsFunc(h.events, func(e heldEvent) bool { return e.call != passed && h.calls[e.call].state == callHeld })
	out := 0
	for ; out < len(h.events); out++ {
		e := &h.events[out]
		if e.call == passed {
			dst = f.appendPassed(dst, e)
			continue
		}
		if !whole {
			break
		}
		c := &h.calls[e.call]
		if c.state == callReleasing {
			if first != nil {
				first(c)
			}
			c.state = callDelivering
		}
		if write == nil {
			dst = h.appendHeld(dst, e)
		} else {
			dst = write(dst, e, c)
		}
	}
	h.events = h.events[:copy(h.events, h.events[out:])]
	for i := range h.calls {
		c := &h.calls[i]
		if c.state != callReleasing && c.state != callDelivering {
			continue
		}
		if !slices.ContainsFunc(h.events, func(e heldEvent) bool { return e.call == i }) {
			c.state, c.args = callReleased, nil
		}
	}
	h.compact()
	return dst
}

// flushPassed delivers the events passed while a call was held that no
// held call comes before any more (a call before them was dropped).
func (f *CallFilter) flushPassed(dst []byte) []byte {
	if len(f.hold.events) == 0 {
		return dst
	}
	return f.release(dst, func(int, *heldCall) bool { return false }, nil, nil)
}

// appendPassed appends an event passed while a call was held, as the API
// numbers it now.
func (f *CallFilter) appendPassed(dst []byte, e *heldEvent) []byte {
	f.hold.openTail = e.open
	if f.api == APIAnthropic && e.pos >= 0 {
		if out := f.anthropic.pos.out(e.pos); out != e.pos {
			return f.appendRenumbered(dst, e, "index", out, 0, false)
		}
	}
	return f.hold.appendHeld(dst, e)
}

// compact frees the buffer once no event is left in it.
func (h *holdState) compact() {
	if len(h.events) == 0 {
		h.buf = h.buf[:0]
	}
}

// appendHeld appends a held event as it was kept.
func (h *holdState) appendHeld(dst []byte, e *heldEvent) []byte {
	return append(dst, h.bytes(e.raw)...)
}

// appendRenumbered appends a held event with the members renumber sets
// (key to pos, sequence_number to seq), read again from its bytes.
func (f *CallFilter) appendRenumbered(dst []byte, e *heldEvent, key string, pos int, seq int64, numbered bool) []byte {
	var ev sse.Event
	fn := func(got *sse.Event) error {
		ev.Name, ev.Data = slices.Clone(got.Name), slices.Clone(got.Data)
		return nil
	}
	// A held event was read by a Reader and is valid JSON: it reads again.
	_ = sse.Each(f.hold.bytes(e.raw), fn)
	f.scratch = renumber(f.scratch[:0], jsonscan.View(ev.Data), key, pos, seq, numbered)
	return sse.AppendFrame(dst, jsonscan.View(ev.Name), f.scratch)
}

// positions renumbers content positions (Anthropic block indices, Responses
// output indices) so that they follow the order in which the client gets
// them. A position delivered before anything was held keeps its number;
// one delivered while an earlier one is held (or after one was dropped)
// closes the gap; a held one released takes the next number after all
// delivered so far, or its own when that is higher.
type positions struct {
	pairs    []posPair // renumbered or released positions, latest last
	skipped  []int     // positions held now or dropped
	identity int       // highest position delivered before any was skipped
	maxOut   int       // highest position delivered
	// renumbered is set once a position was delivered under another number.
	renumbered bool

	pairsBuf   [8]posPair
	skippedBuf [4]int
}

type posPair struct{ in, out int }

func (p *positions) init() {
	p.pairs = p.pairsBuf[:0]
	p.skipped = p.skippedBuf[:0]
	p.identity, p.maxOut = -1, -1
}

// out is the number the client sees for position in, delivered now.
func (p *positions) out(in int) int {
	for i := len(p.pairs) - 1; i >= 0; i-- {
		if p.pairs[i].in == in {
			return p.pairs[i].out
		}
	}
	if len(p.skipped) == 0 && len(p.pairs) == 0 || in <= p.identity {
		if len(p.pairs) == 0 {
			p.identity = max(p.identity, in)
		}
		p.maxOut = max(p.maxOut, in)
		return in
	}
	out := in - p.skippedBefore(in)
	p.pairs = append(p.pairs, posPair{in, out})
	p.maxOut = max(p.maxOut, out)
	p.renumbered = p.renumbered || out != in
	return out
}

// peek is the number position in has or would have, delivered now,
// without taking it.
func (p *positions) peek(in int) int {
	for i := len(p.pairs) - 1; i >= 0; i-- {
		if p.pairs[i].in == in {
			return p.pairs[i].out
		}
	}
	if len(p.skipped) == 0 && len(p.pairs) == 0 || in <= p.identity {
		return in
	}
	return in - p.skippedBefore(in)
}

// moved reports whether positions are renumbered now, or may be: a
// position is held or was dropped, or one was delivered under another
// number.
func (p *positions) moved() bool { return len(p.skipped) > 0 || p.renumbered }

// hold marks position in as held: it is not in the output yet.
func (p *positions) hold(in int) {
	if !slices.Contains(p.skipped, in) {
		p.skipped = append(p.skipped, in)
	}
}

// release gives the number of held position in, delivered now. A held
// position never released (its call dropped) stays skipped, so that no gap
// shows where it stood.
func (p *positions) release(in int) int {
	if i := slices.Index(p.skipped, in); i >= 0 {
		p.skipped = slices.Delete(p.skipped, i, i+1)
	}
	out := max(in-p.skippedBefore(in), p.maxOut+1)
	p.pairs = append(p.pairs, posPair{in, out})
	p.maxOut = out
	p.renumbered = p.renumbered || out != in
	return out
}

// unskip marks held position in as one that will be delivered in its
// place: the positions after it keep their distance to it.
func (p *positions) unskip(in int) {
	if i := slices.Index(p.skipped, in); i >= 0 {
		p.skipped = slices.Delete(p.skipped, i, i+1)
	}
}

// deliver gives the number of held position in, delivered in its place
// in the stream (nothing after it went out before it): only the positions
// dropped before it close up.
func (p *positions) deliver(in int) int {
	p.unskip(in)
	out := in - p.skippedBefore(in)
	p.pairs = append(p.pairs, posPair{in, out})
	p.maxOut = max(p.maxOut, out)
	p.renumbered = p.renumbered || out != in
	return out
}

func (p *positions) skippedBefore(in int) int {
	n := 0
	for _, s := range p.skipped {
		if s < in {
			n++
		}
	}
	return n
}

// renumber writes the event data js (valid JSON) with its top-level
// members named key set to pos, when pos >= 0, and its sequence_number
// members set to seq, when numbered. Only numbers are replaced.
func renumber(dst []byte, js, key string, pos int, seq int64, numbered bool) []byte {
	return jsonscan.FilterObject(dst, js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		if !jsonscan.IsNumber(m.Val) {
			return dst, jsonscan.Keep
		}
		switch n := m.Name(); {
		case pos >= 0 && n == key:
			return strconv.AppendInt(dst, int64(pos), 10), jsonscan.Replace
		case numbered && n == "sequence_number":
			return strconv.AppendInt(dst, seq, 10), jsonscan.Replace
		}
		return dst, jsonscan.Keep
	}, nil)
}
