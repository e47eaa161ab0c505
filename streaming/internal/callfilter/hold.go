package callfilter

import (
	"slices"
	"strconv"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// Hold makes the filter keep every client call until the reply's stop
// shows it whole (streaming.CallFilter.Hold).
func (f *Filter) Hold() {
	if !f.Seen {
		f.Held.On = true
	}
}

// End drops every held call and appends the API's error event that ends
// the reply (streaming.CallFilter.End).
func (f *Filter) End(dst []byte, typ, msg string) []byte {
	h := &f.Held
	if h.Ended {
		return dst
	}
	h.Ended = true
	f.DropHeld(func(int, *Call) bool { return true })
	dst = f.FlushPassed(dst) // what came after the calls came before the end
	if h.OpenTail {
		// The last event delivered broke off without its blank line: end it
		// so that the error is an event of its own.
		dst = append(dst, "\n\n"...)
	}
	return f.rules.AppendEnd(dst, typ, msg)
}

// Holding reports whether any call's bytes are held now.
func (f *Filter) Holding() bool { return f.Held.Count > 0 }

// Withheld lists every call the agent did not receive: the refused ones (as
// Refused lists them), then the held ones dropped, in the order they were
// dropped.
func (f *Filter) Withheld() []streaming.ToolCall {
	out := make([]streaming.ToolCall, 0, len(f.RefusedCalls)+len(f.Held.Dropped))
	out = append(out, f.RefusedCalls...)
	return append(out, f.Held.Dropped...)
}

// Holds is what Hold keeps: the calls it follows and their events, in
// the order they came.
type Holds struct {
	On       bool
	Ended    bool // End ran
	OpenTail bool // the last event delivered is an Unterminated one
	Count    int  // calls in StateHeld state

	Calls   []Call
	Events  []Event
	buf     []byte               // the held events' bytes, back to back
	Dropped []streaming.ToolCall // for Withheld
}

// State is where a held call stands.
type State uint8

// The states of a held call.

const (
	StateHeld       State = iota // its events are kept
	StateReleased                // delivered; later events pass
	StateDropped                 // withheld; later events are withheld too
	StateReleasing               // being delivered, none of its events yet
	StateDelivering              // being delivered
)

// Call is one call whose events Hold kept.
type Call struct {
	TC    streaming.ToolCall // as Withheld lists it
	State State
	// Key is what the API's events find the call by: the Anthropic block
	// index, or the position of the call in the Chat or Responses filter.
	Key    int
	Closed bool // its end came: Anthropic content_block_stop, Responses .done
	// FreeText marks an input that is not JSON (custom tools).
	FreeText bool
	Indexed  bool // the call has a position to renumber (TC.Index)
	// Doubt is set when an event was taken for the call on a guess that
	// moving events may turn: it is not delivered.
	Doubt bool
	// Unlisted marks a call no decoder reads as one (a Responses item done
	// cut short, with nothing before it): dropped, Withheld does not list
	// it.
	Unlisted bool
	// Args is the arguments as the decoder assembles them, to tell whether
	// a call cut at the output limit is whole.
	Args []byte
	Out  int // the position it was delivered at (Anthropic, Responses)
}

// Event is one event kept for a call, or passed while a call is held
// (Call is Passed): its bytes, and what a release may have to renumber in
// it. Only the bytes are kept: the event is read again in the rare case it
// must be rewritten.
type Event struct {
	Call     int // position in Holds.Calls, or passed
	raw      span
	Pos      int // the index or output_index the event names, -1 for none
	Seq      int64
	Numbered bool
	Open     bool // an Unterminated event, passed
}

// Passed marks an Event that belongs to no call: one that came after a
// held call's first event and waits to go out in its place.
const Passed = -1

type span struct{ start, end int }

// bytes are the bytes kept for s.
func (h *Holds) bytes(s span) []byte { return h.buf[s.start:s.end:s.end] }

// AddCall starts following a call and returns its position.
func (h *Holds) AddCall(tc streaming.ToolCall, key int) int {
	h.Calls = append(h.Calls, Call{TC: tc, Key: key, Out: -1})
	h.Count++
	return len(h.Calls) - 1
}

// AddDead follows a call that no decoder reads, so that the events which
// follow it are withheld with it; Withheld does not list it.
func (h *Holds) AddDead(key int) {
	h.Calls = append(h.Calls, Call{Key: key, State: StateDropped, Out: -1})
}

// Find is the call with the given key, -1 when none: the latest, since a
// key may be reused by a later call.
func (h *Holds) Find(key int) int {
	if key < 0 {
		return -1
	}
	for i := len(h.Calls) - 1; i >= 0; i-- {
		if h.Calls[i].Key == key {
			return i
		}
	}
	return -1
}

// Forget stops finding calls by key: something else took it.
func (h *Holds) Forget(key int) {
	for i := range h.Calls {
		if h.Calls[i].Key == key {
			h.Calls[i].Key = -1
		}
	}
}

// Last is the latest call still held that keep selects (any when nil),
// -1 when none.
func (h *Holds) Last(keep func(*Call) bool) int {
	for i := len(h.Calls) - 1; i >= 0; i-- {
		if c := &h.Calls[i]; c.State == StateHeld && (keep == nil || keep(c)) {
			return i
		}
	}
	return -1
}

// Keep stores ev for call: its bytes with any byte order mark left out,
// since it will not be the first thing the client receives. Only a held
// call keeps events.
func (h *Holds) Keep(call int, ev *sse.Event, pos int, seq int64, numbered bool) {
	if h.Calls[call].State != StateHeld {
		return
	}
	h.Events = append(h.Events, Event{Call: call, raw: h.put(sse.TrimBOM(ev.Raw)), Pos: pos, Seq: seq, Numbered: numbered})
}

// KeepFramed stores an event the filter wrote, data framed as
// appendEventFrame frames it.
func (h *Holds) KeepFramed(call int, name string, data []byte) {
	if h.Calls[call].State != StateHeld {
		return
	}
	start := len(h.buf)
	h.buf = sse.AppendFrame(Grow(h.buf, len(name)+len(data)+32), name, data)
	h.Events = append(h.Events, Event{Call: call, raw: span{start, len(h.buf)}, Pos: -1})
}

// Keeppassed stores the bytes b the client gets for an event that is no
// held call's but came after one: they go out in the provider's order,
// when every call before them is delivered or dropped. pos is the block
// index they name (Anthropic), renumbered then, -1 for none.
func (h *Holds) KeepPassed(b []byte, pos int, open bool) {
	h.KeepPassedAt(len(h.Events), b, pos, open)
}

// KeeppassedAt is Keeppassed with the bytes going out before the kept
// events from i on.
func (h *Holds) KeepPassedAt(i int, b []byte, pos int, open bool) {
	h.Events = slices.Insert(h.Events, i, Event{Call: Passed, raw: h.put(b), Pos: pos, Open: open})
}

// Suffix reports whether what the filter passes now must wait: a call
// before it is held.
func (h *Holds) Suffix() bool { return h.Count > 0 }

func (h *Holds) put(b []byte) span {
	start := len(h.buf)
	h.buf = append(Grow(h.buf, len(b)), b...)
	return span{start, len(h.buf)}
}

// Grow makes room for n more bytes in b, doubling its capacity when it
// must: held calls run to megabytes, and append grows a large slice by a
// quarter at a time, copying it over and over.
func Grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 512))
	copy(nb, b)
	return nb
}

