package chat

import (
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// AppendNotice returns body with a user message holding text added as the
// last item of the conversation, where a budget notice breaks no cached
// prefix: {"role":"user","content":"..."} at the end of "messages". Every
// other byte of body is unchanged.
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return appendConversation(body, appendNotice(nil, text))
}

// appendNotice appends the user message holding text.
func appendNotice(dst []byte, text string) []byte {
	dst = append(dst, `{"role":"user","content":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, '}')
}

// appendConversation adds items (joined by commas) at the end of
// "messages" (request.AppendConversation).
func appendConversation(body, items []byte) ([]byte, error) {
	return request.AppendConversation(body, "messages", items, nil)
}

// RestrictTools removes from the request every tool whose name keep
// rejects, keeping the others in their order and byte for byte
// (request.Restrict). Tools go by the names ParseRequest lists:
// tools[].function.name, tools[].custom.name and legacy functions[].name.
// A tool_choice (or legacy function_call) naming a removed tool is
// removed; an allowed_tools choice loses the removed entries, and goes when
// none is left. When no tool remains, "tools" is removed, and so are any
// tool_choice and "parallel_tool_calls" ("functions" and "function_call"
// likewise), since the API rejects a tool_choice without tools.
func (Dialect) RestrictTools(body []byte, keep func(name string) bool) ([]byte, []string, error) {
	return request.Restrict(body, &toolRules, keep)
}

var toolRules = request.Tools{
	Name:   toolName,
	Legacy: &request.Legacy{List: "functions", Choice: "function_call"},
	Choice: func(r *request.Restriction, choice string, val jsonscan.Span) bool {
		o := jsonscan.ReadObject(choice, "type", "function", "custom")
		switch {
		case jsonscan.IsString(o[0], "function"):
			return !r.NamesRemoved(jsonscan.MemberRaw(o[1], "name"))
		case jsonscan.IsString(o[0], "custom"):
			return !r.NamesRemoved(jsonscan.MemberRaw(o[2], "name"))
		case jsonscan.IsString(o[0], "allowed_tools"):
			allowed, ok := jsonscan.FindMember(r.S, val.Start, "allowed_tools")
			if !ok || !jsonscan.IsObjectAt(r.S, allowed) {
				return true
			}
			return r.KeepAllowed(allowed)
		}
		return true
	},
}
