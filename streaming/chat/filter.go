package chat

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/sse"
)

// OpenAI Chat Completions: refused tool_calls elements are removed, the
// allowed ones renumbered so that no gap shows, and the refusal delivered as
// content.

// callFilter is the call filter's Rules for Chat Completions, run by the
// engine it embeds.
type callFilter struct {
	*callfilter.Filter

	calls   []chatFilterCall
	choices []chatFilterChoice
	plan    chatPlan
	// finishing is set while the deltas of a choice that finishes in the
	// chunk being planned are: with Hold, their calls are not held.
	finishing bool
	held      []chatHeldElem // the elements of the chunk being edited that are held
	heldBytes []byte
	edited    []byte // the chunk less what it holds

	// Room for the calls and choices of a usual reply, so that following
	// one costs no allocation.
	callsBuf   [8]chatFilterCall
	choicesBuf [2]chatFilterChoice
	elemsBuf   [4]chatElemPlan
	deltasBuf  [2]chatDeltaPlan
	cplansBuf  [2]chatChoicePlan
	finishBuf  [2]chatFinish
}

var _ callfilter.Rules = (*callFilter)(nil)

// newRules returns the rules run by the engine e.
func newRules(e *callfilter.Filter) *callFilter {
	r := &callFilter{Filter: e}
	r.init()
	return r
}

// API is streaming.APIChat.
func (*callFilter) API() streaming.API { return streaming.APIChat }

func (c *callFilter) init() {
	c.calls = c.callsBuf[:0]
	c.choices = c.choicesBuf[:0]
	c.plan.elems = c.elemsBuf[:0]
	c.plan.deltas = c.deltasBuf[:0]
	c.plan.choices = c.cplansBuf[:0]
	c.plan.finishes = c.finishBuf[:0]
}

// chatFilterCall is one call of the reply, keyed as the decoder keys it.
type chatFilterCall struct {
	callKey
	out     int // the index the client sees
	allowed bool
	held    int // position in Filter.Held.Calls, -1 for a call not held
}

type chatFilterChoice struct {
	index     int
	refused   bool // a call of the choice was refused
	delivered bool // an allowed call of the choice was delivered
	// next is one past the highest index delivered. A choice keeps its
	// indices until a call is refused; calls after that are numbered from
	// next, which leaves no gap and never reuses an index.
	next    int
	stopped bool // its finish_reason came
}

// chatPlan is what the first walk over a chunk decided; the edit walk
// takes its entries in the same order.
type chatPlan struct {
	choices []chatChoicePlan // per choice object
	deltas  []chatDeltaPlan  // per delta (or message) object
	elems   []chatElemPlan   // per tool_calls element object and function_call object
	changed bool

	// With Hold: the choices that finish in the chunk, and what tells
	// whether the chunk can be held as it came.
	finishes []chatFinish
	edits    bool // a change other than holding an element
	extra    bool // the chunk carries more than call elements
	failed   bool // the chunk carries an error
	holds    int  // elements held
	holdCall int  // the held call they all belong to, -1 for several
}

// chatFinish is a choice that finishes in the chunk; cut when for length.
// As in the decoder, the finish ends the calls the choice has by then:
// those before upto in Filter.Held.Calls.
type chatFinish struct {
	choice int
	cut    bool
	upto   int
}

type chatChoicePlan struct {
	stop bool // finish_reason tool_calls (or function_call) becomes stop
}

type chatTextMode uint8

const (
	chatTextNone   chatTextMode = iota
	chatTextSet                 // the delta's content becomes the refusal
	chatTextExtra               // the refusal follows in a chunk of its own
	chatTextAppend              // (a whole message) the refusal follows the content after a blank line
)

type chatDeltaPlan struct {
	choice     int
	mode       chatTextMode
	text       string // the refusals of the calls refused in this delta
	hasContent bool   // the delta has a content member
}

