package responses

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/callitems"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/sse"
)

// OpenAI Responses: a refused client call item (internal/callitems)
// becomes a message item at the same output index.

// callFilter is the call filter's Rules for Responses, run by the engine
// it embeds.
type callFilter struct {
	*callfilter.Filter

	seq   callfilter.Seq // the sequence numbers passed on
	calls []responsesFilterCall
	ids   []byte // the calls' item ids, back to back
	// plan has an entry per output item walked: the refused call replacing
	// it, keepItem or dropItem.
	plan []int

	// With Hold: output indices as the client gets them, and whether the
	// reply's stop came.
	pos     callfilter.Positions
	stopped bool

	order []callfilter.Placed // the final output's items, with Hold, in the client's order

	callsBuf [8]responsesFilterCall
	idsBuf   [512]byte
	planBuf  [8]int
}

// Plan entries that are not a refused call.
const (
	keepItem = -1
	dropItem = -2 // a held call dropped: the final output leaves it out
)

var _ callfilter.Rules = (*callFilter)(nil)

// newRules returns the rules run by the engine e.
func newRules(e *callfilter.Filter) *callFilter {
	r := &callFilter{Filter: e}
	r.init()
	return r
}

// API is streaming.APIResponses.
func (*callFilter) API() streaming.API { return streaming.APIResponses }

func (r *callFilter) init() {
	r.calls = r.callsBuf[:0]
	r.ids = r.idsBuf[:0]
	r.plan = r.planBuf[:0]
	r.pos.Init()
}

// responsesFilterCall is one call of the reply, found as the decoder finds
// it: by item id, else by output index. Calls the provider runs are kept
// too, since the decoder pairs events with them as well.
type responsesFilterCall struct {
	outputIndex int
	idStart     int
	idEnd       int
	refused     int  // position in Filter.RefusedCalls, -1 for a call let through
	held        int  // position in Filter.Held.Calls, -1 for a call not held
	server      bool // a hosted call
}

func (r *callFilter) itemID(c responsesFilterCall) string {
	return jsonscan.View(r.ids[c.idStart:c.idEnd])
}

func (r *callFilter) add(outputIndex int, itemID string, refused int, server bool) int {
	start := len(r.ids)
	r.ids = append(r.ids, itemID...)
	r.calls = append(r.calls, responsesFilterCall{
		outputIndex: outputIndex, idStart: start, idEnd: len(r.ids), refused: refused, held: -1, server: server,
	})
	return len(r.calls) - 1
}

// find locates a call by item id, falling back to the output index (raw
// JSON, used only when it is a number).
func (r *callFilter) find(itemID, outputIndex string) int {
	return r.findAt(itemID, jsonscan.Int(outputIndex), jsonscan.IsNumber(outputIndex))
}

// findAt is find with the output index oi, used when indexed is set.
func (r *callFilter) findAt(itemID string, oi int, indexed bool) int {
	if itemID != "" {
		for i := len(r.calls) - 1; i >= 0; i-- {
			if r.itemID(r.calls[i]) == itemID {
				return i
			}
		}
	}
	if indexed {
		for i := len(r.calls) - 1; i >= 0; i-- {
			if r.calls[i].outputIndex == oi {
				return i
			}
		}
	}
	return -1
}

// withheld reports whether an event refers to a refused call by any of
// the item ids or the output index it carries.
func (r *callFilter) withheld(outputIndex string, itemIDs ...string) bool {
	return r.refers(func(c responsesFilterCall) bool { return c.refused >= 0 }, outputIndex, itemIDs...) >= 0
}

// refers is the first call which selects that an event refers to by any
// of the item ids or the output index it carries, -1 when none.
func (r *callFilter) refers(which func(responsesFilterCall) bool, outputIndex string, itemIDs ...string) int {
	for i, c := range r.calls {
		if !which(c) {
			continue
		}
		if jsonscan.IsNumber(outputIndex) && jsonscan.Int(outputIndex) == c.outputIndex {
			return i
		}
		for _, id := range itemIDs {
			if id != "" && id == r.itemID(c) {
				return i
			}
		}
	}
	return -1
}

