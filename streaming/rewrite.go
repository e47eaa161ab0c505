package streaming

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Request rewrites for the budget stages: a notice appended to the
// conversation (steer) and tools taken out of the request (restrict).
//
// Providers cache the prompt prefix byte for byte, and bodies reach a
// megabyte, so a rewrite never re-encodes a body: it finds offsets with the
// scanner of jsonscan.go and copies every untouched range verbatim. A notice
// goes at the very end of the conversation, after every cached byte; a
// removed tool takes with it only its own bytes and one separator.

// ErrNoConversation is returned by AppendNotice when the body has no
// conversation array to append to.
var ErrNoConversation = errors.New("streaming: request has no conversation array")

// AppendNotice returns body with a user message holding text added as the
// LAST item of the conversation, where a budget notice breaks no cached
// prefix:
//
//   - Anthropic: {"role":"user","content":[{"type":"text","text":...}]} at
//     the end of "messages" (the API merges consecutive user turns, so this
//     is valid after a user message holding tool results too);
//   - Chat: {"role":"user","content":"..."} at the end of "messages";
//   - Responses: {"type":"message","role":"user","content":[{"type":"input_text","text":...}]}
//     at the end of "input"; an "input" string becomes the array
//     [{"role":"user","content":<the string's raw bytes>}, notice].
//
// Every byte of body before the insertion point is unchanged, and so is
// every byte after it (the array's closing bracket and later members). When
// a member appears twice the last one is used, as the providers' decoders
// do. Errors: ErrInvalidJSON for a body that is not a JSON object,
// ErrNoConversation when messages/input is missing or not an array (a
// string is fine for Responses), ErrUnknownAPI.
func AppendNotice(api API, body []byte, text string) ([]byte, error) {
	switch api {
	case APIAnthropic, APIChat, APIResponses:
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
	}
	return appendConversation(api, body, appendNoticeItem(nil, api, text))
}

// appendConversation returns body with items (conversation items joined by
// commas; none when empty) added as the last items of its conversation
// ("messages", Responses "input"), every other byte as it came: the array's
// closing bracket and later members too. A Responses "input" string becomes
// [{"role":"user","content":<the string's raw bytes>}, items...]. When the
// member appears twice the last one is used, as the providers' decoders do.
func appendConversation(api API, body, items []byte) ([]byte, error) {
	key := "messages"
	if api == APIResponses {
		key = "input"
	}
	s := jsonView(body)
	if err := checkObject(s, 0); err != nil {
		return nil, err
	}
	val, ok := lastMember(s, key)
	if !ok {
		return nil, fmt.Errorf("%w: no %q", ErrNoConversation, key)
	}
	switch {
	case s[val.start] == '[':
		// Only whitespace lies between the last element and the closing
		// bracket, so the insertion point is found from the end without
		// walking the conversation.
		at := val.end - 1
		for at > val.start+1 && isSpaceByte(s[at-1]) {
			at--
		}
		out := make([]byte, 0, len(body)+len(items)+1)
		out = append(out, body[:at]...)
		if at > val.start+1 && len(items) > 0 {
			out = append(out, ',')
		}
		out = append(out, items...)
		return append(out, body[at:]...), nil
	case api == APIResponses && s[val.start] == '"':
		const head = `[{"role":"user","content":`
		out := make([]byte, 0, len(body)+len(items)+len(head)+3)
		out = append(out, body[:val.start]...)
		out = append(out, head...)
		out = append(out, body[val.start:val.end]...)
		out = append(out, '}')
		if len(items) > 0 {
			out = append(append(out, ','), items...)
		}
		out = append(out, ']')
		return append(out, body[val.end:]...), nil
	}
	return nil, fmt.Errorf("%w: %q is not an array", ErrNoConversation, key)
}