// AppendArgs appends an arguments value as the decoder takes it: a
// string decoded, an object or array as written.
func AppendArgs(dst []byte, raw string) []byte {
	return jsonscan.AppendValue(Grow(dst, len(raw)), raw)
}

// DropHeld drops the held calls which selects, listing them for Withheld,
// and forgets their events.
func (f *Filter) DropHeld(which func(i int, c *Call) bool) {
	h := &f.Held
	n := 0
	for i := range h.Calls {
		c := &h.Calls[i]
		if c.State != StateHeld || !which(i, c) {
			continue
		}
		c.State = StateDropped
		c.Args = nil
		h.Count--
		if !c.Unlisted {
			h.Dropped = append(h.Dropped, c.TC)
		}
		n++
	}
	if n > 0 {
		h.Events = slices.DeleteFunc(h.Events, func(e Event) bool { return e.Call != Passed && h.Calls[e.Call].State == StateDropped })
		h.compact()
	}
}

// Release delivers the held calls which selects: their events, in the
// order they came, each through write, which appends it to dst (as kept, or
// rewritten), and the events passed among them, in their places. Nothing
// overtakes a call still held: the events from its first on stay kept,
// those of the calls delivered now among them, until it is delivered or
// dropped. first is called once per call, before its first event goes out.
// With nothing to select it delivers what a dropped call left at the head.
func (f *Filter) Release(dst []byte, which func(i int, c *Call) bool, first func(*Call), write func(dst []byte, e *Event, c *Call) []byte) []byte {
	h := &f.Held
	for i := range h.Calls {
		c := &h.Calls[i]
		if c.State != StateHeld || !which(i, c) {
			continue
		}
		c.State = StateReleasing
		h.Count--
	}
	// A call goes out only with everything up to the end of what is kept:
	// the event that delivers it (a Chat finish) comes after that, and a
	// call must not go out without it.
	whole := !slices.ContainsFunc(h.Events, func(e Event) bool { return e.Call != Passed && h.Calls[e.Call].State == StateHeld })
	out := 0
	for ; out < len(h.Events); out++ {
		e := &h.Events[out]
		if e.Call == Passed {
			dst = f.appendPassed(dst, e)
			continue
		}
		if !whole {
			break
		}
		c := &h.Calls[e.Call]
		if c.State == StateReleasing {
			if first != nil {
				first(c)
			}
			c.State = StateDelivering
		}
		if write == nil {
			dst = h.AppendHeld(dst, e)
		} else {
			dst = write(dst, e, c)
		}
	}
	h.Events = h.Events[:copy(h.Events, h.Events[out:])]
	for i := range h.Calls {
		c := &h.Calls[i]
		if c.State != StateReleasing && c.State != StateDelivering {
			continue
		}
		if !slices.ContainsFunc(h.Events, func(e Event) bool { return e.Call == i }) {
			c.State, c.Args = StateReleased, nil
		}
	}
	h.compact()
	return dst
}