// responsesFields are an event's members, read as the decoder reads them.
type responsesFields struct {
	eventFields

	event    string // the event's type
	seqNum   int64  // its sequence number, when numbered
	numbered bool
}

func (f *callFilter) FilterEvent(dst []byte, ev *sse.Event) []byte {
	h := &f.Held
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 || data[0] != '{' {
		if h.Count > 0 && bytes.HasPrefix(data, []byte(streaming.DoneMarker)) {
			dst = f.DropAll(dst) // the end, and no stop
		}
		return append(dst, ev.Raw...) // [DONE] from some servers, a plain-text error
	}
	js := jsonscan.View(data)
	e := responsesFields{eventFields: readEvent(js)}
	typ, ok := jsonscan.StringValue(e.typ)
	if !ok {
		typ = jsonscan.View(ev.Name)
	}
	e.event = typ
	e.seqNum, e.numbered = callfilter.ParseSeq(e.seq)
	f.seq.Read(e.seqNum, e.numbered)
	if len(f.RefusedCalls) == 0 && f.seq.Offset == 0 && !responsesCallEvent(typ) && e.response == "" &&
		(!h.On || h.Count == 0 && !f.pos.Moved() && typ != "error") {
		// Text, reasoning: passed without a check.
		if h.On {
			f.out(e.outputIndex)
			f.seq.Delivered(e.seqNum, e.numbered)
		}
		return append(dst, ev.Raw...)
	}
	if !openai.ValidData(ev, data) {
		if len(f.RefusedCalls) > 0 || h.Count > 0 || h.On && responsesCallEvent(typ) {
			f.seq.Skip(e.numbered)
			return dst // see chatEvent
		}
		return append(dst, ev.Raw...)
	}
	seq, numbered := e.seqNum, e.numbered
	itemFields := jsonscan.ReadObject(e.item, "type", "id", "call_id", "name")
	itemID, _ := jsonscan.StringValue(itemFields[1])
	eventItemID, _ := jsonscan.StringValue(e.itemID)
	if len(f.RefusedCalls) > 0 && f.withheld(e.outputIndex, eventItemID, itemID) {
		f.seq.Skip(numbered)
		return dst
	}
	if len(h.Calls) > 0 && !responsesCallEvent(typ) {
		if c := f.refers(f.held, e.outputIndex, eventItemID, itemID); c >= 0 {
			return f.keepHeld(dst, ev, f.calls[c].held, &e)
		}
	}
	switch typ {
	case "response.completed", "response.incomplete", "response.failed":
		if !f.stopped {
			f.stopped = true
			if h.Count > 0 {
				dst = f.releaseHeld(dst, ev, &e)
			}
		}
	case "error":
		dst = f.DropAll(dst) // the reply failed
	case "response.output_item.added", "response.output_item.done":
		itype, _ := jsonscan.StringValue(itemFields[0])
		ci, isCall := callitems.Lookup(itype, jsonscan.IsStringRaw(itemFields[2]))
		if !isCall {
			break
		}
		at := f.find(itemID, e.outputIndex)
		if typ == "response.output_item.added" && at >= 0 && f.itemID(f.calls[at]) != itemID {
			at = -1 // the decoder takes an added item with a new id for a new call
		}
		// The decoder passes over a done item cut short: it opens no call.
		status := jsonscan.MemberRaw(e.item, "status")
		opens := typ == "response.output_item.added" || status == "" || jsonscan.IsString(status, "completed")
		call := streaming.ToolCall{
			Index: jsonscan.Int(e.outputIndex), Type: ci.Typ, ID: jsonscan.Text(itemFields[2]),
			ItemID: itemID, Name: ci.CallName(itemFields[3]), Server: ci.Hosted,
		}
		if out, done := f.call(dst, ev, at, call, ci.Unknown, opens, &e); done {
			return out
		}
	default:
		if !responsesCallEvent(typ) {
			break
		}
		call := streaming.ToolCall{Index: jsonscan.Int(e.outputIndex), Type: "function_call", ItemID: eventItemID}
		switch {
		case strings.HasPrefix(typ, "response.custom_tool_call_input."):
			call.Type = "custom_tool_call"
		case strings.HasPrefix(typ, "response.mcp_call_arguments."):
			call.Type, call.Server = "mcp_call", true
		}
		if strings.HasSuffix(typ, ".done") {
			call.Name, _ = jsonscan.StringValue(e.name)
		}
		if out, done := f.call(dst, ev, f.find(eventItemID, e.outputIndex), call, false, true, &e); done {
			return out
		}
	}
	changed := false
	if jsonscan.IsObject(e.response) {
		final := typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed"
		f.plan = f.plan[:0]
		for m, next, ok := jsonscan.NextMember(js, jsonscan.ObjectStart(js)); ok; m, next, ok = jsonscan.NextMember(js, next) {
			if m.Name() == "response" && jsonscan.IsObject(m.Val) {
				changed = f.planOutput(m.Val, final) || changed
			}
		}
		// Items delivered in another order than they came are listed in
		// the order the client got them.
		changed = changed || final && h.On && f.pos.Moved()
	}
	oi, out := f.out(e.outputIndex)
	if !changed && (f.seq.Offset == 0 || !numbered) && oi == out {
		f.seq.Delivered(seq, numbered)
		return append(dst, ev.Raw...)
	}
	next := 0
	f.Scratch = jsonscan.FilterObject(f.Scratch[:0], js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		switch m.Name() {
		case "sequence_number":
			if n, ok := callfilter.ParseSeq(m.Val); ok && f.seq.Offset != 0 {
				return strconv.AppendInt(dst, n+f.seq.Offset, 10), jsonscan.Replace
			}
		case "output_index":
			if oi != out && jsonscan.IsNumber(m.Val) {
				return strconv.AppendInt(dst, int64(out), 10), jsonscan.Replace
			}
		case "response":
			if changed && jsonscan.IsObject(m.Val) {
				return f.editOutput(dst, m.Val, &next), jsonscan.Replace
			}
		}
		return dst, jsonscan.Keep
	}, nil)
	f.seq.Delivered(seq+f.seq.Offset, numbered)
	return sse.AppendFrame(sse.KeepBOM(dst, ev), jsonscan.View(ev.Name), f.Scratch)
}