// appendNoticeItem appends the conversation item of api holding text.
func appendNoticeItem(dst []byte, api API, text string) []byte {
	switch api {
	case APIAnthropic:
		dst = append(dst, `{"role":"user","content":[{"type":"text","text":`...)
		dst = appendJSONQuoted(dst, text)
		return append(dst, "}]}"...)
	case APIChat:
		dst = append(dst, `{"role":"user","content":`...)
		dst = appendJSONQuoted(dst, text)
		return append(dst, '}')
	default:
		dst = append(dst, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
		dst = appendJSONQuoted(dst, text)
		return append(dst, "}]}"...)
	}
}

// RestrictTools removes from the request every tool whose name keep
// rejects, keeping the others in their order and byte for byte. Names:
// Anthropic tools[].name (server tools such as
// {"type":"web_search_20250305","name":"web_search"} too; the type when a
// tool has no name); Chat tools[].function.name, tools[].custom.name and
// legacy functions[].name; Responses tools[].name for function and custom
// tools, the names inside a namespace tool (an emptied namespace goes), and
// the type for built-in tools (web_search, file_search, code_interpreter,
// mcp...). These are the names ParseRequest lists in Request.Tools, except
// Responses tools declared inside the conversation (additional_tools input
// items), which are left alone: editing them would rewrite the cached
// prefix.
//
// A tool_choice (Chat: also legacy function_call) that names a removed tool
// is removed; an allowed_tools choice loses the removed entries, and goes
// when none is left. When no tool remains, "tools" is removed, and so are
// any tool_choice and "parallel_tool_calls" (Chat: "functions" and
// "function_call" likewise), since the OpenAI APIs reject a tool_choice
// without tools.
//
// Anthropic is treated the same way. Its API used to refuse a request whose
// messages hold tool_use or tool_result blocks without "tools" (400
// "Requests which include `tool_use` or `tool_result` blocks must define
// tools.", anthropics/anthropic-sdk-python#494), but the API release notes
// of 2025-02-27 (docs.anthropic.com/en/release-notes/api) lifted that
// requirement together with adding tool_choice {"type":"none"}, as
// Anthropic confirmed in anthropics/anthropic-sdk-python#849. Keeping an
// empty "tools" array or forcing tool_choice none would only be needed
// for that older behaviour.
//
// keep sees each name once per tool, as a view of body that is only valid
// during the call. removed lists the removed names in request order,
// copied out of body. A body with nothing to remove is returned as is (the
// same slice). Errors: ErrInvalidJSON for a body that is not a JSON object,
// ErrUnknownAPI.
func RestrictTools(api API, body []byte, keep func(name string) bool) (out []byte, removed []string, err error) {
	switch api {
	case APIAnthropic, APIChat, APIResponses:
	default:
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
	}
	s := jsonView(body)
	if err := checkObject(s, 0); err != nil {
		return nil, nil, err
	}
	r := restriction{api: api, s: s, keep: keep}
	open := skipSpace(s, 0)
	var buf [32]textMember
	top, closing := objectMembers(buf[:0], s, open)

	// Tool lists first: what goes from them decides the rest.
	var tools, functions toolList
	for i, m := range top {
		switch {
		case !isArrayAt(s, m.val):
		case keyEqual(m.key, "tools"):
			r.filterTools(&tools, i, m.val, r.toolName)
		case api == APIChat && keyEqual(m.key, "functions"):
			r.filterTools(&functions, i, m.val, legacyFunctionName)
		}
	}
	if len(r.removed) == 0 {
		return body, nil, nil
	}
	toolsGone := tools.removed > 0 && tools.kept == 0
	functionsGone := functions.removed > 0 && functions.kept == 0

	drop := make([]bool, len(top))
	for i, m := range top {
		switch {
		case slices.Contains(tools.members, i):
			drop[i] = toolsGone
		case slices.Contains(functions.members, i):
			drop[i] = functionsGone
		case keyEqual(m.key, "tool_choice"):
			drop[i] = toolsGone || !r.keepChoice(m.val)
		case keyEqual(m.key, "parallel_tool_calls"):
			drop[i] = toolsGone
		case api == APIChat && keyEqual(m.key, "function_call"):
			drop[i] = functionsGone || r.namesRemoved(memberRaw(s[m.val.start:m.val.end], "name"))
		}
	}
	edits := r.edits
	if toolsGone {
		edits = slices.DeleteFunc(edits, func(e textEdit) bool { return tools.holds(top, e) })
	}
	if functionsGone {
		edits = slices.DeleteFunc(edits, func(e textEdit) bool { return functions.holds(top, e) })
	}
	edits = removeItems(edits, memberSpans(top), drop, open+1, closing)
	slices.SortFunc(edits, func(a, b textEdit) int { return a.start - b.start })
	return applyEdits(body, edits), r.removed, nil
}

// restriction is one RestrictTools call's state.
type restriction struct {
	api     API
	s       string // the body
	keep    func(string) bool
	removed []string
	edits   []textEdit // edits inside the members kept (tools lists, tool_choice)
}

// toolList tallies the tool lists of one top-level key (a key may appear
// more than once).
type toolList struct {
	members       []int // indexes of the top-level members
	kept, removed int
}

// holds reports whether edit e lies inside one of the list's members.
func (l *toolList) holds(top []textMember, e textEdit) bool {
	for _, i := range l.members {
		if e.start >= top[i].val.start && e.end <= top[i].val.end {
			return true
		}
	}
	return false
}

// filterTools decides the fate of every tool of the array at val, the
// value of top-level member i, recording the edits that remove the rejected
// ones.
func (r *restriction) filterTools(l *toolList, i int, val textSpan, name func(string) string) {
	l.members = append(l.members, i)
	items, closing := arrayItems(nil, r.s, val.start)
	drop := make([]bool, len(items))
	for j, it := range items {
		tool := r.s[it.start:it.end]
		if r.api == APIResponses && isString(memberRaw(tool, "type"), "namespace") {
			drop[j] = r.filterNamespace(it)
		} else if n := name(tool); n != "" && !r.keep(n) {
			drop[j] = true
			r.removed = append(r.removed, strings.Clone(n))
		}
		if drop[j] {
			l.removed++
		} else {
			l.kept++
		}
	}
	r.edits = removeItems(r.edits, items, drop, val.start+1, closing)
}

// filterNamespace filters the functions a Responses namespace tool groups,
// and reports whether the namespace is to go: it had tools and none is
// left.
func (r *restriction) filterNamespace(ns textSpan) bool {
	inner, ok := findMember(r.s, ns.start, "tools")
	if !ok || !isArrayAt(r.s, inner) {
		return false
	}
	items, closing := arrayItems(nil, r.s, inner.start)
	drop := make([]bool, len(items))
	kept := 0
	for j, it := range items {
		if n := anthropicToolName(r.s[it.start:it.end]); n != "" && !r.keep(n) {
			drop[j] = true
			r.removed = append(r.removed, strings.Clone(n))
		} else {
			kept++
		}
	}
	if kept == 0 && len(items) > 0 {
		return true
	}
	r.edits = removeItems(r.edits, items, drop, inner.start+1, closing)
	return false
}

// keepChoice reports whether the tool_choice at val survives the removal;
// an allowed_tools choice that keeps some entries loses the others.
func (r *restriction) keepChoice(val textSpan) bool {
	choice := r.s[val.start:val.end]
	if !isObject(choice) {
		return true // "auto", "none", "required"
	}
	o := readObject(choice, "type", "name", "function", "custom")
	switch r.api {
	case APIAnthropic:
		return !isString(o[0], "tool") || !r.namesRemoved(o[1])
	case APIChat:
		switch {
		case isString(o[0], "function"):
			return !r.namesRemoved(memberRaw(o[2], "name"))
		case isString(o[0], "custom"):
			return !r.namesRemoved(memberRaw(o[3], "name"))
		case isString(o[0], "allowed_tools"):
			allowed, ok := findMember(r.s, val.start, "allowed_tools")
			if !ok || !isObjectAt(r.s, allowed) {
				return true
			}
			return r.keepAllowed(allowed)
		}
	case APIResponses:
		switch {
		case isString(o[0], "function"), isString(o[0], "custom"):
			return !r.namesRemoved(o[1])
		case isString(o[0], "allowed_tools"):
			return r.keepAllowed(val)
		default: // a built-in tool, chosen by its type
			return !r.namesRemoved(o[0])
		}
	}
	return true
}

// keepAllowed removes the removed tools from the "tools" list of the
// allowed_tools object at obj, and reports whether any entry is left.
func (r *restriction) keepAllowed(obj textSpan) bool {
	list, ok := findMember(r.s, obj.start, "tools")
	if !ok || !isArrayAt(r.s, list) {
		return true
	}
	items, closing := arrayItems(nil, r.s, list.start)
	drop := make([]bool, len(items))
	kept := 0
	for j, it := range items {
		n := r.toolName(r.s[it.start:it.end])
		drop[j] = n != "" && slices.Contains(r.removed, n)
		if !drop[j] {
			kept++
		}
	}
	if kept == 0 && len(items) > 0 {
		return false
	}
	r.edits = removeItems(r.edits, items, drop, list.start+1, closing)
	return true
}

// namesRemoved reports whether raw is a JSON string naming a removed tool.
func (r *restriction) namesRemoved(raw string) bool {
	n, ok := stringValue(raw)
	return ok && n != "" && slices.Contains(r.removed, n)
}

// toolName is the name a tool of r's API goes by, "" when it has none.
func (r *restriction) toolName(tool string) string {
	switch r.api {
	case APIAnthropic:
		return anthropicToolName(tool)
	case APIChat:
		o := readObject(tool, "type", "function", "custom", "name")
		def := o[1] // type "function" and untyped entries
		if isString(o[0], "custom") {
			def = o[2]
		}
		return firstName(memberRaw(def, "name"), o[3], o[0])
	default:
		o := readObject(tool, "type", "name")
		if isString(o[0], "function") || isString(o[0], "custom") {
			return firstName(o[1])
		}
		return firstName(o[0]) // built-in tools are known by type
	}
}

// anthropicToolName is an Anthropic tool's name, else its type (also the
// naming of the functions inside a Responses namespace).
func anthropicToolName(tool string) string {
	o := readObject(tool, "name", "type")
	return firstName(o[0], o[1])
}

func legacyFunctionName(fn string) string { return firstName(memberRaw(fn, "name")) }

// firstName is the first of raws that is a non-empty JSON string, decoded;
// without escapes it is a view of the body.
func firstName(raws ...string) string {
	for _, raw := range raws {
		if v, ok := stringValue(raw); ok && v != "" {
			return v
		}
	}
	return ""
}

// Splicing.

// span is the byte range [start, end) of a value in a body.
type textSpan struct{ start, end int }

// member is one member of a JSON object in a body: its key as written
// (quotes removed, escapes kept), the offset of the key's opening quote,
// and its value.
type textMember struct {
	key   string
	start int
	val   textSpan
}

// edit replaces body[start:end] with text.
type textEdit struct {
	start, end int
	text       string
}

// splice returns a new body with the sorted, disjoint edits applied.
func applyEdits(body []byte, edits []textEdit) []byte {
	n := len(body)
	for _, e := range edits {
		n += len(e.text) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, e := range edits {
		out = append(out, body[at:e.start]...)
		out = append(out, e.text...)
		at = e.end
	}
	return append(out, body[at:]...)
}

// removeItems appends the edits that remove, from one array or object whose
// items (elements, or members from key to value) lie between open (just
// past its opening bracket) and closing (its closing bracket), the items
// whose drop is set. A removed item takes with it the separator before it,
// or after it when no kept item precedes it, so that kept items and the
// whitespace around them stay byte for byte; when every item goes, so does
// everything between the brackets.
func removeItems(edits []textEdit, items []textSpan, drop []bool, open, closing int) []textEdit {
	if len(items) > 0 && !slices.Contains(drop, false) {
		return append(edits, textEdit{start: open, end: closing})
	}
	kept := -1 // the last kept item
	for i := 0; i < len(items); {
		if !drop[i] {
			kept = i
			i++
			continue
		}
		j := i
		for j < len(items) && drop[j] {
			j++
		}
		if kept >= 0 {
			edits = append(edits, textEdit{start: items[kept].end, end: items[j-1].end})
		} else { // a kept item follows: not everything goes
			edits = append(edits, textEdit{start: items[i].start, end: items[j].start})
		}
		i = j
	}
	return edits
}

// objectMembers appends the members of the object whose opening brace is
// at s[open], and returns them with the offset of its closing brace (len(s)
// on text that breaks off). It reads text checkObject accepted.
func objectMembers(dst []textMember, s string, open int) ([]textMember, int) {
	i := open + 1
	for n := 0; n < len(s); n++ { // every member consumes input
		start := skipSpace(s, i)
		if start < len(s) && s[start] == ',' {
			start = skipSpace(s, start+1)
		}
		m, next, ok := nextMember(s, i)
		if !ok {
			return dst, next
		}
		dst = append(dst, textMember{key: m.key, start: start, val: textSpan{m.off, next}})
		i = next
	}
	return dst, len(s)
}

// arrayItems appends the elements of the array whose opening bracket is at
// s[open], and returns them with the offset of its closing bracket.
func arrayItems(dst []textSpan, s string, open int) ([]textSpan, int) {
	i := open + 1
	for n := 0; n < len(s); n++ {
		i = skipSpace(s, i)
		if i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
		}
		if i >= len(s) || s[i] == ']' {
			return dst, min(i, len(s))
		}
		e := skipValue(s, i)
		if e == i {
			return dst, len(s)
		}
		dst = append(dst, textSpan{i, e})
		i = e
	}
	return dst, len(s)
}

// memberSpans is the span of each member, key to value.
func memberSpans(ms []textMember) []textSpan {
	out := make([]textSpan, len(ms))
	for i, m := range ms {
		out[i] = textSpan{m.start, m.val.end}
	}
	return out
}

// findMember is the value of the first member named key of the object at
// s[obj], as gjson would pick it.
func findMember(s string, obj int, key string) (textSpan, bool) {
	if obj >= len(s) || s[obj] != '{' {
		return textSpan{}, false
	}
	i := obj + 1
	for n := 0; n < len(s); n++ {
		m, next, ok := nextMember(s, i)
		if !ok {
			break
		}
		if keyEqual(m.key, key) {
			return textSpan{m.off, next}, true
		}
		i = next
	}
	return textSpan{}, false
}

// lastMember is the value of the last top-level member of the object s
// named key: the one the providers' decoders keep.
func lastMember(s, key string) (textSpan, bool) {
	var found textSpan
	ok := false
	i := objectStart(s)
	for n := 0; n < len(s); n++ {
		m, next, more := nextMember(s, i)
		if !more {
			break
		}
		if keyEqual(m.key, key) {
			found, ok = textSpan{m.off, next}, true
		}
		i = next
	}
	return found, ok
}

func isArrayAt(s string, v textSpan) bool  { return v.start < v.end && s[v.start] == '[' }
func isObjectAt(s string, v textSpan) bool { return v.start < v.end && s[v.start] == '{' }

func isSpaceByte(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// appendJSONQuoted appends s as a JSON string literal. Invalid UTF-8
// becomes U+FFFD, as encoding/json does; HTML characters are left as they
// are, since nothing renders the body as HTML.
func appendJSONQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript in older engines.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
