package streaming

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Withholding refused tool calls from a reply.
//
// When a grant narrows (a budget's restrict stage, an approval gate), a call
// to a tool outside it must never reach the agent, and the agent must still
// get a reply it can continue from. CallFilter stands between the Reader and
// the client: an event it has no reason to touch goes out as the same bytes;
// a refused call is replaced, where it stood, by a text saying why, and what
// refers to it (indices, stop reasons, sequence numbers, the final output)
// is fixed up so that the reply stays coherent.
//
// Its reading of each event follows the decoders' (which duplicate member
// wins, how calls are keyed), so that the package decodes no refused call
// from what it lets through. Where a malformed event leaves room for doubt it
// withholds rather than passes.

// ErrNoCallPolicy is returned by NewCallFilter when allow or refusal is nil.
var ErrNoCallPolicy = errors.New("streaming: a call filter needs an allow and a refusal function")

// CallFilter withholds the client tool calls of one reply that allow
// refuses. It is not safe for concurrent use.
type CallFilter struct {
	api     API
	allow   func(name string) bool
	refusal func(call ToolCall) string

	refused []ToolCall
	texts   []string // the text that replaced each refused call

	anthropic anthropicCallFilter
	chat      chatCallFilter
	responses responsesCallFilter

	scratch []byte // one rewritten payload before it is framed
}

// NewCallFilter returns a filter for one reply. allow reports whether a call
// to the named tool may be delivered; refusal gives the text that replaces a
// refused call (e.g. "gatekeeper withheld a call to Bash: ...").
//
// allow is called with a view of the event being filtered, so that letting a
// call through costs no copy: it must not keep name past its return.
func NewCallFilter(api API, allow func(name string) bool, refusal func(call ToolCall) string) (*CallFilter, error) {
	switch api {
	case APIAnthropic, APIChat, APIResponses:
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
	}
	if allow == nil || refusal == nil {
		return nil, ErrNoCallPolicy
	}
	f := &CallFilter{api: api, allow: allow, refusal: refusal}
	f.chat.init()
	f.responses.init()
	return f, nil
}

// Refused lists the calls withheld so far (ID, Name, Index/Choice as the
// decoders fill them).
func (f *CallFilter) Refused() []ToolCall { return slices.Clone(f.refused) }

// AppendEvent appends to dst what the client receives for ev, one whole SSE
// event as Reader hands it: usually ev.Raw unchanged, nothing while a refused
// call streams, or rewritten and inserted events. Events it writes itself
// are framed "event: x\n" (when ev had an event line) and "data: ...\n\n".
func (f *CallFilter) AppendEvent(dst []byte, ev Event) []byte {
	if !ev.HasData {
		return append(dst, ev.Raw...)
	}
	switch f.api {
	case APIAnthropic:
		return f.anthropicEvent(dst, &ev)
	case APIChat:
		return f.chatEvent(dst, &ev)
	}
	return f.responsesEvent(dst, &ev)
}

// Body rewrites a whole non-streamed reply the same way. A body with nothing
// to withhold is returned as it came; one that is not a JSON object fails
// with an error wrapping ErrInvalidJSON.
func (f *CallFilter) Body(body []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !gjson.ValidBytes(trimmed) {
		return nil, fmt.Errorf("%w: %s reply body", ErrInvalidJSON, f.api)
	}
	js := jsonView(trimmed)
	var out []byte
	switch f.api {
	case APIAnthropic:
		out = f.anthropicBody(js)
	case APIChat:
		if f.chatPlan(js, true).changed {
			out = f.chatEdit(nil, js, true)
		}
	case APIResponses:
		out = f.responsesBody(js)
	}
	if out == nil {
		return body, nil
	}
	return out, nil
}

// refuse records a withheld call and returns the text that replaces it.
func (f *CallFilter) refuse(tc ToolCall) string {
	text := f.refusal(tc)
	f.refused = append(f.refused, tc)
	f.texts = append(f.texts, text)
	return text
}

// permits judges the names a call carries: every one must be allowed, and a
// call that names no tool is judged as the empty name.
func (f *CallFilter) permits(names ...string) bool {
	named := false
	for _, n := range names {
		if n != "" {
			named = true
			if !f.allow(n) {
				return false
			}
		}
	}
	return named || f.allow("")
}