// out reads the output index raw names (in) and gives the one the
// client sees for an event delivered now (out); both are -1 when raw is no
// index, and they are equal without Hold.
func (f *callFilter) out(raw string) (in, out int) {
	oi, ok := jsonscan.MemberIndex(jsonscan.Member{Val: raw})
	if !ok {
		return -1, -1
	}
	if !f.Held.On {
		return oi, oi
	}
	return oi, f.pos.Out(oi)
}

// responsesCallEvent reports whether events of type typ may tell of a call.
func responsesCallEvent(typ string) bool {
	switch typ {
	case "response.output_item.added", "response.output_item.done",
		"response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
		"response.mcp_call_arguments.delta", "response.mcp_call_arguments.done":
		return true
	}
	return false
}

// call handles an event of a call: at is the call the decoder
// would take it for (-1 for a new one), call what the event tells of it,
// unknown whether its item type is an unknown client call, opens whether
// the decoder would open a call for it if new. done says the event was
// handled, out being dst with what the client gets instead of it;
// otherwise it passes like any event.
func (f *callFilter) call(dst []byte, ev *sse.Event, at int, call streaming.ToolCall, unknown, opens bool, e *responsesFields) (out []byte, done bool) {
	if at >= 0 {
		c := f.calls[at]
		if c.server || c.refused < 0 && !f.Renames(call.Name) {
			if c.held >= 0 {
				// Once delivered whole (or dropped), what comes for the
				// call is withheld.
				read := call
				if e.item == "" {
					read.Type = "" // an arguments event: its type is implied, not read
				}
				if call.ItemID != "" && call.ItemID != f.itemID(c) || swaps(&f.Held.Calls[c.held].TC, read) {
					// Taken for the call by its place in the output, under
					// another item's id: once places change, the decoder
					// may take it for another call. Or the event names
					// another tool, call_id or item type than the call
					// was held as: the decoder keeps the first, an agent
					// that runs the items it is given done runs the last.
					f.Held.Calls[c.held].Doubt = true
				}
				return f.keepHeld(dst, ev, c.held, e), true
			}
			return dst, false
		}
		f.seq.Skip(e.numbered)
		return dst, true
	}
	if call.Server || f.PermitsItem(unknown, call.ID, call.Name) {
		if f.Held.On && !call.Server {
			return f.holdCall(dst, ev, call, opens, e), true
		}
		if opens {
			f.add(call.Index, call.ItemID, -1, call.Server)
		}
		return dst, false
	}
	call.ID, call.ItemID, call.Name = strings.Clone(call.ID), strings.Clone(call.ItemID), strings.Clone(call.Name)
	call.Type = strings.Clone(call.Type)
	f.Refuse(call)
	pos := len(f.RefusedCalls) - 1
	f.add(call.Index, call.ItemID, pos, false)
	return f.messageEvents(sse.KeepBOM(dst, ev), ev, pos, e.seqNum, e.numbered), true
}