type chatElemPlan struct {
	drop bool
	hold bool // with Hold: the element goes to its call's held chunk
	out  int  // the index to write, or -1 to keep the element's own
	call int  // the call in callFilter.calls, -1 for none
}

func (c *callFilter) choice(index int) *chatFilterChoice {
	for i := range c.choices {
		if c.choices[i].index == index {
			return &c.choices[i]
		}
	}
	c.choices = append(c.choices, chatFilterChoice{index: index})
	return &c.choices[len(c.choices)-1]
}

func (f *callFilter) FilterEvent(dst []byte, ev *sse.Event) []byte {
	h := &f.Held
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 || data[0] != '{' {
		if h.Count > 0 && (bytes.HasPrefix(data, []byte(streaming.DoneMarker)) || string(ev.Name) == "error") {
			// The end, or an error, and no finish for what is held.
			dst = f.DropAll(dst)
		}
		if h.Suffix() {
			h.KeepPassed(sse.TrimBOM(ev.Raw), -1, ev.Unterminated)
			return dst
		}
		return append(dst, ev.Raw...) // [DONE], an empty field, a plain-text error
	}
	if len(f.RefusedCalls) == 0 && h.Count == 0 && !mayStartCall(data) && (!h.On || !mayFinish(data)) {
		return append(dst, ev.Raw...) // text: the usual chunk, passed without a walk
	}
	if !openai.ValidData(ev, data) {
		// No client reads a call out of it, and the decoder skips it; once a
		// call was withheld (or while one is held) it may hold that call's
		// bytes.
		if len(f.RefusedCalls) > 0 || h.Count > 0 || h.On && mayStartCall(data) {
			return dst
		}
		return append(dst, ev.Raw...)
	}
	js := jsonscan.View(data)
	p := f.planChunk(js, false)
	if h.On {
		return f.holdEvent(dst, ev, js, p)
	}
	if !p.changed {
		return append(dst, ev.Raw...)
	}
	return f.write(dst, ev, js, p)
}

// write writes a chunk as its plan says, and the chunks carrying
// refusals that follow it.
func (f *callFilter) write(dst []byte, ev *sse.Event, js string, p *chatPlan) []byte {
	f.Scratch = f.edit(f.Scratch[:0], js, false)
	dst = sse.AppendFrame(sse.KeepBOM(dst, ev), jsonscan.View(ev.Name), f.Scratch)
	return f.extraChunks(dst, ev, js, p)
}

// extraChunks writes the chunks carrying the refusals of the chunk js
// that had content of its own.
func (f *callFilter) extraChunks(dst []byte, ev *sse.Event, js string, p *chatPlan) []byte {
	for _, dp := range p.deltas {
		if dp.mode == chatTextExtra {
			f.Scratch = contentChunk(f.Scratch[:0], js, dp.choice, dp.text)
			dst = sse.AppendFrame(dst, jsonscan.View(ev.Name), f.Scratch)
		}
	}
	return dst
}

// mayStartCall reports whether a chunk could hold a call: only a member
// named tool_calls or function_call does, and a key can spell those names
// otherwise only with a \u escape.
func mayStartCall(data []byte) bool {
	return bytes.Contains(data, []byte("tool_calls")) || bytes.Contains(data, []byte("function_call")) ||
		bytes.Contains(data, []byte(`\u`))
}

// mayFinish reports whether a chunk could end a choice: with Hold, a
// choice's first finish is what delivers its calls, and a later one is not
// (the decoder ends a choice once), so every finish must be seen. Most
// chunks carry "finish_reason":null only.
func mayFinish(data []byte) bool {
	return bytes.Count(data, []byte("finish_reason")) != bytes.Count(data, []byte(`"finish_reason":null`)) ||
		bytes.Contains(data, []byte(`\u`))
}