// Flushpassed delivers the events passed while a call was held that no
// held call comes before any more (a call before them was dropped).
func (f *Filter) FlushPassed(dst []byte) []byte {
	if len(f.Held.Events) == 0 {
		return dst
	}
	return f.Release(dst, func(int, *Call) bool { return false }, nil, nil)
}

// DropAll drops every held call, the reply having ended or failed with no
// stop for them, and delivers what passed meanwhile.
func (f *Filter) DropAll(dst []byte) []byte {
	f.DropHeld(func(int, *Call) bool { return true })
	return f.FlushPassed(dst)
}

// AppendPassed is Rules.AppendPassed for an API in which nothing refers
// to a position in the stream: the event as it was kept. A dialect whose
// events do (Anthropic's block indices) has its own.
func (f *Filter) AppendPassed(dst []byte, e *Event) []byte { return f.Held.AppendHeld(dst, e) }

// appendPassed appends an event passed while a call was held, as the API
// numbers it now.
func (f *Filter) appendPassed(dst []byte, e *Event) []byte {
	f.Held.OpenTail = e.Open
	return f.rules.AppendPassed(dst, e)
}

// compact frees the buffer once no event is left in it.
func (h *Holds) compact() {
	if len(h.Events) == 0 {
		h.buf = h.buf[:0]
	}
}

// AppendHeld appends a held event as it was kept.
func (h *Holds) AppendHeld(dst []byte, e *Event) []byte {
	return append(dst, h.bytes(e.raw)...)
}