// renames reports whether a later fragment of an allowed call names a tool
// that is not allowed: the decoders take a name from any fragment until the
// call has one.
func (f *CallFilter) renames(names ...string) bool {
	for _, n := range names {
		if n != "" && !f.allow(n) {
			return true
		}
	}
	return false
}

// Framing.

// keepBOM keeps the byte order mark of the stream's first event on the events
// that replace it.
func keepBOM(dst []byte, ev *Event) []byte {
	if bytes.HasPrefix(ev.Raw, bom) {
		dst = append(dst, bom...)
	}
	return dst
}

// appendEventFrame appends one event: its event line when name is not
// empty, a data line per line of data, and the blank line ending it.
func appendEventFrame(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		i := bytes.IndexByte(data, '\n')
		line := data
		if i >= 0 {
			line = data[:i]
		}
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if i < 0 {
			break
		}
		data = data[i+1:]
	}
	return append(dst, '\n')
}

// frameName is the event line of an event of type typ that replaces ev:
// none when ev had none.
func frameName(ev *Event, typ string) string {
	if len(ev.Name) == 0 {
		return ""
	}
	return typ
}

// Writing JSON.

// appendJSONLiteral appends s as a JSON string literal, escaped the way
// encoding/json escapes it (invalid UTF-8 becomes U+FFFD).
func appendJSONLiteral(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript: escaped as encoding/json does.
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}

// filterAction says what an edit callback did with a member or element.
type filterAction uint8

const (
	filterKeep    filterAction = iota // copy it as it came
	filterReplace                     // the callback appended the new value
	filterDrop                        // leave it out
)

// filterObject appends the JSON object obj to dst member by member. edit,
// called with the member's key already written, may append a new value or
// drop the member; add, when not nil, appends members after the last one
// (sep says whether a comma must come first). Whitespace between members is
// not kept. obj must be valid JSON.
func filterObject(dst []byte, obj string, edit func(dst []byte, m jsonMember) ([]byte, filterAction), add func(dst []byte, sep bool) []byte) []byte {
	dst = append(dst, '{')
	n := 0
	for m, next, ok := nextMember(obj, objectStart(obj)); ok; m, next, ok = nextMember(obj, next) {
		mark := len(dst)
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, m.key...)
		dst = append(dst, '"', ':')
		var act filterAction
		dst, act = edit(dst, m)
		switch act {
		case filterKeep:
			dst = append(dst, m.val...)
		case filterDrop:
			dst = dst[:mark]
			continue
		}
		n++
	}
	if add != nil {
		dst = add(dst, n > 0)
	}
	return append(dst, '}')
}

// filterArray appends the JSON array arr to dst element by element, as
// filterObject does members, and returns how many elements it had and how
// many it kept.
func filterArray(dst []byte, arr string, edit func(dst []byte, elem string) ([]byte, filterAction)) (out []byte, total, kept int) {
	dst = append(dst, '[')
	it := newArrayIter(arr)
	for el, ok := it.next(); ok; el, ok = it.next() {
		total++
		mark := len(dst)
		if kept > 0 {
			dst = append(dst, ',')
		}
		var act filterAction
		dst, act = edit(dst, el)
		switch act {
		case filterKeep:
			dst = append(dst, el...)
		case filterDrop:
			dst = dst[:mark]
			continue
		}
		kept++
	}
	return append(dst, ']'), total, kept
}

// Reading JSON as the OpenAI decoders do.

// gjsonText is what gjson's String gives for the raw value: the decoded
// text of a string, the raw text of a number or an object, "" for null.
func gjsonText(raw string) string {
	if raw == "" {
		return ""
	}
	if s, ok := stringValue(raw); ok {
		return s
	}
	return gjson.Parse(raw).String()
}

// gjsonInt is what gjson's Int gives for the raw value, 0 when absent.
func gjsonInt(raw string) int {
	if raw == "" {
		return 0
	}
	return int(gjson.Parse(raw).Int())
}