// planChunk walks a chunk (or a whole chat.completion when body is set),
// judging the calls it starts, and plans its edit.
func (f *callFilter) planChunk(js string, body bool) *chatPlan {
	p := &f.plan
	p.choices, p.deltas, p.elems, p.changed = p.choices[:0], p.deltas[:0], p.elems[:0], false
	p.finishes, p.edits, p.extra, p.failed, p.holds, p.holdCall = p.finishes[:0], false, false, false, 0, -1
	for m, next, ok := jsonscan.NextMember(js, jsonscan.ObjectStart(js)); ok; m, next, ok = jsonscan.NextMember(js, next) {
		switch m.Name() {
		case "usage":
			p.extra = p.extra || m.Val != "null"
			continue
		case "error":
			p.extra = true
			p.failed = jsonscan.IsObject(m.Val) || jsonscan.IsStringRaw(m.Val) // the decoder reads the last
			continue
		case "choices":
		default:
			continue
		}
		it := jsonscan.NewArrayIter(m.Val)
		for c, ok := it.Next(); ok; c, ok = it.Next() {
			if jsonscan.IsObject(c) {
				f.planChoice(c, body)
			}
		}
	}
	return p
}

func (f *callFilter) planChoice(c string, body bool) {
	p := &f.plan
	// The index may come after the delta (Azure) and the last one counts,
	// so the deltas are judged once the whole choice was read.
	var index, finish string
	var deltas [2]string
	nd, stop := 0, false
	for m, next, ok := jsonscan.NextMember(c, jsonscan.ObjectStart(c)); ok; m, next, ok = jsonscan.NextMember(c, next) {
		switch m.Name() {
		case "index":
			index = m.Val
		case "delta", "message":
			if jsonscan.IsObject(m.Val) {
				if nd < len(deltas) {
					deltas[nd] = m.Val
				}
				nd++
			}
		case "finish_reason":
			stop = stop || jsonscan.IsString(m.Val, "tool_calls") || jsonscan.IsString(m.Val, "function_call")
			finish = m.Val // the decoder reads the last
		}
	}
	choice := jsonscan.Int(index)
	at := len(p.choices)
	p.choices = append(p.choices, chatChoicePlan{})
	if finish != "" && finish != "null" {
		p.extra = true
	}
	finishing := false
	if st := f.choice(choice); !body && jsonscan.IsStringValue(finish) && !st.stopped {
		st.stopped = true
		finishing = f.Held.On
	}
	f.finishing = finishing
	if nd <= len(deltas) {
		for _, d := range deltas[:nd] {
			f.planDelta(choice, d, body)
		}
	} else {
		for m, next, ok := jsonscan.NextMember(c, jsonscan.ObjectStart(c)); ok; m, next, ok = jsonscan.NextMember(c, next) {
			if n := m.Name(); (n == "delta" || n == "message") && jsonscan.IsObject(m.Val) {
				f.planDelta(choice, m.Val, body)
			}
		}
	}
	if finishing {
		p.finishes = append(p.finishes, chatFinish{choice: choice, cut: jsonscan.IsString(finish, "length"), upto: len(f.Held.Calls)})
	}
	if st := f.choice(choice); stop && st.refused && !st.delivered {
		p.choices[at].stop, p.changed, p.edits = true, true, true
	}
}

func (f *callFilter) planDelta(choice int, d string, body bool) {
	p := &f.plan
	first := len(f.RefusedCalls)
	dp := chatDeltaPlan{choice: choice}
	filled, filledString := false, false
	for m, next, ok := jsonscan.NextMember(d, jsonscan.ObjectStart(d)); ok; m, next, ok = jsonscan.NextMember(d, next) {
		switch m.Name() {
		case "tool_calls":
			it := jsonscan.NewArrayIter(m.Val)
			for el, ok := it.Next(); ok; el, ok = it.Next() {
				if jsonscan.IsObject(el) {
					p.elems = append(p.elems, f.planElement(choice, el, false, body))
				}
			}
		case "function_call": // the legacy functions API
			if jsonscan.IsObject(m.Val) {
				p.elems = append(p.elems, f.planElement(choice, m.Val, true, body))
			}
		case "content":
			dp.hasContent = true
			if m.Val != "null" && m.Val != `""` {
				filled, filledString = true, filledString || jsonscan.IsStringRaw(m.Val)
				p.extra = true
			}
		case "role":
		default:
			p.extra = p.extra || m.Val != "null" && m.Val != `""`
		}
	}
	if len(f.RefusedCalls) > first {
		dp.text = strings.Join(f.Texts[first:], "\n\n")
		switch {
		case !filled:
			dp.mode = chatTextSet
		case !body:
			dp.mode = chatTextExtra
		case filledString:
			dp.mode = chatTextAppend
		}
		p.changed, p.edits = true, true
	}
	p.deltas = append(p.deltas, dp)
}

