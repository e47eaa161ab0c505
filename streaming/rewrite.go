package streaming

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"gatekeeper/streaming/internal/jsonscan"
)

// Request rewrites for the budget stages: a notice appended to the
// conversation (steer) and tools taken out of the request (restrict).
//
// Providers cache the prompt prefix byte for byte, and bodies reach a
// megabyte, so a rewrite never re-encodes a body: it finds offsets with the
// scanner of internal/jsonscan and copies every untouched range verbatim. A notice
// goes at the very end of the conversation, after every cached byte; a
// removed tool takes with it only its own bytes and one separator.

// ErrNoConversation is returned by AppendNotice when the body has no
// conversation array to append to.
var ErrNoConversation = errors.New("streaming: request has no conversation array")

// AppendConversation returns body with items (conversation items joined by
// commas; none when empty) added as the last items of its conversation
// ("messages", Responses "input"), every other byte as it came: the array's
// closing bracket and later members too. A Responses "input" string becomes
// [{"role":"user","content":<the string's raw bytes>}, items...]. When the
// member appears twice the last one is used, as the providers' decoders do.
func AppendConversation(api API, body, items []byte) ([]byte, error) {
	key := "messages"
	if api == APIResponses {
		key = "input"
	}
	s := jsonscan.View(body)
	if err := checkObject(s, 0); err != nil {
		return nil, err
	}
	val, ok := jsonscan.LastMember(s, key)
	if !ok {
		return nil, fmt.Errorf("%w: no %q", ErrNoConversation, key)
	}
	switch {
	case s[val.Start] == '[':
		// Only whitespace lies between the last element and the closing
		// bracket, so the insertion point is found from the end without
		// walking the conversation.
		at := val.End - 1
		for at > val.Start+1 && jsonscan.IsSpace(s[at-1]) {
			at--
		}
		out := make([]byte, 0, len(body)+len(items)+1)
		out = append(out, body[:at]...)
		if at > val.Start+1 && len(items) > 0 {
			out = append(out, ',')
		}
		out = append(out, items...)
		return append(out, body[at:]...), nil
	case api == APIResponses && s[val.Start] == '"':
		const head = `[{"role":"user","content":`
		out := make([]byte, 0, len(body)+len(items)+len(head)+3)
		out = append(out, body[:val.Start]...)
		out = append(out, head...)
		out = append(out, body[val.Start:val.End]...)
		out = append(out, '}')
		if len(items) > 0 {
			out = append(append(out, ','), items...)
		}
		out = append(out, ']')
		return append(out, body[val.End:]...), nil
	}
	return nil, fmt.Errorf("%w: %q is not an array", ErrNoConversation, key)
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
	s := jsonscan.View(body)
	if err := checkObject(s, 0); err != nil {
		return nil, nil, err
	}
	r := restriction{api: api, s: s, keep: keep}
	open := jsonscan.SkipSpace(s, 0)
	var buf [32]jsonscan.SpanMember
	top, closing := jsonscan.ObjectMembers(buf[:0], s, open)

	// Tool lists first: what goes from them decides the rest.
	var tools, functions toolList
	for i, m := range top {
		switch {
		case !jsonscan.IsArrayAt(s, m.Val):
		case jsonscan.KeyEqual(m.Key, "tools"):
			r.filterTools(&tools, i, m.Val, r.toolName)
		case api == APIChat && jsonscan.KeyEqual(m.Key, "functions"):
			r.filterTools(&functions, i, m.Val, legacyFunctionName)
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
		case jsonscan.KeyEqual(m.Key, "tool_choice"):
			drop[i] = toolsGone || !r.keepChoice(m.Val)
		case jsonscan.KeyEqual(m.Key, "parallel_tool_calls"):
			drop[i] = toolsGone
		case api == APIChat && jsonscan.KeyEqual(m.Key, "function_call"):
			drop[i] = functionsGone || r.namesRemoved(jsonscan.MemberRaw(s[m.Val.Start:m.Val.End], "name"))
		}
	}
	edits := r.edits
	if toolsGone {
		edits = slices.DeleteFunc(edits, func(e jsonscan.Edit) bool { return tools.holds(top, e) })
	}
	if functionsGone {
		edits = slices.DeleteFunc(edits, func(e jsonscan.Edit) bool { return functions.holds(top, e) })
	}
	edits = jsonscan.RemoveItems(edits, jsonscan.MemberSpans(top), drop, open+1, closing)
	slices.SortFunc(edits, func(a, b jsonscan.Edit) int { return a.Start - b.Start })
	return jsonscan.ApplyEdits(body, edits), r.removed, nil
}

// restriction is one RestrictTools call's state.
type restriction struct {
	api     API
	s       string // the body
	keep    func(string) bool
	removed []string
	edits   []jsonscan.Edit // edits inside the members kept (tools lists, tool_choice)
}

// toolList tallies the tool lists of one top-level key (a key may appear
// more than once).
type toolList struct {
	members       []int // indexes of the top-level members
	kept, removed int
}

// holds reports whether edit e lies inside one of the list's members.
func (l *toolList) holds(top []jsonscan.SpanMember, e jsonscan.Edit) bool {
	for _, i := range l.members {
		if e.Start >= top[i].Val.Start && e.End <= top[i].Val.End {
			return true
		}
	}
	return false
}

