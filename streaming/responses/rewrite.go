package responses

import (
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// AppendNotice returns body with a user message holding text added as the
// last item of the conversation, where a budget notice breaks no cached
// prefix: {"type":"message","role":"user","content":[{"type":"input_text","text":...}]}
// at the end of "input"; an "input" string becomes the array
// [{"role":"user","content":<the string's raw bytes>}, notice]. Every other byte of body is
// unchanged.
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return appendConversation(body, appendNotice(nil, text))
}

// appendNotice appends the user message holding text.
func appendNotice(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, "}]}"...)
}

// appendConversation adds items (joined by commas) at the end of "input"
// (request.AppendConversation); an "input" string becomes
// [{"role":"user","content":<the string's raw bytes>}, items...].
func appendConversation(body, items []byte) ([]byte, error) {
	return request.AppendConversation(body, "input", items, inputString)
}

// inputString appends items to the "input" string at val.
func inputString(body []byte, val jsonscan.Span, items []byte) ([]byte, bool) {
	if body[val.Start] != '"' {
		return nil, false
	}
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
	return append(out, body[val.End:]...), true
}

// RestrictTools removes from the request every tool whose name keep
// rejects, keeping the others in their order and byte for byte
// (request.Restrict). Tools go by tools[].name for function and custom
// tools, by the names inside a namespace tool (an emptied namespace goes),
// and by type for built-in tools (web_search, file_search,
// code_interpreter, mcp...): the names ParseRequest lists, except tools
// declared inside the conversation (additional_tools input items), which
// are left alone: editing them would rewrite the cached prefix.
//
// A tool_choice naming a removed tool is removed; an allowed_tools choice
// loses the removed entries, and goes when none is left. When no tool
// remains, "tools" is removed, and so are any tool_choice and
// "parallel_tool_calls", since the API rejects a tool_choice without
// tools.
func (Dialect) RestrictTools(body []byte, keep func(name string) bool) ([]byte, []string, error) {
	return request.Restrict(body, &toolRules, keep)
}

var toolRules = request.Tools{
	Name:    toolName,
	Grouped: isNamespace,
	Choice: func(r *request.Restriction, choice string, val jsonscan.Span) bool {
		o := jsonscan.ReadObject(choice, "type", "name")
		switch {
		case jsonscan.IsString(o[0], "function"), jsonscan.IsString(o[0], "custom"):
			return !r.NamesRemoved(o[1])
		case jsonscan.IsString(o[0], "allowed_tools"):
			return r.KeepAllowed(val)
		default: // a built-in tool, chosen by its type
			return !r.NamesRemoved(o[0])
		}
	},
}