// planElement judges one tool_calls element (or a legacy function_call
// object), keyed by (choice, index) as the decoder keys it: the element that
// starts a call decides for all of its elements.
func (f *callFilter) planElement(choice int, el string, legacy, body bool) chatElemPlan {
	var index, id, typ, fname, cname, args string
	for m, next, ok := jsonscan.NextMember(el, jsonscan.ObjectStart(el)); ok; m, next, ok = jsonscan.NextMember(el, next) {
		switch m.Name() {
		case "index":
			index = m.Val
		case "id":
			id = m.Val
		case "type":
			typ = m.Val
		case "name":
			if legacy {
				fname = m.Val
			}
		case "arguments":
			if legacy {
				args = m.Val
			}
		case "function":
			if !legacy {
				fname = jsonscan.LastMemberRaw(m.Val, "name", fname)
				args = jsonscan.LastMemberRaw(m.Val, "arguments", args)
			}
		case "custom":
			if !legacy {
				cname = jsonscan.LastMemberRaw(m.Val, "name", cname)
			}
		}
	}
	name, custom := jsonscan.Text(fname), jsonscan.Text(cname)
	indexed := !legacy && jsonscan.IsNumber(index)
	at, key := locate(f.calls, choice, legacy, jsonscan.Int(index), indexed, jsonscan.Text(id) != "")
	if at >= 0 {
		call := f.calls[at]
		if !call.allowed || f.Renames(name, custom) {
			f.plan.changed, f.plan.edits = true, true
			return chatElemPlan{drop: true, call: -1}
		}
		ep := chatElemPlan{out: -1, call: at}
		if indexed && call.out != key {
			f.plan.changed, f.plan.edits = true, true
			ep.out = call.out
		}
		return f.holdElement(ep, args, cname != "" || jsonscan.IsString(typ, "custom"))
	}
	st := f.choice(choice)
	if f.PermitsCall(jsonscan.Text(id), name, custom) {
		out := key
		if st.refused {
			out = st.next
		}
		st.next = max(st.next, out+1)
		st.delivered = true
		held := -1
		if f.Held.On && !body {
			// Keyed by the position the call is about to take in f.calls.
			held = f.Held.AddCall(elementCall(choice, key, legacy, typ, id, name, custom), len(f.calls))
		}
		f.calls = append(f.calls, chatFilterCall{callKey: callKey{choice, key}, out: out, allowed: true, held: held})
		ep := chatElemPlan{out: -1, call: len(f.calls) - 1}
		if indexed && out != key {
			f.plan.changed, f.plan.edits = true, true
			ep.out = out
		}
		return f.holdElement(ep, args, cname != "" || jsonscan.IsString(typ, "custom"))
	}
	f.Refuse(elementCall(choice, key, legacy, typ, id, name, custom))
	st.refused = true
	f.calls = append(f.calls, chatFilterCall{callKey: callKey{choice, key}, held: -1})
	f.plan.changed, f.plan.edits = true, true
	return chatElemPlan{drop: true, call: -1}
}

