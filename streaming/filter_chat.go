package streaming

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// OpenAI Chat Completions: refused tool_calls elements are removed, the
// allowed ones renumbered so that no gap shows, and the refusal delivered as
// content.

type chatCallFilter struct {
	calls   []chatFilterCall
	choices []chatFilterChoice
	plan    chatPlan

	// Room for the calls and choices of a usual reply, so that following
	// one costs no allocation.
	callsBuf   [8]chatFilterCall
	choicesBuf [2]chatFilterChoice
	elemsBuf   [4]chatElemPlan
	deltasBuf  [2]chatDeltaPlan
	cplansBuf  [2]chatChoicePlan
}

func (c *chatCallFilter) init() {
	c.calls = c.callsBuf[:0]
	c.choices = c.choicesBuf[:0]
	c.plan.elems = c.elemsBuf[:0]
	c.plan.deltas = c.deltasBuf[:0]
	c.plan.choices = c.cplansBuf[:0]
}

// chatFilterCall is one call of the reply, keyed as the decoder keys it.
type chatFilterCall struct {
	choice, index int
	out           int // the index the client sees
	allowed       bool
}

type chatFilterChoice struct {
	index     int
	refused   bool // a call of the choice was refused
	delivered bool // an allowed call of the choice was delivered
	// next is one past the highest index delivered. A choice keeps its
	// indices until a call is refused; calls after that are numbered from
	// next, which leaves no gap and never reuses an index.
	next int
}

// chatPlan is what the first walk over a chunk decided; the edit walk
// takes its entries in the same order.
type chatPlan struct {
	choices []chatChoicePlan // per choice object
	deltas  []chatDeltaPlan  // per delta (or message) object
	elems   []chatElemPlan   // per tool_calls element object and function_call object
	changed bool
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
	out  int // the index to write, or -1 to keep the element's own
}

func (c *chatCallFilter) choice(index int) *chatFilterChoice {
	for i := range c.choices {
		if c.choices[i].index == index {
			return &c.choices[i]
		}
	}
	c.choices = append(c.choices, chatFilterChoice{index: index})
	return &c.choices[len(c.choices)-1]
}

func (c *chatCallFilter) find(choice, index int) int {
	for i := len(c.calls) - 1; i >= 0; i-- {
		if c.calls[i].choice == choice && c.calls[i].index == index {
			return i
		}
	}
	return -1
}

func (c *chatCallFilter) last(choice int) int {
	for i := len(c.calls) - 1; i >= 0; i-- {
		if c.calls[i].choice == choice {
			return i
		}
	}
	return -1
}

func (c *chatCallFilter) nextIndex(choice int) int {
	next := 0
	for _, call := range c.calls {
		if call.choice == choice && call.index >= next {
			next = call.index + 1
		}
	}
	return next
}

