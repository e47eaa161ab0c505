package streaming

import "errors"

// ToolResult is one tool result a request carries for a call of the previous reply.
type ToolResult struct {
	ID   string // tool_use_id (Anthropic), tool_call_id (Chat), call_id (Responses)
	Type string // "tool_result", "tool", or the Responses output item type ("function_call_output", "shell_call_output"...)
	// IsError is Anthropic's is_error; for Chat and Responses, a content
	// that states a non-zero exit code (a "Exit code: N" header line, an
	// exit_code member).
	IsError bool
	// Digest is xxhash64 of the content's raw JSON value (content,
	// output), 0 when it is empty: equal results digest equal.
	Digest uint64
}

// Request is what gatekeeper needs to know of one turn request, as a
// dialect's ParseRequest reads it.
type Request struct {
	API             API
	Model           string
	Stream          bool
	MaxOutputTokens int64  // 0 when the request sets none
	MaxOutputField  string // "max_tokens", "max_completion_tokens" or "max_output_tokens"; Gemini: the limit's path in its config (see gemini.Dialect.ParseRequest); "" when none
	IncludeUsage    bool   // Chat: stream_options.include_usage is true
	// Tools are the names of the declared tools in order (hosted and server
	// tools: their name, else their type).
	Tools []string
	// ToolResults are the results after the last assistant output of the
	// conversation: the answers to the previous reply's calls.
	ToolResults []ToolResult
	// Fingerprint identifies the conversation: hex SHA-256 (first 16 bytes)
	// of its stable prefix (API, system prompt, first user message, tool set).
	Fingerprint string
	// SessionHint is the client's own session id when the body carries one
	// (at most MaxSessionHint bytes): the session part of Anthropic
	// metadata.user_id (the session_id of the JSON object it holds, or
	// what follows "_session_" in Claude Code's older form), Chat and
	// Responses prompt_cache_key, Responses conversation. "" otherwise.
	SessionHint string
	// Replied says the conversation is past its first turn: it replays a
	// reply of the model's (an assistant message, a model output item) or
	// names history the provider keeps (previous_response_id,
	// conversation).
	Replied bool
	// FirstReply is the mark of the model's first reply the conversation
	// replays (SignatureMark of its first call part's thought signature,
	// Gemini; else CallMark of its first client tool call, else TextMark of
	// its text); "" when there is none.
	FirstReply string
}

// ErrNoConversation is returned by a dialect's AppendNotice and
// Continuation when the body has no conversation array to append to.
var ErrNoConversation = errors.New("streaming: request has no conversation array")

// ErrNoToolResult is returned by a dialect's Continuation when a call of
// the reply has no result and there is no default one.
var ErrNoToolResult = errors.New("streaming: no result for a tool call")