// elementCall is the call a tool_calls element (or a legacy function_call
// object) starts, with its choice and key, its type, id and name (a custom
// tool's when it has no function name) as raw JSON values.
func elementCall(choice, key int, legacy bool, typ, id, name, custom string) streaming.ToolCall {
	tc := streaming.ToolCall{Choice: choice, Index: key, Type: "function", ID: strings.Clone(jsonscan.Text(id)), Name: strings.Clone(name)}
	switch t := jsonscan.Text(typ); {
	case legacy:
		tc.Type = "function_call"
	case t != "":
		tc.Type = strings.Clone(t)
	}
	if tc.Name == "" {
		tc.Name = strings.Clone(custom)
	}
	return tc
}

// edit writes the chunk (or body) js as its plan says.
func (f *callFilter) edit(dst []byte, js string, body bool) []byte {
	p := &f.plan
	var ci, di, ei int
	editElem := func(dst []byte, el string) ([]byte, jsonscan.Action) {
		if !jsonscan.IsObject(el) {
			return dst, jsonscan.Keep
		}
		ep := p.elems[ei]
		ei++
		switch {
		case ep.drop:
			return dst, jsonscan.Drop
		case ep.hold:
			f.keepElement(ep, el, false)
			return dst, jsonscan.Drop
		case ep.out >= 0:
			return chatRenumber(dst, el, ep.out), jsonscan.Replace
		}
		return dst, jsonscan.Keep
	}
	editDelta := func(dst []byte, d string) []byte {
		dp := p.deltas[di]
		di++
		return jsonscan.FilterObject(dst, d, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
			switch m.Name() {
			case "tool_calls":
				if !jsonscan.IsArray(m.Val) {
					return dst, jsonscan.Keep
				}
				out, total, kept := jsonscan.FilterArray(dst, m.Val, editElem)
				if total > 0 && kept == 0 {
					return out, jsonscan.Drop
				}
				return out, jsonscan.Replace
			case "function_call":
				if jsonscan.IsObject(m.Val) {
					ep := p.elems[ei]
					ei++
					if ep.hold {
						f.keepElement(ep, m.Val, true)
					}
					if ep.drop || ep.hold {
						return dst, jsonscan.Drop
					}
				}
			case "content":
				return chatContent(dst, m.Val, dp)
			}
			if (dp.mode == chatTextSet || dp.mode == chatTextAppend) && strings.EqualFold(m.Name(), "content") {
				// A case variant of the content the filter writes: kept,
				// the agent would read two contents.
				return dst, jsonscan.Drop
			}
			return dst, jsonscan.Keep
		}, func(dst []byte, sep bool) []byte {
			if dp.hasContent || (dp.mode != chatTextSet && dp.mode != chatTextAppend) {
				return dst
			}
			if sep {
				dst = append(dst, ',')
			}
			return jsonscan.AppendQuoted(append(dst, `"content":`...), dp.text)
		})
	}
	editChoice := func(dst []byte, c string) ([]byte, jsonscan.Action) {
		if !jsonscan.IsObject(c) {
			return dst, jsonscan.Keep
		}
		cp := p.choices[ci]
		ci++
		return jsonscan.FilterObject(dst, c, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
			switch m.Name() {
			case "delta", "message":
				if jsonscan.IsObject(m.Val) {
					return editDelta(dst, m.Val), jsonscan.Replace
				}
			case "finish_reason":
				if cp.stop && (jsonscan.IsString(m.Val, "tool_calls") || jsonscan.IsString(m.Val, "function_call")) {
					return append(dst, `"stop"`...), jsonscan.Replace
				}
			}
			return dst, jsonscan.Keep
		}, nil), jsonscan.Replace
	}
	return jsonscan.FilterObject(dst, js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		if m.Name() != "choices" || !jsonscan.IsArray(m.Val) {
			return dst, jsonscan.Keep
		}
		dst, _, _ = jsonscan.FilterArray(dst, m.Val, editChoice)
		return dst, jsonscan.Replace
	}, nil)
}

