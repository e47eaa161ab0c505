package responses

import (
	"strings"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callitems"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// Reading a Responses request: its output limit max_output_tokens, its
// tools by name (those of namespaces and of code-mode additional_tools
// input items too), the tool outputs answering the previous reply, the
// client's prompt_cache_key, and what the conversation's fingerprint
// hashes of it.

// The top-level members ParseRequest reads, in keys' order.
var keys = request.Keys("max_output_tokens", "tools", "input", "prompt_cache_key",
	"instructions", "previous_response_id", "conversation")

const (
	keyMaxOutputTokens = request.Stream + 1 + iota
	keyTools
	keyInput
	keyPromptCacheKey
	keyInstructions
	keyPreviousResponseID
	keyConversation
	nKeys
)

// ParseRequest reads a Responses request body. It fails with an error
// wrapping streaming.ErrInvalidJSON when body is not a JSON object.
// Members of the wrong JSON type are taken as absent. Function and custom
// tools go by name, the functions of a namespace by theirs, hosted tools
// by type; SessionHint is prompt_cache_key, else the conversation's id.
//
// The body is neither unmarshalled nor copied, and the Request shares no
// memory with it: the caller may reuse body once ParseRequest returns.
func (Dialect) ParseRequest(body []byte) (*streaming.Request, error) {
	var m [nKeys]string
	req, _, err := request.Read(streaming.APIResponses, body, keys, m[:])
	if err != nil {
		return nil, err
	}
	request.SetMaxOutput(req, "max_output_tokens", m[keyMaxOutputTokens])
	var refs [32]string // names pointing into the body, copied out at the end
	names := toolNames(refs[:0], m[keyTools])
	names, req.ToolResults = readInput(names, m[keyInput])
	req.SessionHint = request.SessionHint(m[keyPromptCacheKey])
	if req.SessionHint == "" {
		req.SessionHint = conversationID(m[keyConversation])
	}
	req.Replied, req.FirstReply = firstReply(m[keyInput])
	if prev, ok := jsonscan.StringValue(m[keyPreviousResponseID]); ok && prev != "" {
		// The history is the provider's: the turn goes on from the reply
		// it names.
		req.Replied, req.FirstReply = true, streaming.ResponseMark(prev)
	}
	req.Tools = request.CloneStrings(names)
	req.Fingerprint = request.Fingerprint(streaming.APIResponses,
		func(th *request.Hasher) { systemTexts(th, m[keyInstructions], m[keyInput]) },
		func(th *request.Hasher) { firstUserTexts(th, &m) },
		req.Tools)
	return req, nil
}

// toolNames appends the names of the tools of the array tools.
func toolNames(names []string, tools string) []string {
	it := jsonscan.NewArrayIter(tools)
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		if !isNamespace(t) {
			names = request.AppendName(names, toolName(t))
			continue
		}
		// A namespace only groups functions; the model calls the inner names.
		inner := jsonscan.NewArrayIter(jsonscan.MemberRaw(t, "tools"))
		for f, ok := inner.Next(); ok; f, ok = inner.Next() {
			names = request.AppendName(names, request.NameOrType(f))
		}
	}
	return names
}

// toolName is the name of a function or custom tool; hosted tools
// (web_search, file_search, mcp, ...) are known by type.
func toolName(tool string) string {
	o := jsonscan.ReadObject(tool, "type", "name")
	if jsonscan.IsString(o[0], "function") || jsonscan.IsString(o[0], "custom") {
		return request.FirstName(o[1])
	}
	return request.FirstName(o[0])
}

func isNamespace(tool string) bool {
	return jsonscan.IsString(jsonscan.MemberRaw(tool, "type"), "namespace")
}

