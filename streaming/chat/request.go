package chat

import (
	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// Reading a Chat Completions request: its output limit, whether a stream
// asks for usage, its tools by name (legacy functions too), the tool
// messages answering the previous reply, and what the conversation's
// fingerprint hashes of it.

// The top-level members ParseRequest reads, in keys' order.
var keys = request.Keys("max_completion_tokens", "max_tokens", "stream_options", "tools", "functions", "messages", "prompt_cache_key")

const (
	keyMaxCompletionTokens = request.Stream + 1 + iota
	keyMaxTokens
	keyStreamOptions
	keyTools
	keyFunctions
	keyMessages
	keyPromptCacheKey
	nKeys
)

// typeTool is kept as a constant so that ToolResult.Type never points into
// a request body.
const typeTool = "tool"

// ParseRequest reads a Chat Completions request body. It fails with an
// error wrapping streaming.ErrInvalidJSON when body is not a JSON object.
// Members of the wrong JSON type are taken as absent. The output limit is
// max_completion_tokens, else the legacy max_tokens; tools go by the
// names toolName gives, then legacy functions[].name; SessionHint is
// prompt_cache_key.
//
// The body is neither unmarshalled nor copied, and the Request shares no
// memory with it: the caller may reuse body once ParseRequest returns.
func (Dialect) ParseRequest(body []byte) (*streaming.Request, error) {
	var m [nKeys]string
	req, _, err := request.Read(streaming.APIChat, body, keys, m[:])
	if err != nil {
		return nil, err
	}
	if !request.SetMaxOutput(req, "max_completion_tokens", m[keyMaxCompletionTokens]) {
		request.SetMaxOutput(req, "max_tokens", m[keyMaxTokens])
	}
	req.IncludeUsage = jsonscan.IsObject(m[keyStreamOptions]) &&
		gjson.Get(m[keyStreamOptions], "include_usage").Type == gjson.True
	var refs [32]string // names pointing into the body, copied out at the end
	names := refs[:0]
	it := jsonscan.NewArrayIter(m[keyTools])
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		names = request.AppendName(names, toolName(t))
	}
	it = jsonscan.NewArrayIter(m[keyFunctions])
	for f, ok := it.Next(); ok; f, ok = it.Next() {
		names = request.AppendName(names, request.FirstName(jsonscan.MemberRaw(f, "name")))
	}
	req.ToolResults = toolResults(m[keyMessages])
	req.SessionHint = request.SessionHint(m[keyPromptCacheKey])
	req.Replied, req.FirstReply = firstReply(m[keyMessages])
	req.Tools = request.CloneStrings(names)
	req.Fingerprint = request.Fingerprint(streaming.APIChat,
		func(th *request.Hasher) { systemTexts(th, m[keyMessages]) },
		func(th *request.Hasher) { th.FirstUserContent(m[keyMessages]) },
		req.Tools)
	return req, nil
}

// toolName is the name a tool goes by: function.name (type
// "function" and untyped entries), custom.name, else its own name or type.
func toolName(tool string) string {
	o := jsonscan.ReadObject(tool, "type", "function", "custom", "name")
	def := o[1]
	if jsonscan.IsString(o[0], "custom") {
		def = o[2]
	}
	return request.FirstName(jsonscan.MemberRaw(def, "name"), o[3], o[0])
}

// toolResults reads the tool messages after the last assistant message.
// Legacy role "function" results carry no call id: skipped.
func toolResults(messages string) []streaming.ToolResult {
	var buf [16]request.Pending
	tail := buf[:0]
	it := request.After(messages, request.IsAssistantMessage)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		if o := jsonscan.ReadObject(msg, "role", "tool_call_id", "content"); jsonscan.IsString(o[0], "tool") {
			id, _ := jsonscan.StringValue(o[1])
			tail = append(tail, request.Pending{ID: id, Type: typeTool, IsError: request.StatesFailure(o[2]),
				Digest: request.ContentDigest(o[2])})
		}
	}
	return request.CopyResults(tail)
}

// systemTexts feeds th the text of the leading system and developer
// messages.
func systemTexts(th *request.Hasher, messages string) {
	it := jsonscan.NewArrayIter(messages)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		o := jsonscan.ReadObject(msg, "role", "content")
		if !jsonscan.IsString(o[0], "system") && !jsonscan.IsString(o[0], "developer") {
			return
		}
		th.Content(o[1])
	}
}

// firstReply reads whether messages replay a reply of the model's, and the
// mark of the first: its first tool call's id, else its content's text.
func firstReply(messages string) (replied bool, mark string) {
	it := jsonscan.NewArrayIter(messages)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		o := jsonscan.ReadObject(msg, "role", "tool_calls", "content")
		if !jsonscan.IsString(o[0], "assistant") {
			continue
		}
		var mk request.Marker
		calls := jsonscan.NewArrayIter(o[1])
		for tc, ok := calls.Next(); ok; tc, ok = calls.Next() {
			mk.Call(jsonscan.MemberRaw(tc, "id"))
		}
		mk.Content(o[2])
		return true, mk.Mark()
	}
	return false, ""
}