// filterTools decides the fate of every tool of the array at val, the
// value of top-level member i, recording the edits that remove the rejected
// ones.
func (r *restriction) filterTools(l *toolList, i int, val jsonscan.Span, name func(string) string) {
	l.members = append(l.members, i)
	items, closing := jsonscan.ArrayItems(nil, r.s, val.Start)
	drop := make([]bool, len(items))
	for j, it := range items {
		tool := r.s[it.Start:it.End]
		if r.api == APIResponses && jsonscan.IsString(jsonscan.MemberRaw(tool, "type"), "namespace") {
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
	r.edits = jsonscan.RemoveItems(r.edits, items, drop, val.Start+1, closing)
}

// filterNamespace filters the functions a Responses namespace tool groups,
// and reports whether the namespace is to go: it had tools and none is
// left.
func (r *restriction) filterNamespace(ns jsonscan.Span) bool {
	inner, ok := jsonscan.FindMember(r.s, ns.Start, "tools")
	if !ok || !jsonscan.IsArrayAt(r.s, inner) {
		return false
	}
	items, closing := jsonscan.ArrayItems(nil, r.s, inner.Start)
	drop := make([]bool, len(items))
	kept := 0
	for j, it := range items {
		if n := anthropicToolName(r.s[it.Start:it.End]); n != "" && !r.keep(n) {
			drop[j] = true
			r.removed = append(r.removed, strings.Clone(n))
		} else {
			kept++
		}
	}
	if kept == 0 && len(items) > 0 {
		return true
	}
	r.edits = jsonscan.RemoveItems(r.edits, items, drop, inner.Start+1, closing)
	return false
}

// keepChoice reports whether the tool_choice at val survives the removal;
// an allowed_tools choice that keeps some entries loses the others.
func (r *restriction) keepChoice(val jsonscan.Span) bool {
	choice := r.s[val.Start:val.End]
	if !jsonscan.IsObject(choice) {
		return true // "auto", "none", "required"
	}
	o := jsonscan.ReadObject(choice, "type", "name", "function", "custom")
	switch r.api {
	case APIAnthropic:
		return !jsonscan.IsString(o[0], "tool") || !r.namesRemoved(o[1])
	case APIChat:
		switch {
		case jsonscan.IsString(o[0], "function"):
			return !r.namesRemoved(jsonscan.MemberRaw(o[2], "name"))
		case jsonscan.IsString(o[0], "custom"):
			return !r.namesRemoved(jsonscan.MemberRaw(o[3], "name"))
		case jsonscan.IsString(o[0], "allowed_tools"):
			allowed, ok := jsonscan.FindMember(r.s, val.Start, "allowed_tools")
			if !ok || !jsonscan.IsObjectAt(r.s, allowed) {
				return true
			}
			return r.keepAllowed(allowed)
		}
	case APIResponses:
		switch {
		case jsonscan.IsString(o[0], "function"), jsonscan.IsString(o[0], "custom"):
			return !r.namesRemoved(o[1])
		case jsonscan.IsString(o[0], "allowed_tools"):
			return r.keepAllowed(val)
		default: // a built-in tool, chosen by its type
			return !r.namesRemoved(o[0])
		}
	}
	return true
}

// keepAllowed removes the removed tools from the "tools" list of the
// allowed_tools object at obj, and reports whether any entry is left.
func (r *restriction) keepAllowed(obj jsonscan.Span) bool {
	list, ok := jsonscan.FindMember(r.s, obj.Start, "tools")
	if !ok || !jsonscan.IsArrayAt(r.s, list) {
		return true
	}
	items, closing := jsonscan.ArrayItems(nil, r.s, list.Start)
	drop := make([]bool, len(items))
	kept := 0
	for j, it := range items {
		n := r.toolName(r.s[it.Start:it.End])
		drop[j] = n != "" && slices.Contains(r.removed, n)
		if !drop[j] {
			kept++
		}
	}
	if kept == 0 && len(items) > 0 {
		return false
	}
	r.edits = jsonscan.RemoveItems(r.edits, items, drop, list.Start+1, closing)
	return true
}

// namesRemoved reports whether raw is a JSON string naming a removed tool.
func (r *restriction) namesRemoved(raw string) bool {
	n, ok := jsonscan.StringValue(raw)
	return ok && n != "" && slices.Contains(r.removed, n)
}

// toolName is the name a tool of r's API goes by, "" when it has none.
func (r *restriction) toolName(tool string) string {
	switch r.api {
	case APIAnthropic:
		return anthropicToolName(tool)
	case APIChat:
		o := jsonscan.ReadObject(tool, "type", "function", "custom", "name")
		def := o[1] // type "function" and untyped entries
		if jsonscan.IsString(o[0], "custom") {
			def = o[2]
		}
		return firstName(jsonscan.MemberRaw(def, "name"), o[3], o[0])
	default:
		o := jsonscan.ReadObject(tool, "type", "name")
		if jsonscan.IsString(o[0], "function") || jsonscan.IsString(o[0], "custom") {
			return firstName(o[1])
		}
		return firstName(o[0]) // built-in tools are known by type
	}
}

// anthropicToolName is an Anthropic tool's name, else its type (also the
// naming of the functions inside a Responses namespace).
func anthropicToolName(tool string) string {
	o := jsonscan.ReadObject(tool, "name", "type")
	return firstName(o[0], o[1])
}

func legacyFunctionName(fn string) string { return firstName(jsonscan.MemberRaw(fn, "name")) }

// firstName is the first of raws that is a non-empty JSON string, decoded;
// without escapes it is a view of the body.
func firstName(raws ...string) string {
	for _, raw := range raws {
		if v, ok := jsonscan.StringValue(raw); ok && v != "" {
			return v
		}
	}
	return ""
}