// swaps reports whether an event's reading of a call names another tool,
// call_id or item type than the call was held as. A member the event does
// not carry swaps nothing (the arguments events carry no call_id, nor an
// item type).
func swaps(held *streaming.ToolCall, ev streaming.ToolCall) bool {
	differs := func(a, b string) bool { return a != "" && b != "" && a != b }
	return differs(held.Name, ev.Name) || differs(held.ID, ev.ID) || differs(held.Type, ev.Type)
}

// responsesMessageID is the id of the message item that replaces a call.
func responsesMessageID(tc streaming.ToolCall) string {
	switch {
	case tc.ID != "":
		return "msg_" + tc.ID
	case tc.ItemID != "":
		return "msg_" + tc.ItemID
	}
	return "msg_withheld_" + strconv.Itoa(tc.Index)
}

// appendMessageItem appends the message item that replaces the refused
// call at pos, completed or (with no content yet) in progress.
func (f *callFilter) appendMessageItem(dst []byte, pos int, completed bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendQuoted(dst, responsesMessageID(f.RefusedCalls[pos]))
	if !completed {
		return append(dst, `,"type":"message","status":"in_progress","content":[],"role":"assistant"}`...)
	}
	dst = append(dst, `,"type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":`...)
	dst = jsonscan.AppendQuoted(dst, f.Texts[pos])
	return append(dst, `}],"role":"assistant"}`...)
}

// messageEvents appends the six events of a message item carrying
// the refusal of the call at pos, at that call's output index.
func (f *callFilter) messageEvents(dst []byte, ev *sse.Event, pos int, seq int64, numbered bool) []byte {
	tc := f.RefusedCalls[pos]
	id := responsesMessageID(tc)
	text := f.Texts[pos]
	oi := tc.Index
	if f.Held.On {
		oi = f.pos.Out(oi)
	}
	steps := [...]string{
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
	}
	for i, typ := range steps {
		b := append(f.Scratch[:0], `{"type":"`...)
		b = append(b, typ...)
		b = append(b, '"')
		if numbered {
			b = append(b, `,"sequence_number":`...)
			b = strconv.AppendInt(b, seq+f.seq.Offset+int64(i), 10)
		}
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(oi), 10)
		if i > 0 && i < 5 {
			b = jsonscan.AppendQuoted(append(b, `,"item_id":`...), id)
			b = append(b, `,"content_index":0`...)
		}
		switch i {
		case 0:
			b = f.appendMessageItem(append(b, `,"item":`...), pos, false)
		case 1:
			b = append(b, `,"part":{"type":"output_text","annotations":[],"text":""}`...)
		case 2:
			b = jsonscan.AppendQuoted(append(b, `,"delta":`...), text)
			b = append(b, `,"logprobs":[]`...)
		case 3:
			b = jsonscan.AppendQuoted(append(b, `,"text":`...), text)
			b = append(b, `,"logprobs":[]`...)
		case 4:
			b = jsonscan.AppendQuoted(append(b, `,"part":{"type":"output_text","annotations":[],"text":`...), text)
			b = append(b, '}')
		case 5:
			b = f.appendMessageItem(append(b, `,"item":`...), pos, true)
		}
		f.Scratch = append(b, '}')
		dst = sse.AppendFrame(dst, sse.FrameName(ev, typ), f.Scratch)
	}
	if numbered {
		f.seq.Delivered(seq+f.seq.Offset+int64(len(steps))-1, true)
		f.seq.Offset += int64(len(steps)) - 1
	}
	return dst
}