// lastMemberRaw returns the raw value of the last member named key of the
// object obj, or cur when it has none.
func lastMemberRaw(obj, key, cur string) string {
	for m, next, ok := nextMember(obj, objectStart(obj)); ok; m, next, ok = nextMember(obj, next) {
		if keyEqual(m.key, key) {
			cur = m.val
		}
	}
	return cur
}

// isJSONArray reports whether raw, a value as the walkers return it, is an
// array.
func isJSONArray(raw string) bool { return len(raw) > 0 && raw[0] == '[' }

// Anthropic Messages: a refused tool_use block becomes a text block at the
// same index.

type anthropicCallFilter struct {
	withheld  []int // indices of refused blocks whose stop has not come
	refused   bool  // a call of the message was refused
	delivered bool  // an allowed client tool_use was delivered
}

func (f *CallFilter) anthropicEvent(dst []byte, ev *Event) []byte {
	a := &f.anthropic
	js := jsonView(ev.Data)
	if a.refused && !gjson.Valid(js) {
		return dst // see chatEvent
	}
	var typ, index, block jsonMember
	for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
		switch m.name() {
		case "type":
			typ = firstMember(typ, m)
		case "index":
			index = firstMember(index, m)
		case "content_block":
			block = firstMember(block, m)
		}
	}
	name, _ := stringValue(typ.val)
	if name == "" || string(ev.Name) == "error" {
		name = jsonView(ev.Name)
	}
	switch name {
	case "content_block_start":
		return f.anthropicStart(dst, ev, index, block)
	case "content_block_delta":
		if a.withheldAt(index) >= 0 {
			return dst
		}
	case "content_block_stop":
		if i := a.withheldAt(index); i >= 0 {
			pos := a.withheld[i]
			a.withheld = slices.Delete(a.withheld, i, i+1)
			b := append(f.scratch[:0], `{"type":"content_block_stop","index":`...)
			b = strconv.AppendInt(b, int64(pos), 10)
			f.scratch = append(b, '}')
			return appendEventFrame(keepBOM(dst, ev), frameName(ev, "content_block_stop"), f.scratch)
		}
	case "message_delta":
		if a.refused && !a.delivered {
			return f.anthropicMessageDelta(dst, ev, js)
		}
	}
	return append(dst, ev.Raw...)
}

// withheldAt is the position in withheld of the block index m names, -1
// when that block is not withheld.
func (a *anthropicCallFilter) withheldAt(m jsonMember) int {
	if len(a.withheld) == 0 {
		return -1
	}
	pos, ok := memberIndex(m)
	if !ok {
		return -1
	}
	return slices.Index(a.withheld, pos)
}

