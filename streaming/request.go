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
	MaxOutputField  string // "max_tokens", "max_completion_tokens" or "max_output_tokens"; "" when none
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
	// SessionHint is the client's own session id when the body carries one:
	// Anthropic metadata.user_id (its session_id when it is a JSON object,
	// else the whole value), Responses prompt_cache_key. "" otherwise.
	SessionHint string
}

// ErrNoConversation is returned by a dialect's AppendNotice and
// Continuation when the body has no conversation array to append to.
var ErrNoConversation = errors.New("streaming: request has no conversation array")

// ErrNoToolResult is returned by a dialect's Continuation when a call of
// the reply has no result and there is no default one.
var ErrNoToolResult = errors.New("streaming: no result for a tool call")