// readInput reads the input items: the tools of code-mode
// additional_tools items, and the tool outputs after the last model output.
// With previous_response_id the input may hold outputs only; then all of
// them are the tail.
func readInput(names []string, input string) ([]string, []streaming.ToolResult) {
	it := jsonscan.NewArrayIter(input)
	tail := it
	for item, ok := it.Next(); ok; item, ok = it.Next() {
		typ, _ := jsonscan.StringValue(jsonscan.MemberRaw(item, "type"))
		switch {
		case typ == "additional_tools":
			names = toolNames(names, jsonscan.MemberRaw(item, "tools"))
		case isModelOutput(typ, item):
			tail = it
		}
	}
	var buf [16]request.Pending
	results := buf[:0]
	for item, ok := tail.Next(); ok; item, ok = tail.Next() {
		o := jsonscan.ReadObject(item, "type", "call_id", "id", "output")
		typ, _ := jsonscan.StringValue(o[0])
		ci, ok := callitems.Output(typ)
		if !ok {
			continue
		}
		raw := o[1]
		if ci.OutputID == "id" {
			raw = o[2]
		}
		id, _ := jsonscan.StringValue(raw)
		// A known type keeps the table's string; CopyResults copies the rest.
		results = append(results, request.Pending{ID: id, Type: ci.Output, CopyType: ci.Unknown,
			IsError: request.StatesFailure(o[3]), Digest: request.ContentDigest(o[3])})
	}
	return names, request.CopyResults(results)
}

// isModelOutput reports whether an input item of type typ replays
// something the model produced.
func isModelOutput(typ, item string) bool {
	switch {
	case typ == "reasoning", typ == "mcp_list_tools", typ == "mcp_approval_request":
		return true
	case strings.HasSuffix(typ, "_call"): // function_call, custom_tool_call, web_search_call, shell_call...
		return true
	case typ == "message", typ == "":
		return request.IsAssistantMessage(item)
	}
	return false
}

// systemTexts feeds th the instructions and the text of the leading
// system and developer messages of input.
func systemTexts(th *request.Hasher, instructions, input string) {
	if jsonscan.IsStringRaw(instructions) {
		th.Text(instructions)
	}
	it := jsonscan.NewArrayIter(input)
	for item, ok := it.Next(); ok; item, ok = it.Next() {
		o := jsonscan.ReadObject(item, "type", "role", "content")
		typ, _ := jsonscan.StringValue(o[0])
		if typ != "message" && typ != "" {
			if isModelOutput(typ, item) || strings.HasSuffix(typ, "_output") {
				return
			}
			continue // additional_tools and other items that are not messages
		}
		if !jsonscan.IsString(o[1], "system") && !jsonscan.IsString(o[1], "developer") {
			return
		}
		th.Content(o[2])
	}
}

// firstUserTexts feeds th the text of the conversation's first user
// message. With history held by the server (previous_response_id,
// conversation) the input starts at the latest turn, which changes every
// turn, so nothing is fed.
func firstUserTexts(th *request.Hasher, m *[nKeys]string) {
	conv := m[keyConversation]
	if jsonscan.IsStringValue(m[keyPreviousResponseID]) || jsonscan.IsObject(conv) || jsonscan.IsStringValue(conv) {
		return
	}
	input := m[keyInput]
	if jsonscan.IsStringRaw(input) {
		th.Text(input)
		return
	}
	it := jsonscan.NewArrayIter(input)
	for item, ok := it.Next(); ok; item, ok = it.Next() {
		o := jsonscan.ReadObject(item, "type", "role", "content")
		if (jsonscan.IsString(o[0], "message") || o[0] == "") && jsonscan.IsString(o[1], "user") {
			th.Content(o[2])
			return
		}
	}
}

// conversationID is the id of the conversation member (a string, or an
// object's id), bounded as a session hint is.
func conversationID(conv string) string {
	if jsonscan.IsObject(conv) {
		conv = jsonscan.MemberRaw(conv, "id")
	}
	return request.SessionHint(conv)
}

// firstReply reads whether input replays output of the model's, and the
// mark of its first reply (the first run of model output items): the call
// id of its first client call item, else the text of its assistant
// messages.
func firstReply(input string) (replied bool, mark string) {
	var mk request.Marker
	it := jsonscan.NewArrayIter(input)
	for item, ok := it.Next(); ok; item, ok = it.Next() {
		o := jsonscan.ReadObject(item, "type", "call_id", "content")
		typ, _ := jsonscan.StringValue(o[0])
		if !isModelOutput(typ, item) {
			if replied {
				break // the first reply ended
			}
			continue
		}
		replied = true
		if ci, ok := callitems.Lookup(typ, o[1] != ""); ok && !ci.Hosted {
			mk.Call(o[1])
		} else if typ == "message" || typ == "" {
			mk.Content(o[2])
		}
	}
	return replied, mk.Mark()
}