// planOutput judges the calls in the output of a Response object
// (every output member, as a client may read any), appending to the plan
// one entry per item. It reports whether any item is to be replaced or
// left out.
//
// The decoder reads the output of a final Response only (a terminal event,
// a whole body), and takes the calls it finds there for calls of the reply:
// only then are the allowed ones kept track of, lest an earlier output
// (response.created's, normally empty) pair events with calls the decoder
// never saw.
func (f *callFilter) planOutput(resp string, final bool) bool {
	changed := false
	for m, next, ok := jsonscan.NextMember(resp, jsonscan.ObjectStart(resp)); ok; m, next, ok = jsonscan.NextMember(resp, next) {
		if m.Name() != "output" {
			continue
		}
		it := jsonscan.NewArrayIter(m.Val)
		for pos := 0; ; pos++ {
			item, ok := it.Next()
			if !ok {
				break
			}
			replace := f.planItem(item, pos, final)
			changed = changed || replace != keepItem
			f.plan = append(f.plan, replace)
		}
	}
	return changed
}

// planItem judges one item of a final output at position pos and
// returns the refused call that replaces it, keepItem or dropItem.
func (f *callFilter) planItem(item string, pos int, final bool) int {
	fields := jsonscan.ReadObject(item, "type", "id", "call_id", "name")
	itype, _ := jsonscan.StringValue(fields[0])
	ci, isCall := callitems.Lookup(itype, jsonscan.IsStringRaw(fields[2]))
	if !isCall {
		return keepItem
	}
	itemID, _ := jsonscan.StringValue(fields[1])
	name := ci.CallName(fields[3])
	status := jsonscan.MemberRaw(item, "status")
	opens := final && (status == "" || jsonscan.IsString(status, "completed"))
	// The decoder pairs an item with a call by its id, else by its place.
	// Once Hold moved places, the place no longer says which call the
	// decoder pairs it with: an item without its call's id is judged as
	// a call of its own.
	at := f.findAt(itemID, pos, !f.Held.On || !f.pos.Moved())
	if (at < 0 || f.itemID(f.calls[at]) != itemID) && f.droppedItem(itemID) {
		return dropItem
	}
	if at < 0 && itemID != "" {
		if by := f.findAt("", pos, true); by >= 0 && f.itemID(f.calls[by]) != itemID {
			// The decoder pairs the item with the call at its place, which
			// had another id: it read that call, the agent would take this
			// item. Neither reading can be trusted.
			return dropItem
		}
	}
	if at >= 0 && f.calls[at].held >= 0 {
		read := streaming.ToolCall{Type: ci.Typ, ID: jsonscan.Text(fields[2]), Name: name}
		if swaps(&f.Held.Calls[f.calls[at].held].TC, read) {
			return dropItem // another call than was held (see call)
		}
	}
	switch {
	case at >= 0:
		// The decoder completes the call it finds, whatever the item's type.
		c := f.calls[at]
		if c.held >= 0 && f.Held.Calls[c.held].State == callfilter.StateDropped && c.refused < 0 {
			return dropItem
		}
		if c.server || c.refused >= 0 || !f.Renames(name) {
			return c.refused
		}
	case ci.Hosted || f.PermitsItem(ci.Unknown, jsonscan.Text(fields[2]), name):
		if opens {
			f.add(pos, itemID, -1, ci.Hosted)
		}
		return keepItem
	}
	f.Refuse(streaming.ToolCall{
		Index: pos, Type: strings.Clone(ci.Typ), ID: strings.Clone(jsonscan.Text(fields[2])), ItemID: strings.Clone(itemID),
		Name: strings.Clone(name),
	})
	refused := len(f.RefusedCalls) - 1
	f.add(pos, itemID, refused, false)
	return refused
}