// chatContent writes a delta's content member as the plan says.
func chatContent(dst []byte, raw string, dp chatDeltaPlan) ([]byte, jsonscan.Action) {
	empty := raw == "null" || raw == `""`
	switch {
	case dp.mode == chatTextSet, dp.mode == chatTextAppend && empty:
		return jsonscan.AppendQuoted(dst, dp.text), jsonscan.Replace
	case dp.mode == chatTextAppend && jsonscan.IsStringRaw(raw):
		s, _ := jsonscan.StringValue(raw)
		return jsonscan.AppendQuoted(dst, s+"\n\n"+dp.text), jsonscan.Replace
	}
	return dst, jsonscan.Keep
}

// contentChunk is a chunk of the filter's own carrying text as content of
// choice: same id, object, created and model as the chunk js.
func contentChunk(dst []byte, js string, choice int, text string) []byte {
	dst = jsonscan.AppendQuoted(append(appendDeltaHead(dst, js, choice), `"content":`...), text)
	return append(dst, `},"logprobs":null,"finish_reason":null}]}`...)
}

// appendDeltaHead opens a chunk of the filter's own with the id, object,
// created and model of the chunk js, up to the opening of choice's delta.
func appendDeltaHead(dst []byte, js string, choice int) []byte {
	dst = append(dst, '{')
	object := false
	for _, key := range [...]string{"id", "object", "created", "model"} {
		raw := jsonscan.LastMemberRaw(js, key, "")
		if raw == "" {
			continue
		}
		object = object || key == "object"
		dst = append(dst, '"')
		dst = append(dst, key...)
		dst = append(dst, '"', ':')
		dst = append(dst, raw...)
		dst = append(dst, ',')
	}
	if !object {
		dst = append(dst, `"object":"chat.completion.chunk",`...)
	}
	dst = strconv.AppendInt(append(dst, `"choices":[{"index":`...), int64(choice), 10)
	return append(dst, `,"delta":{`...)
}

// cutNoticeChunk appends a chunk carrying the notice for call, dropped at
// the output limit, as content of its choice, with the id, object,
// created and model of the chunk js that finishes the choice. A blank
// line sets it apart from any text the choice had.
func (f *callFilter) cutNoticeChunk(dst []byte, ev *sse.Event, js string, call streaming.ToolCall) []byte {
	f.Scratch = contentChunk(f.Scratch[:0], js, call.Choice, "\n\n"+f.CutNotice(call))
	return sse.AppendFrame(dst, jsonscan.View(ev.Name), f.Scratch)
}

// FilterBody rewrites a ChatCompletion: refused tool_calls elements are
// removed and their refusals given as content. It returns nil when
// nothing changes.
func (f *callFilter) FilterBody(js string) []byte {
	if !f.planChunk(js, true).changed {
		return nil
	}
	return f.edit(nil, js, true)
}

// MarkBodyCut finds the calls a whole ChatCompletion was still writing at
// its output limit: the last call of a choice finished by length, when
// its arguments are not valid JSON.
func (f *callFilter) MarkBodyCut(js string) {
	for _, c := range gjson.Get(js, "choices").Array() {
		if c.Get("finish_reason").Str != "length" {
			continue
		}
		last := c.Get("message.tool_calls.@reverse.0")
		if last.Get("type").Str != "custom" && !gjson.Valid(last.Get("function.arguments").Str) {
			f.CutIDs = append(f.CutIDs, last.Get("id").Str)
		}
	}
}

// AppendEnd appends a data-only {"error":{"message","type","code","param"}}
// chunk, with code set to typ.
func (f *callFilter) AppendEnd(dst []byte, typ, msg string) []byte {
	b := jsonscan.AppendQuoted(append(f.Scratch[:0], `{"error":{"message":`...), msg)
	b = jsonscan.AppendQuoted(append(b, `,"type":`...), typ)
	b = jsonscan.AppendQuoted(append(b, `,"code":`...), typ)
	f.Scratch = append(b, `,"param":null}}`...)
	return sse.AppendFrame(dst, "", f.Scratch)
}
