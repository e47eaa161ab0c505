// Package chat is the streaming dialect of the OpenAI Chat Completions API
// and the providers compatible with it (Dialect, a streaming.Dialect). It
// owns:
//
//   - the stream decoder and the decoder of a whole chat.completion body
//     (decode.go): choices, tool_calls and legacy function_call, finish
//     reasons, usage, error objects and events; the keying of tool_calls
//     elements that the decoder and the call filter share (calls.go);
//   - the error body in the API's own format, the OpenAI error object
//     (dialect.go);
//   - the reading of a request (request.go): max_completion_tokens (else
//     max_tokens), stream_options.include_usage, its tools by name (custom
//     and legacy functions too), the tool messages answering the previous
//     reply (failed when they state a non-zero exit code), and what the
//     conversation's fingerprint hashes (the leading system and developer
//     messages, the first user message);
//   - the request rewrites (rewrite.go): the budget notice appended to the
//     conversation, tools removed with the tool_choice, allowed_tools
//     entries and legacy function_call naming them; and the items that
//     continue a reply whose calls were refused: its output and one answer
//     per call (continuation.go);
//   - the rendering of a whole completion as the stream that carries it
//     (render.go);
//   - the call filter's rules (filter.go, hold.go), run by the API-free
//     engine in streaming/internal/callfilter: refused tool_calls elements
//     removed, the others renumbered, the refusal given as content; held
//     elements wait for their choice's finish_reason;
//   - the reshaping of held replies: the completion a whole stream carries
//     (assemble.go), and a held reply joined with its continuation, as a
//     stream or a body (splice.go);
//   - the keepalive of a held stream: internal/openai's SSE comment, since
//     no chunk leaves every SDK's completion unchanged (dialect.go).
//
// What every dialect shares of this, API-free, is in streaming/internal:
// request (request reading and rewriting), reshape, callfilter, jsonscan;
// openai holds what the two OpenAI APIs' replies share (the error object
// and body, usage, text counts, the comment keepalive). Asking a stream for
// its usage (stream_options) is still the root's (streaming/usage.go).
package chat
