package anthropic

import (
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// AppendNotice returns body with a user message holding text added as the
// last item of the conversation, where a budget notice breaks no cached
// prefix: {"role":"user","content":[{"type":"text","text":...}]} at the end of
// "messages" (the API merges consecutive user turns, so this is valid after
// a user message holding tool results too). Every other byte of body is
// unchanged.
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return appendConversation(body, appendNotice(nil, text))
}

// appendNotice appends the user message holding text.
func appendNotice(dst []byte, text string) []byte {
	dst = append(dst, `{"role":"user","content":[{"type":"text","text":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, "}]}"...)
}

// appendConversation adds items (joined by commas) at the end of
// "messages" (request.AppendConversation).
func appendConversation(body, items []byte) ([]byte, error) {
	return request.AppendConversation(body, "messages", items, nil)
}

// RestrictTools removes from the request every tool whose name keep
// rejects, keeping the others in their order and byte for byte
// (request.Restrict). Tools go by tools[].name, server tools such as
// {"type":"web_search_20250305","name":"web_search"} too, else by type: the
// names ParseRequest lists. A tool_choice {"type":"tool"} naming a removed
// tool is removed; when no tool remains, "tools", "tool_choice" and
// "parallel_tool_calls" go.
//
// The API used to refuse a request whose messages hold tool_use or
// tool_result blocks without "tools" (400 "Requests which include
// `tool_use` or `tool_result` blocks must define tools.",
// anthropics/anthropic-sdk-python#494), but the API release notes of
// 2025-02-27 (docs.anthropic.com/en/release-notes/api) lifted that
// requirement together with adding tool_choice {"type":"none"}, as
// Anthropic confirmed in anthropics/anthropic-sdk-python#849. Keeping an
// empty "tools" array or forcing tool_choice none would only be needed for
// that older behaviour.
func (Dialect) RestrictTools(body []byte, keep func(name string) bool) ([]byte, []string, error) {
	return request.Restrict(body, &toolRules, keep)
}

var toolRules = request.Tools{
	Name: request.NameOrType,
	Choice: func(r *request.Restriction, choice string, _ jsonscan.Span) bool {
		o := jsonscan.ReadObject(choice, "type", "name")
		return !jsonscan.IsString(o[0], "tool") || !r.NamesRemoved(o[1])
	},
}