// editOutput writes a Response object with the items of its
// output replaced as planned; next is the plan entry its first item takes.
func (f *callFilter) editOutput(dst []byte, resp string, next *int) []byte {
	return jsonscan.FilterObject(dst, resp, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		if m.Name() != "output" || !jsonscan.IsArray(m.Val) {
			return dst, jsonscan.Keep
		}
		if f.Held.On && f.pos.Moved() {
			return f.reorderOutput(dst, m.Val, next), jsonscan.Replace
		}
		dst, _, _ = jsonscan.FilterArray(dst, m.Val, func(dst []byte, item string) ([]byte, jsonscan.Action) {
			replace := f.plan[*next]
			*next++
			switch replace {
			case keepItem:
				return dst, jsonscan.Keep
			case dropItem:
				return dst, jsonscan.Drop
			}
			return f.appendMessageItem(dst, replace, true), jsonscan.Replace
		})
		return dst, jsonscan.Replace
	}, nil)
}

// FilterBody rewrites a whole Response; nil when nothing changes.
func (f *callFilter) FilterBody(js string) []byte {
	fields := jsonscan.ReadObject(js, "error", "status")
	if jsonscan.IsObject(fields[0]) && fields[1] == "" {
		return nil // an error body
	}
	f.plan = f.plan[:0]
	if !f.planOutput(js, true) {
		return nil
	}
	next := 0
	return f.editOutput(nil, js, &next)
}

// cutNoticeItem appends, before the terminal event ev (read as e), the events of a
// message item holding the notice for held call c, dropped at the output
// limit, at the output index it would have had. The call is then listed
// as refused, with the notice as its text: the final output puts the
// message item in its place, and the terminal event's number follows.
func (f *callFilter) cutNoticeItem(dst []byte, ev *sse.Event, e *responsesFields, c int) []byte {
	h := &f.Held
	hc := &h.Calls[c]
	tc := hc.TC
	f.pos.Release(tc.Index)
	f.RefusedCalls = append(f.RefusedCalls, tc)
	f.Texts = append(f.Texts, f.CutNotice(tc))
	if i := slices.IndexFunc(h.Dropped, func(d streaming.ToolCall) bool { return d.ItemID == tc.ItemID && d.Index == tc.Index }); i >= 0 {
		h.Dropped = slices.Delete(h.Dropped, i, i+1) // Withheld lists it once, as refused
	}
	f.calls[hc.Key].refused = len(f.RefusedCalls) - 1
	dst = f.messageEvents(dst, ev, len(f.RefusedCalls)-1, e.seqNum, true)
	f.seq.Offset++ // six events where none was
	return dst
}

// MarkBodyCut finds the call a whole Response was still writing at its
// output limit: in a reply incomplete for max_output_tokens, a last item
// that is a call not completed, or whose arguments are not valid JSON.
func (f *callFilter) MarkBodyCut(js string) {
	if gjson.Get(js, "status").Str != "incomplete" || gjson.Get(js, "incomplete_details.reason").Str != "max_output_tokens" {
		return
	}
	last := gjson.Get(js, "output.@reverse.0")
	switch last.Get("type").Str {
	case "function_call":
		if unfinished(last) || !gjson.Valid(last.Get("arguments").Str) {
			f.CutIDs = append(f.CutIDs, last.Get("call_id").Str)
		}
	case "custom_tool_call":
		if unfinished(last) {
			f.CutIDs = append(f.CutIDs, last.Get("call_id").Str)
		}
	}
}

// AppendEnd appends event: error, {"type":"error","code","message",
// "param":null,"sequence_number"}, numbered after the last event delivered
// (omitted when the stream numbers none of its events).
func (f *callFilter) AppendEnd(dst []byte, typ, msg string) []byte {
	b := jsonscan.AppendQuoted(append(f.Scratch[:0], `{"type":"error","code":`...), typ)
	b = jsonscan.AppendQuoted(append(b, `,"message":`...), msg)
	b = append(b, `,"param":null`...)
	if n, ok := f.seq.End(!f.Seen); ok {
		b = strconv.AppendInt(append(b, `,"sequence_number":`...), n, 10)
	}
	f.Scratch = append(b, '}')
	return sse.AppendFrame(dst, "error", f.Scratch)
}