func (f *CallFilter) anthropicStart(dst []byte, ev *Event, index, block jsonMember) []byte {
	a := &f.anthropic
	pos, ok := memberIndex(index)
	if i := slices.Index(a.withheld, pos); ok && i >= 0 {
		// A block started again at a withheld index replaces it.
		a.withheld = slices.Delete(a.withheld, i, i+1)
	}
	fields := readObject(block.val, "type", "id", "name")
	if !isString(fields[0], "tool_use") {
		return append(dst, ev.Raw...) // server tools, text, thinking, results
	}
	name, _ := stringValue(fields[2])
	if f.allow(name) {
		// The decoder skips an event that is not JSON: no call came with it.
		a.delivered = a.delivered || gjson.Valid(jsonView(ev.Data))
		return append(dst, ev.Raw...)
	}
	id, _ := stringValue(fields[1])
	text := f.refuse(ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
	a.refused = true
	if !ok {
		return dst // no index to put the text at
	}
	a.withheld = append(a.withheld, pos)
	dst = keepBOM(dst, ev)
	b := append(f.scratch[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(pos), 10)
	b = append(b, `,"content_block":{"type":"text","text":""}}`...)
	dst = appendEventFrame(dst, frameName(ev, "content_block_start"), b)
	b = append(b[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(pos), 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = appendJSONLiteral(b, text)
	b = append(b, "}}"...)
	f.scratch = b
	return appendEventFrame(dst, frameName(ev, "content_block_delta"), b)
}

// anthropicMessageDelta turns a tool_use stop into end_turn once every
// call of the message was withheld: the agent has no call to answer.
func (f *CallFilter) anthropicMessageDelta(dst []byte, ev *Event, js string) []byte {
	if !gjson.Valid(js) {
		return append(dst, ev.Raw...)
	}
	changed := false
	f.scratch = filterObject(f.scratch[:0], js, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		if m.name() != "delta" || !isObject(m.val) {
			return dst, filterKeep
		}
		return filterObject(dst, m.val, func(dst []byte, m jsonMember) ([]byte, filterAction) {
			if m.name() == "stop_reason" && isString(m.val, "tool_use") {
				changed = true
				return append(dst, `"end_turn"`...), filterReplace
			}
			return dst, filterKeep
		}, nil), filterReplace
	}, nil)
	if !changed {
		return append(dst, ev.Raw...)
	}
	return appendEventFrame(keepBOM(dst, ev), jsonView(ev.Name), f.scratch)
}

// anthropicBody rewrites a Message: refused tool_use blocks become text
// blocks, and stop_reason follows. It returns nil when nothing changes.
func (f *CallFilter) anthropicBody(js string) []byte {
	if isString(memberRaw(js, "type"), "error") {
		return nil
	}
	var texts []int // per content block in walk order: the refused call replacing it, or -1
	refused, delivered := false, false
	for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
		if m.name() != "content" {
			continue
		}
		it := newArrayIter(m.val)
		pos := 0
		for block, ok := it.next(); ok; block, ok = it.next() {
			fields := readObject(block, "type", "id", "name")
			r := -1
			if isString(fields[0], "tool_use") {
				name, _ := stringValue(fields[2])
				if f.allow(name) {
					delivered = true
				} else {
					id, _ := stringValue(fields[1])
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
	return filterObject(nil, js, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		switch m.name() {
		case "content":
			if !isJSONArray(m.val) {
				return dst, filterKeep
			}
			dst, _, _ = filterArray(dst, m.val, func(dst []byte, block string) ([]byte, filterAction) {
				r := texts[next]
				next++
				if r < 0 {
					return dst, filterKeep
				}
				dst = append(dst, `{"type":"text","text":`...)
				return append(appendJSONLiteral(dst, f.texts[r]), '}'), filterReplace
			})
			return dst, filterReplace
		case "stop_reason":
			if !delivered && isString(m.val, "tool_use") {
				return append(dst, `"end_turn"`...), filterReplace
			}
		}
		return dst, filterKeep
	}, nil)
}

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

// OpenAI Responses: a refused function_call or custom_tool_call item becomes
// a message item at the same output index.

type responsesCallFilter struct {
	offset int64 // added to every sequence_number passed on
	calls  []responsesFilterCall
	ids    []byte // the calls' item ids, back to back
	plan   []int  // per output item walked: the refused call replacing it, or -1

	callsBuf [8]responsesFilterCall
	idsBuf   [512]byte
	planBuf  [8]int
}

func (r *responsesCallFilter) init() {
	r.calls = r.callsBuf[:0]
	r.ids = r.idsBuf[:0]
	r.plan = r.planBuf[:0]
}

// responsesFilterCall is one call of the reply, found as the decoder finds
// it: by item id, else by output index. Calls the provider runs are kept
// too, since the decoder pairs events with them as well.
type responsesFilterCall struct {
	outputIndex int
	idStart     int
	idEnd       int
	refused     int  // position in CallFilter.refused, -1 for a call let through
	server      bool // an mcp_call
}

func (r *responsesCallFilter) itemID(c responsesFilterCall) string {
	return jsonView(r.ids[c.idStart:c.idEnd])
}

func (r *responsesCallFilter) add(outputIndex int, itemID string, refused int, server bool) {
	start := len(r.ids)
	r.ids = append(r.ids, itemID...)
	r.calls = append(r.calls, responsesFilterCall{outputIndex: outputIndex, idStart: start, idEnd: len(r.ids), refused: refused, server: server})
}

// find locates a call by item id, falling back to the output index (raw
// JSON, used only when it is a number).
func (r *responsesCallFilter) find(itemID, outputIndex string) int {
	return r.findAt(itemID, gjsonInt(outputIndex), isNumber(outputIndex))
}

// findAt is find with the output index oi, used when indexed is set.
func (r *responsesCallFilter) findAt(itemID string, oi int, indexed bool) int {
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
func (r *responsesCallFilter) withheld(outputIndex string, itemIDs ...string) bool {
	for _, c := range r.calls {
		if c.refused < 0 {
			continue
		}
		if isNumber(outputIndex) && gjsonInt(outputIndex) == c.outputIndex {
			return true
		}
		for _, id := range itemIDs {
			if id != "" && id == r.itemID(c) {
				return true
			}
		}
	}
	return false
}

// responsesFields are the top-level members of an event the filter reads;
// as in the decoder, the last of duplicates wins.
type responsesFields struct {
	typ, response, item, outputIndex, itemID, name, seq string
}

func (f *CallFilter) responsesEvent(dst []byte, ev *Event) []byte {
	r := &f.responses
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 || data[0] != '{' {
		return append(dst, ev.Raw...) // [DONE] from some servers, a plain-text error
	}
	js := jsonView(data)
	var e responsesFields
	for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
		switch m.name() {
		case "type":
			e.typ = m.val
		case "response":
			e.response = m.val
		case "item":
			e.item = m.val
		case "output_index":
			e.outputIndex = m.val
		case "item_id":
			e.itemID = m.val
		case "name":
			e.name = m.val
		case "sequence_number":
			e.seq = m.val
		}
	}
	typ, ok := stringValue(e.typ)
	if !ok {
		typ = jsonView(ev.Name)
	}
	if len(f.refused) == 0 && !responsesCallEvent(typ) && e.response == "" {
		return append(dst, ev.Raw...) // text, reasoning: passed without a check
	}
	if !gjson.ValidBytes(data) {
		if len(f.refused) > 0 {
			return dst // see chatEvent
		}
		return append(dst, ev.Raw...)
	}
	seq, numbered := sequenceNumber(e.seq)
	itemFields := readObject(e.item, "type", "id", "call_id", "name")
	itemID, _ := stringValue(itemFields[1])
	eventItemID, _ := stringValue(e.itemID)
	if len(f.refused) > 0 && r.withheld(e.outputIndex, eventItemID, itemID) {
		if numbered {
			r.offset--
		}
		return dst
	}
	switch typ {
	case "response.output_item.added", "response.output_item.done":
		itype, _ := stringValue(itemFields[0])
		if _, _, isCall := callItem(itype); !isCall {
			break
		}
		at := r.find(itemID, e.outputIndex)
		if typ == "response.output_item.added" && at >= 0 && r.itemID(r.calls[at]) != itemID {
			at = -1 // the decoder takes an added item with a new id for a new call
		}
		// The decoder passes over a done item cut short: it opens no call.
		status := memberRaw(e.item, "status")
		opens := typ == "response.output_item.added" || status == "" || isString(status, "completed")
		call := ToolCall{
			Index: gjsonInt(e.outputIndex), Type: callType(itype), ID: gjsonText(itemFields[2]),
			ItemID: itemID, Name: gjsonText(itemFields[3]), Server: itype == "mcp_call",
		}
		if out, done := f.responsesCall(dst, ev, at, call, opens, seq, numbered); done {
			return out
		}
	default:
		if !responsesCallEvent(typ) {
			break
		}
		call := ToolCall{Index: gjsonInt(e.outputIndex), Type: "function_call", ItemID: eventItemID}
		switch {
		case strings.HasPrefix(typ, "response.custom_tool_call_input."):
			call.Type = "custom_tool_call"
		case strings.HasPrefix(typ, "response.mcp_call_arguments."):
			call.Type, call.Server = "mcp_call", true
		}
		if strings.HasSuffix(typ, ".done") {
			call.Name, _ = stringValue(e.name)
		}
		if out, done := f.responsesCall(dst, ev, r.find(eventItemID, e.outputIndex), call, true, seq, numbered); done {
			return out
		}
	}
	changed := false
	if isObject(e.response) {
		final := typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed"
		r.plan = r.plan[:0]
		for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
			if m.name() == "response" && isObject(m.val) {
				changed = f.responsesPlanOutput(m.val, final) || changed
			}
		}
	}
	if !changed && (r.offset == 0 || !numbered) {
		return append(dst, ev.Raw...)
	}
	next := 0
	f.scratch = filterObject(f.scratch[:0], js, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		switch m.name() {
		case "sequence_number":
			if n, ok := sequenceNumber(m.val); ok && r.offset != 0 {
				return strconv.AppendInt(dst, n+r.offset, 10), filterReplace
			}
		case "response":
			if changed && isObject(m.val) {
				return f.responsesEditOutput(dst, m.val, &next), filterReplace
			}
		}
		return dst, filterKeep
	}, nil)
	return appendEventFrame(keepBOM(dst, ev), jsonView(ev.Name), f.scratch)
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

// sequenceNumber reads a sequence_number: an integer written in decimal.
// Anything else is left as it came.
func sequenceNumber(raw string) (int64, bool) {
	if raw == "" || !isNumber(raw) {
		return 0, false // ParseInt's error would cost an allocation per event
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	return n, err == nil
}

// responsesCall handles an event of a call: at is the call the decoder
// would take it for (-1 for a new one), call what the event tells of it,
// opens whether the decoder would open a call for it if new. done says the
// event was handled, out being dst with what the client gets instead of
// it; otherwise it passes like any event.
func (f *CallFilter) responsesCall(dst []byte, ev *Event, at int, call ToolCall, opens bool, seq int64, numbered bool) (out []byte, done bool) {
	r := &f.responses
	if at >= 0 {
		c := r.calls[at]
		if c.server || c.refused < 0 && !f.renames(call.Name) {
			return dst, false
		}
		if numbered {
			r.offset--
		}
		return dst, true
	}
	if call.Server || f.allow(call.Name) {
		if opens {
			r.add(call.Index, call.ItemID, -1, call.Server)
		}
		return dst, false
	}
	call.ID, call.ItemID, call.Name = strings.Clone(call.ID), strings.Clone(call.ItemID), strings.Clone(call.Name)
	f.refuse(call)
	pos := len(f.refused) - 1
	r.add(call.Index, call.ItemID, pos, false)
	return f.responsesMessageEvents(keepBOM(dst, ev), ev, pos, seq, numbered), true
}

// responsesMessageID is the id of the message item that replaces a call.
func responsesMessageID(tc ToolCall) string {
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
func (f *CallFilter) appendMessageItem(dst []byte, pos int, completed bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONLiteral(dst, responsesMessageID(f.refused[pos]))
	if !completed {
		return append(dst, `,"type":"message","status":"in_progress","content":[],"role":"assistant"}`...)
	}
	dst = append(dst, `,"type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":`...)
	dst = appendJSONLiteral(dst, f.texts[pos])
	return append(dst, `}],"role":"assistant"}`...)
}

// responsesMessageEvents appends the six events of a message item carrying
// the refusal of the call at pos, at that call's output index.
func (f *CallFilter) responsesMessageEvents(dst []byte, ev *Event, pos int, seq int64, numbered bool) []byte {
	r := &f.responses
	tc := f.refused[pos]
	id := responsesMessageID(tc)
	text := f.texts[pos]
	steps := [...]string{
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
	}
	for i, typ := range steps {
		b := append(f.scratch[:0], `{"type":"`...)
		b = append(b, typ...)
		b = append(b, '"')
		if numbered {
			b = append(b, `,"sequence_number":`...)
			b = strconv.AppendInt(b, seq+r.offset+int64(i), 10)
		}
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(tc.Index), 10)
		if i > 0 && i < 5 {
			b = appendJSONLiteral(append(b, `,"item_id":`...), id)
			b = append(b, `,"content_index":0`...)
		}
		switch i {
		case 0:
			b = f.appendMessageItem(append(b, `,"item":`...), pos, false)
		case 1:
			b = append(b, `,"part":{"type":"output_text","annotations":[],"text":""}`...)
		case 2:
			b = appendJSONLiteral(append(b, `,"delta":`...), text)
			b = append(b, `,"logprobs":[]`...)
		case 3:
			b = appendJSONLiteral(append(b, `,"text":`...), text)
			b = append(b, `,"logprobs":[]`...)
		case 4:
			b = appendJSONLiteral(append(b, `,"part":{"type":"output_text","annotations":[],"text":`...), text)
			b = append(b, '}')
		case 5:
			b = f.appendMessageItem(append(b, `,"item":`...), pos, true)
		}
		f.scratch = append(b, '}')
		dst = appendEventFrame(dst, frameName(ev, typ), f.scratch)
	}
	if numbered {
		r.offset += int64(len(steps)) - 1
	}
	return dst
}

// responsesPlanOutput judges the calls in the output of a Response object
// (every output member, as a client may read any), appending to the plan
// one entry per item. It reports whether any item is to be replaced.
//
// The decoder reads the output of a final Response only (a terminal event,
// a whole body), and takes the calls it finds there for calls of the reply:
// only then are the allowed ones kept track of, lest an earlier output
// (response.created's, normally empty) pair events with calls the decoder
// never saw.
func (f *CallFilter) responsesPlanOutput(resp string, final bool) bool {
	r := &f.responses
	changed := false
	for m, next, ok := nextMember(resp, objectStart(resp)); ok; m, next, ok = nextMember(resp, next) {
		if m.name() != "output" {
			continue
		}
		it := newArrayIter(m.val)
		for pos := 0; ; pos++ {
			item, ok := it.next()
			if !ok {
				break
			}
			replace := f.responsesPlanItem(item, pos, final)
			changed = changed || replace >= 0
			r.plan = append(r.plan, replace)
		}
	}
	return changed
}

// responsesPlanItem judges one item of a final output at position pos and
// returns the refused call that replaces it, or -1.
func (f *CallFilter) responsesPlanItem(item string, pos int, final bool) int {
	r := &f.responses
	fields := readObject(item, "type", "id", "call_id", "name")
	itype, _ := stringValue(fields[0])
	if _, _, isCall := callItem(itype); !isCall {
		return -1
	}
	itemID, _ := stringValue(fields[1])
	name := gjsonText(fields[3])
	status := memberRaw(item, "status")
	opens := final && (status == "" || isString(status, "completed"))
	at := r.findAt(itemID, pos, true)
	switch {
	case at >= 0:
		// The decoder completes the call it finds, whatever the item's type.
		c := r.calls[at]
		if c.server || c.refused >= 0 || !f.renames(name) {
			return c.refused
		}
	case itype == "mcp_call" || f.allow(name):
		if opens {
			r.add(pos, itemID, -1, itype == "mcp_call")
		}
		return -1
	}
	f.refuse(ToolCall{
		Index: pos, Type: callType(itype), ID: strings.Clone(gjsonText(fields[2])), ItemID: strings.Clone(itemID),
		Name: strings.Clone(name),
	})
	refused := len(f.refused) - 1
	r.add(pos, itemID, refused, false)
	return refused
}

// responsesEditOutput writes a Response object with the items of its
// output replaced as planned; next is the plan entry its first item takes.
func (f *CallFilter) responsesEditOutput(dst []byte, resp string, next *int) []byte {
	r := &f.responses
	return filterObject(dst, resp, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		if m.name() != "output" || !isJSONArray(m.val) {
			return dst, filterKeep
		}
		dst, _, _ = filterArray(dst, m.val, func(dst []byte, item string) ([]byte, filterAction) {
			replace := r.plan[*next]
			*next++
			if replace < 0 {
				return dst, filterKeep
			}
			return f.appendMessageItem(dst, replace, true), filterReplace
		})
		return dst, filterReplace
	}, nil)
}

// responsesBody rewrites a whole Response; nil when nothing changes.
func (f *CallFilter) responsesBody(js string) []byte {
	fields := readObject(js, "error", "status")
	if isObject(fields[0]) && fields[1] == "" {
		return nil // an error body
	}
	f.responses.plan = f.responses.plan[:0]
	if !f.responsesPlanOutput(js, true) {
		return nil
	}
	next := 0
	return f.responsesEditOutput(nil, js, &next)
}