func (f *CallFilter) chatEvent(dst []byte, ev *Event) []byte {
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 || data[0] != '{' {
		return append(dst, ev.Raw...) // [DONE], an empty field, a plain-text error
	}
	if len(f.refused) == 0 && !mayStartCall(data) {
		return append(dst, ev.Raw...) // text: the usual chunk, passed without a walk
	}
	if !gjson.ValidBytes(data) {
		// No client reads a call out of it, and the decoder skips it; once a
		// call was withheld it may hold that call's bytes.
		if len(f.refused) > 0 {
			return dst
		}
		return append(dst, ev.Raw...)
	}
	js := jsonView(data)
	p := f.chatPlan(js, false)
	if !p.changed {
		return append(dst, ev.Raw...)
	}
	f.scratch = f.chatEdit(f.scratch[:0], js, false)
	dst = appendEventFrame(keepBOM(dst, ev), jsonView(ev.Name), f.scratch)
	for _, dp := range p.deltas {
		if dp.mode == chatTextExtra {
			f.scratch = chatExtraChunk(f.scratch[:0], js, dp)
			dst = appendEventFrame(dst, jsonView(ev.Name), f.scratch)
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

// chatPlan walks a chunk (or a whole chat.completion when body is set),
// judging the calls it starts, and plans its edit.
func (f *CallFilter) chatPlan(js string, body bool) *chatPlan {
	p := &f.chat.plan
	p.choices, p.deltas, p.elems, p.changed = p.choices[:0], p.deltas[:0], p.elems[:0], false
	for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
		if m.name() != "choices" {
			continue
		}
		it := newArrayIter(m.val)
		for c, ok := it.next(); ok; c, ok = it.next() {
			if isObject(c) {
				f.chatPlanChoice(c, body)
			}
		}
	}
	return p
}

func (f *CallFilter) chatPlanChoice(c string, body bool) {
	p := &f.chat.plan
	// The index may come after the delta (Azure) and the last one counts,
	// so the deltas are judged once the whole choice was read.
	var index string
	var deltas [2]string
	nd, stop := 0, false
	for m, next, ok := nextMember(c, objectStart(c)); ok; m, next, ok = nextMember(c, next) {
		switch m.name() {
		case "index":
			index = m.val
		case "delta", "message":
			if isObject(m.val) {
				if nd < len(deltas) {
					deltas[nd] = m.val
				}
				nd++
			}
		case "finish_reason":
			stop = stop || isString(m.val, "tool_calls") || isString(m.val, "function_call")
		}
	}
	choice := gjsonInt(index)
	at := len(p.choices)
	p.choices = append(p.choices, chatChoicePlan{})
	if nd <= len(deltas) {
		for _, d := range deltas[:nd] {
			f.chatPlanDelta(choice, d, body)
		}
	} else {
		for m, next, ok := nextMember(c, objectStart(c)); ok; m, next, ok = nextMember(c, next) {
			if n := m.name(); (n == "delta" || n == "message") && isObject(m.val) {
				f.chatPlanDelta(choice, m.val, body)
			}
		}
	}
	if st := f.chat.choice(choice); stop && st.refused && !st.delivered {
		p.choices[at].stop, p.changed = true, true
	}
}

func (f *CallFilter) chatPlanDelta(choice int, d string, body bool) {
	p := &f.chat.plan
	first := len(f.refused)
	dp := chatDeltaPlan{choice: choice}
	filled, filledString := false, false
	for m, next, ok := nextMember(d, objectStart(d)); ok; m, next, ok = nextMember(d, next) {
		switch m.name() {
		case "tool_calls":
			it := newArrayIter(m.val)
			for el, ok := it.next(); ok; el, ok = it.next() {
				if isObject(el) {
					p.elems = append(p.elems, f.chatPlanElement(choice, el, false))
				}
			}
		case "function_call": // the legacy functions API
			if isObject(m.val) {
				p.elems = append(p.elems, f.chatPlanElement(choice, m.val, true))
			}
		case "content":
			dp.hasContent = true
			if m.val != "null" && m.val != `""` {
				filled, filledString = true, filledString || isStringRaw(m.val)
			}
		}
	}
	if len(f.refused) > first {
		dp.text = strings.Join(f.texts[first:], "\n\n")
		switch {
		case !filled:
			dp.mode = chatTextSet
		case !body:
			dp.mode = chatTextExtra
		case filledString:
			dp.mode = chatTextAppend
		}
		p.changed = true
	}
	p.deltas = append(p.deltas, dp)
}

// chatPlanElement judges one tool_calls element (or a legacy function_call
// object), keyed by (choice, index) as the decoder keys it: the element that
// starts a call decides for all of its elements.
func (f *CallFilter) chatPlanElement(choice int, el string, legacy bool) chatElemPlan {
	c := &f.chat
	var index, id, typ, fname, cname string
	for m, next, ok := nextMember(el, objectStart(el)); ok; m, next, ok = nextMember(el, next) {
		switch m.name() {
		case "index":
			index = m.val
		case "id":
			id = m.val
		case "type":
			typ = m.val
		case "name":
			if legacy {
				fname = m.val
			}
		case "function":
			if !legacy {
				fname = lastMemberRaw(m.val, "name", fname)
			}
		case "custom":
			if !legacy {
				cname = lastMemberRaw(m.val, "name", cname)
			}
		}
	}
	name, custom := gjsonText(fname), gjsonText(cname)
	indexed := !legacy && isNumber(index)
	at, key := -1, 0
	switch {
	case legacy:
		at = c.find(choice, 0)
	case indexed:
		key = gjsonInt(index)
		at = c.find(choice, key)
	case gjsonText(id) != "":
		key = c.nextIndex(choice) // no index: each id starts the choice's next call
	default:
		at = c.last(choice) // neither: a continuation of the choice's latest call
	}
	if at >= 0 {
		call := c.calls[at]
		if !call.allowed || f.renames(name, custom) {
			c.plan.changed = true
			return chatElemPlan{drop: true}
		}
		if indexed && call.out != key {
			c.plan.changed = true
			return chatElemPlan{out: call.out}
		}
		return chatElemPlan{out: -1}
	}
	st := c.choice(choice)
	if f.permits(name, custom) {
		out := key
		if st.refused {
			out = st.next
		}
		st.next = max(st.next, out+1)
		st.delivered = true
		c.calls = append(c.calls, chatFilterCall{choice: choice, index: key, out: out, allowed: true})
		if indexed && out != key {
			c.plan.changed = true
			return chatElemPlan{out: out}
		}
		return chatElemPlan{out: -1}
	}
	tc := ToolCall{Choice: choice, Index: key, Type: "function", ID: strings.Clone(gjsonText(id)), Name: strings.Clone(name)}
	switch t := gjsonText(typ); {
	case legacy:
		tc.Type = "function_call"
	case t != "":
		tc.Type = strings.Clone(t)
	}
	if tc.Name == "" {
		tc.Name = strings.Clone(custom)
	}
	f.refuse(tc)
	st.refused = true
	c.calls = append(c.calls, chatFilterCall{choice: choice, index: key})
	c.plan.changed = true
	return chatElemPlan{drop: true}
}

// chatEdit writes the chunk (or body) js as its plan says.
func (f *CallFilter) chatEdit(dst []byte, js string, body bool) []byte {
	p := &f.chat.plan
	var ci, di, ei int
	editElem := func(dst []byte, el string) ([]byte, filterAction) {
		if !isObject(el) {
			return dst, filterKeep
		}
		ep := p.elems[ei]
		ei++
		switch {
		case ep.drop:
			return dst, filterDrop
		case ep.out >= 0:
			return filterObject(dst, el, func(dst []byte, m jsonMember) ([]byte, filterAction) {
				if m.name() == "index" && isNumber(m.val) {
					return strconv.AppendInt(dst, int64(ep.out), 10), filterReplace
				}
				return dst, filterKeep
			}, nil), filterReplace
		}
		return dst, filterKeep
	}
	editDelta := func(dst []byte, d string) []byte {
		dp := p.deltas[di]
		di++
		return filterObject(dst, d, func(dst []byte, m jsonMember) ([]byte, filterAction) {
			switch m.name() {
			case "tool_calls":
				if !isJSONArray(m.val) {
					return dst, filterKeep
				}
				out, total, kept := filterArray(dst, m.val, editElem)
				if total > 0 && kept == 0 {
					return out, filterDrop
				}
				return out, filterReplace
			case "function_call":
				if isObject(m.val) {
					ep := p.elems[ei]
					ei++
					if ep.drop {
						return dst, filterDrop
					}
				}
			case "content":
				return chatContent(dst, m.val, dp)
			}
			return dst, filterKeep
		}, func(dst []byte, sep bool) []byte {
			if dp.hasContent || (dp.mode != chatTextSet && dp.mode != chatTextAppend) {
				return dst
			}
			if sep {
				dst = append(dst, ',')
			}
			return appendJSONLiteral(append(dst, `"content":`...), dp.text)
		})
	}
	editChoice := func(dst []byte, c string) ([]byte, filterAction) {
		if !isObject(c) {
			return dst, filterKeep
		}
		cp := p.choices[ci]
		ci++
		return filterObject(dst, c, func(dst []byte, m jsonMember) ([]byte, filterAction) {
			switch m.name() {
			case "delta", "message":
				if isObject(m.val) {
					return editDelta(dst, m.val), filterReplace
				}
			case "finish_reason":
				if cp.stop && (isString(m.val, "tool_calls") || isString(m.val, "function_call")) {
					return append(dst, `"stop"`...), filterReplace
				}
			}
			return dst, filterKeep
		}, nil), filterReplace
	}
	return filterObject(dst, js, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		if m.name() != "choices" || !isJSONArray(m.val) {
			return dst, filterKeep
		}
		dst, _, _ = filterArray(dst, m.val, editChoice)
		return dst, filterReplace
	}, nil)
}

// chatContent writes a delta's content member as the plan says.
func chatContent(dst []byte, raw string, dp chatDeltaPlan) ([]byte, filterAction) {
	empty := raw == "null" || raw == `""`
	switch {
	case dp.mode == chatTextSet, dp.mode == chatTextAppend && empty:
		return appendJSONLiteral(dst, dp.text), filterReplace
	case dp.mode == chatTextAppend && isStringRaw(raw):
		s, _ := stringValue(raw)
		return appendJSONLiteral(dst, s+"\n\n"+dp.text), filterReplace
	}
	return dst, filterKeep
}

// chatExtraChunk is a chunk of its own carrying a refusal, for a delta that
// already had content: same id, object, created and model as its chunk.
func chatExtraChunk(dst []byte, js string, dp chatDeltaPlan) []byte {
	dst = append(dst, '{')
	object := false
	for _, key := range [...]string{"id", "object", "created", "model"} {
		raw := lastMemberRaw(js, key, "")
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
	dst = append(dst, `"choices":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(dp.choice), 10)
	dst = append(dst, `,"delta":{"content":`...)
	dst = appendJSONLiteral(dst, dp.text)
	return append(dst, `},"logprobs":null,"finish_reason":null}]}`...)
}