// AppendRenumbered appends a held event with the members renumber sets
// (key to pos, sequence_number to seq), read again from its bytes.
func (f *Filter) AppendRenumbered(dst []byte, e *Event, key string, pos int, seq int64, numbered bool) []byte {
	var ev sse.Event
	fn := func(got *sse.Event) error {
		ev.Name, ev.Data = slices.Clone(got.Name), slices.Clone(got.Data)
		return nil
	}
	// A held event was read by a Reader and is valid JSON: it reads again.
	_ = sse.Each(f.Held.bytes(e.raw), fn)
	f.Scratch = Renumber(f.Scratch[:0], jsonscan.View(ev.Data), key, pos, seq, numbered)
	return sse.AppendFrame(dst, jsonscan.View(ev.Name), f.Scratch)
}

// Positions renumbers content positions (Anthropic block indices, Responses
// output indices) so that they follow the order in which the client gets
// them. A position delivered before anything was held keeps its number;
// one delivered while an earlier one is held (or after one was dropped)
// closes the gap; a held one released takes the next number after all
// delivered so far, or its own when that is higher.
type Positions struct {
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

// Init readies p for use.
func (p *Positions) Init() {
	p.pairs = p.pairsBuf[:0]
	p.skipped = p.skippedBuf[:0]
	p.identity, p.maxOut = -1, -1
}

// Out is the number the client sees for position in, delivered now.
func (p *Positions) Out(in int) int {
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

// Peek is the number position in has or would have, delivered now,
// without taking it.
func (p *Positions) Peek(in int) int {
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

// Placed is an element of an array and the position the client got it at.
type Placed struct {
	In, Out int    // its position in the array, and the client's
	Elem    string // its JSON text
}

// Order appends to dst the elements of the JSON array arr that keep
// selects, in the order the client got them (Peek), the array's among
// equals. keep is called once per element, in the array's order.
func (p *Positions) Order(dst []Placed, arr string, keep func(in int) bool) []Placed {
	start := len(dst)
	it := jsonscan.NewArrayIter(arr)
	for in := 0; ; in++ {
		elem, ok := it.Next()
		if !ok {
			break
		}
		if keep(in) {
			dst = append(dst, Placed{In: in, Out: p.Peek(in), Elem: elem})
		}
	}
	slices.SortStableFunc(dst[start:], func(a, b Placed) int { return a.Out - b.Out })
	return dst
}

// Moved reports whether positions are renumbered now, or may be: a
// position is held or was dropped, or one was delivered under another
// number.
func (p *Positions) Moved() bool { return len(p.skipped) > 0 || p.renumbered }

// Hold marks position in as held: it is not in the output yet.
func (p *Positions) Hold(in int) {
	if !slices.Contains(p.skipped, in) {
		p.skipped = append(p.skipped, in)
	}
}

// Release gives the number of held position in, delivered now. A held
// position never released (its call dropped) stays skipped, so that no gap
// shows where it stood.
func (p *Positions) Release(in int) int {
	if i := slices.Index(p.skipped, in); i >= 0 {
		p.skipped = slices.Delete(p.skipped, i, i+1)
	}
	out := max(in-p.skippedBefore(in), p.maxOut+1)
	p.pairs = append(p.pairs, posPair{in, out})
	p.maxOut = out
	p.renumbered = p.renumbered || out != in
	return out
}

// Unskip marks held position in as one that will be delivered in its
// place: the positions after it keep their distance to it.
func (p *Positions) Unskip(in int) {
	if i := slices.Index(p.skipped, in); i >= 0 {
		p.skipped = slices.Delete(p.skipped, i, i+1)
	}
}

// Deliver gives the number of held position in, delivered in its place
// in the stream (nothing after it went out before it): only the positions
// dropped before it close up.
func (p *Positions) Deliver(in int) int {
	p.Unskip(in)
	out := in - p.skippedBefore(in)
	p.pairs = append(p.pairs, posPair{in, out})
	p.maxOut = max(p.maxOut, out)
	p.renumbered = p.renumbered || out != in
	return out
}

func (p *Positions) skippedBefore(in int) int {
	n := 0
	for _, s := range p.skipped {
		if s < in {
			n++
		}
	}
	return n
}

// Renumber writes the event data js (valid JSON) with its top-level
// members named key set to pos, when pos >= 0, and its sequence_number
// members set to seq, when numbered. Only numbers are replaced.
func Renumber(dst []byte, js, key string, pos int, seq int64, numbered bool) []byte {
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
