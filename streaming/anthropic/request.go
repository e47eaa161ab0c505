package anthropic

import (
	"strings"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// Reading a Messages request: its output limit max_tokens, its tools by
// name, the tool_result blocks answering the previous reply, Claude Code's
// session, and what the conversation's fingerprint hashes of it.

// The top-level members ParseRequest reads, in keys' order.
var keys = request.Keys("max_tokens", "tools", "messages", "metadata", "system")

const (
	keyMaxTokens = request.Stream + 1 + iota
	keyTools
	keyMessages
	keyMetadata
	keySystem
	nKeys
)

// billingPrefix starts the system block Claude Code rewrites on every
// request; a fingerprint that included it would change every turn.
const billingPrefix = "x-anthropic-billing-header"

// typeToolResult is kept as a constant so that ToolResult.Type never
// points into a request body.
const typeToolResult = "tool_result"

// ParseRequest reads a Messages request body. It fails with an error
// wrapping streaming.ErrInvalidJSON when body is not a JSON object.
// Members of the wrong JSON type are taken as absent. Tools are named by
// name (server tools too), else by type; SessionHint is the session part
// of metadata.user_id.
//
// The body is neither unmarshalled nor copied, and the Request shares no
// memory with it: the caller may reuse body once ParseRequest returns.
func (Dialect) ParseRequest(body []byte) (*streaming.Request, error) {
	var m [nKeys]string
	req, _, err := request.Read(streaming.APIAnthropic, body, keys, m[:])
	if err != nil {
		return nil, err
	}
	request.SetMaxOutput(req, "max_tokens", m[keyMaxTokens])
	var refs [32]string // names pointing into the body, copied out at the end
	names := refs[:0]
	it := jsonscan.NewArrayIter(m[keyTools])
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		names = request.AppendName(names, request.NameOrType(t))
	}
	req.ToolResults = toolResults(m[keyMessages])
	req.SessionHint = claudeSession(m[keyMetadata])
	req.Replied, req.FirstReply = firstReply(m[keyMessages])
	req.Tools = request.CloneStrings(names)
	req.Fingerprint = request.Fingerprint(streaming.APIAnthropic,
		func(th *request.Hasher) { systemTexts(th, m[keySystem]) },
		func(th *request.Hasher) { th.FirstUserContent(m[keyMessages]) },
		req.Tools)
	return req, nil
}

// toolResults reads the tool_result blocks of the user messages after the
// last assistant message.
func toolResults(messages string) []streaming.ToolResult {
	var buf [16]request.Pending
	tail := buf[:0]
	it := request.After(messages, request.IsAssistantMessage)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		o := jsonscan.ReadObject(msg, "role", "content")
		if !jsonscan.IsString(o[0], "user") {
			continue // Claude Code's mid-conversation role "system" messages
		}
		blocks := jsonscan.NewArrayIter(o[1])
		for blk, ok := blocks.Next(); ok; blk, ok = blocks.Next() {
			b := jsonscan.ReadObject(blk, "type", "tool_use_id", "is_error", "content")
			if jsonscan.IsString(b[0], typeToolResult) {
				id, _ := jsonscan.StringValue(b[1])
				tail = append(tail, request.Pending{ID: id, Type: typeToolResult, IsError: b[2] == "true",
					Digest: request.ContentDigest(b[3])})
			}
		}
	}
	return request.CopyResults(tail)
}

// systemTexts feeds th the system prompt: the system string or its text
// blocks, without Claude Code's billing line.
func systemTexts(th *request.Hasher, system string) {
	if jsonscan.IsStringRaw(system) {
		th.Text(system)
		return
	}
	it := jsonscan.NewArrayIter(system)
	for blk, ok := it.Next(); ok; blk, ok = it.Next() {
		o := jsonscan.ReadObject(blk, "type", "text")
		if jsonscan.IsString(o[0], "text") && !jsonscan.HasPrefixDecoded(o[1], billingPrefix) {
			th.Text(o[1])
		}
	}
}

// claudeSession reads Claude Code's session id out of metadata.user_id:
// a string holding a JSON object with a session_id (Claude Code today),
// or "user_<hash>_account_<uuid>_session_<uuid>" (its older form). Any
// other user_id names a user or a device, not a session: grouping every
// session of that user into one run would be wrong, so it is none.
func claudeSession(metadata string) string {
	if !jsonscan.IsObject(metadata) {
		return ""
	}
	uid, ok := jsonscan.StringValue(jsonscan.MemberRaw(metadata, "user_id"))
	if !ok || uid == "" {
		return ""
	}
	var sid string
	if request.CheckObject(uid, 0) == nil {
		sid, _ = jsonscan.StringValue(jsonscan.MemberRaw(uid, "session_id"))
	} else if i := strings.LastIndex(uid, sessionMarker); i >= 0 {
		sid = uid[i+len(sessionMarker):]
	}
	if len(sid) > streaming.MaxSessionHint {
		return ""
	}
	return strings.Clone(sid)
}

// sessionMarker precedes the session id in Claude Code's older user_id.
const sessionMarker = "_session_"

// firstReply reads whether messages replay a reply of the model's, and the
// mark of the first: its first tool_use block's id, else its text blocks.
func firstReply(messages string) (replied bool, mark string) {
	it := jsonscan.NewArrayIter(messages)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		o := jsonscan.ReadObject(msg, "role", "content")
		if !jsonscan.IsString(o[0], "assistant") {
			continue
		}
		var mk request.Marker
		if jsonscan.IsStringRaw(o[1]) {
			mk.Text(o[1])
			return true, mk.Mark()
		}
		blocks := jsonscan.NewArrayIter(o[1])
		for blk, ok := blocks.Next(); ok; blk, ok = blocks.Next() {
			b := jsonscan.ReadObject(blk, "type", "id", "text")
			switch {
			case jsonscan.IsString(b[0], "tool_use"):
				mk.Call(b[1])
			case jsonscan.IsString(b[0], "text"):
				mk.Text(b[2])
			}
		}
		return true, mk.Mark()
	}
	return false, ""
}
