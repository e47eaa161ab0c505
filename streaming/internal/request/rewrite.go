package request

import (
	"fmt"
	"slices"
	"strings"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// Request rewrites for the budget stages: items appended to the
// conversation (a steer notice, a continuation) and tools taken out of the
// request (restrict).
//
// Providers cache the prompt prefix byte for byte, and bodies reach a
// megabyte, so a rewrite never re-encodes a body: it finds offsets with the
// scanner of internal/jsonscan and copies every untouched range verbatim.
// Items go at the very end of the conversation, after every cached byte; a
// removed tool takes with it only its own bytes and one separator.

// AppendConversation returns body with items (conversation items joined by
// commas; none when empty) added as the last items of its conversation,
// the array of member key, every other byte as it came: the array's
// closing bracket and later members too. When the member appears twice the
// last one is used, as the providers' decoders do. A conversation that is
// not an array is left to other, when not nil (Responses' "input"
// string), which reports whether it could append.
func AppendConversation(body []byte, key string, items []byte, other func(body []byte, val jsonscan.Span, items []byte) ([]byte, bool)) ([]byte, error) {
	s := jsonscan.View(body)
	if err := CheckObject(s, 0); err != nil {
		return nil, err
	}
	val, ok := jsonscan.LastMember(s, key)
	if !ok {
		return nil, fmt.Errorf("%w: no %q", streaming.ErrNoConversation, key)
	}
	if s[val.Start] != '[' {
		if other != nil {
			if out, ok := other(body, val, items); ok {
				return out, nil
			}
		}
		return nil, fmt.Errorf("%w: %q is not an array", streaming.ErrNoConversation, key)
	}
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
}

// Tools is how an API declares its tools and chooses among them, for
// Restrict.
type Tools struct {
	// Name is the name a tool of the "tools" list goes by, "" when it has
	// none (such a tool is kept).
	Name func(tool string) string
	// Grouped, when not nil, reports whether a tool only groups others in
	// its own "tools" list (a Responses namespace); those are named by
	// NameOrType and filtered one by one, and the group goes when it had
	// tools and none is left.
	Grouped func(tool string) bool
	// Legacy, when not nil, names a second tool list named by "name" and
	// the member that chooses among it by "name" (Chat's "functions" and
	// "function_call").
	Legacy *Legacy
	// Choice reports whether the tool_choice object choice, at val in
	// the body, survives the removal of r's tools; Restriction's
	// NamesRemoved and KeepAllowed help.
	Choice func(r *Restriction, choice string, val jsonscan.Span) bool
}

// Legacy is a tool list of its own and the member choosing among it.
type Legacy struct{ List, Choice string }

// Restrict removes from the request every tool whose name keep rejects,
// keeping the others in their order and byte for byte, the way tools
// says. A tool_choice that loses its tool is removed (tools.Choice);
// when no tool remains, "tools" is removed, and so are any tool_choice and
// "parallel_tool_calls" (the legacy list and its choice likewise).
//
// keep sees each name once per tool, as a view of body that is only valid
// during the call. removed lists the removed names in request order,
// copied out of body. A body with nothing to remove is returned as is (the
// same slice). A body that is not a JSON object fails with
// streaming.ErrInvalidJSON.
func Restrict(body []byte, tools *Tools, keep func(name string) bool) (out []byte, removed []string, err error) {
	s := jsonscan.View(body)
	if err := CheckObject(s, 0); err != nil {
		return nil, nil, err
	}
	r := Restriction{S: s, tools: tools, keep: keep}
	open := jsonscan.SkipSpace(s, 0)
	var buf [32]jsonscan.SpanMember
	top, closing := jsonscan.ObjectMembers(buf[:0], s, open)

	// Tool lists first: what goes from them decides the rest.
	var list, legacy toolList
	for i, m := range top {
		switch {
		case !jsonscan.IsArrayAt(s, m.Val):
		case jsonscan.KeyEqual(m.Key, "tools"):
			r.filterTools(&list, i, m.Val, tools.Name)
		case tools.Legacy != nil && jsonscan.KeyEqual(m.Key, tools.Legacy.List):
			r.filterTools(&legacy, i, m.Val, legacyName)
		}
	}
	if len(r.removed) == 0 {
		return body, nil, nil
	}
	toolsGone := list.removed > 0 && list.kept == 0
	legacyGone := legacy.removed > 0 && legacy.kept == 0

	drop := make([]bool, len(top))
	for i, m := range top {
		switch {
		case slices.Contains(list.members, i):
			drop[i] = toolsGone
		case slices.Contains(legacy.members, i):
			drop[i] = legacyGone
		case jsonscan.KeyEqual(m.Key, "tool_choice"):
			drop[i] = toolsGone || !r.keepChoice(m.Val)
		case jsonscan.KeyEqual(m.Key, "parallel_tool_calls"):
			drop[i] = toolsGone
		case tools.Legacy != nil && jsonscan.KeyEqual(m.Key, tools.Legacy.Choice):
			drop[i] = legacyGone || r.NamesRemoved(jsonscan.MemberRaw(s[m.Val.Start:m.Val.End], "name"))
		}
	}
	edits := r.edits
	if toolsGone {
		edits = slices.DeleteFunc(edits, func(e jsonscan.Edit) bool { return list.holds(top, e) })
	}
	if legacyGone {
		edits = slices.DeleteFunc(edits, func(e jsonscan.Edit) bool { return legacy.holds(top, e) })
	}
	edits = jsonscan.RemoveItems(edits, jsonscan.MemberSpans(top), drop, open+1, closing)
	slices.SortFunc(edits, func(a, b jsonscan.Edit) int { return a.Start - b.Start })
	return jsonscan.ApplyEdits(body, edits), r.removed, nil
}

// Restriction is one Restrict call's state.
type Restriction struct {
	S       string // the body
	tools   *Tools
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

func legacyName(fn string) string { return FirstName(jsonscan.MemberRaw(fn, "name")) }

// filterTools decides the fate of every tool of the array at val, the
// value of top-level member i, recording the edits that remove the rejected
// ones.
func (r *Restriction) filterTools(l *toolList, i int, val jsonscan.Span, name func(string) string) {
	l.members = append(l.members, i)
	items, closing := jsonscan.ArrayItems(nil, r.S, val.Start)
	drop := make([]bool, len(items))
	for j, it := range items {
		tool := r.S[it.Start:it.End]
		if r.tools.Grouped != nil && r.tools.Grouped(tool) {
			drop[j] = r.filterGroup(it)
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

// filterGroup filters the tools a group holds, and reports whether the
// group is to go: it had tools and none is left.
func (r *Restriction) filterGroup(g jsonscan.Span) bool {
	inner, ok := jsonscan.FindMember(r.S, g.Start, "tools")
	if !ok || !jsonscan.IsArrayAt(r.S, inner) {
		return false
	}
	items, closing := jsonscan.ArrayItems(nil, r.S, inner.Start)
	drop := make([]bool, len(items))
	kept := 0
	for j, it := range items {
		if n := NameOrType(r.S[it.Start:it.End]); n != "" && !r.keep(n) {
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

// keepChoice reports whether the tool_choice at val survives the removal.
func (r *Restriction) keepChoice(val jsonscan.Span) bool {
	choice := r.S[val.Start:val.End]
	if !jsonscan.IsObject(choice) {
		return true // "auto", "none", "required"
	}
	return r.tools.Choice(r, choice, val)
}

// KeepAllowed removes the removed tools from the "tools" list of the
// allowed_tools object at obj, and reports whether any entry is left.
func (r *Restriction) KeepAllowed(obj jsonscan.Span) bool {
	list, ok := jsonscan.FindMember(r.S, obj.Start, "tools")
	if !ok || !jsonscan.IsArrayAt(r.S, list) {
		return true
	}
	items, closing := jsonscan.ArrayItems(nil, r.S, list.Start)
	drop := make([]bool, len(items))
	kept := 0
	for j, it := range items {
		n := r.tools.Name(r.S[it.Start:it.End])
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

// NamesRemoved reports whether raw is a JSON string naming a removed tool.
func (r *Restriction) NamesRemoved(raw string) bool {
	n, ok := jsonscan.StringValue(raw)
	return ok && n != "" && slices.Contains(r.removed, n)
}
