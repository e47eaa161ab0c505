// Package chat is the streaming dialect of the OpenAI Chat Completions API
// and the providers compatible with it (Dialect, a streaming.Dialect). It
// owns:
//
//   - the stream decoder and the decoder of a whole chat.completion body
//     (decode.go): choices, tool_calls and legacy function_call, finish
//     reasons, usage, error objects and events;
//   - the error body in the API's own format, the OpenAI error object (errors.go);
//   - the budget notice appended to a request's conversation (rewrite.go),
//     and the items that continue a reply whose calls were refused: its
//     output and one answer per call (continuation.go);
//   - the rendering of a whole completion as the stream that carries it
//     (render.go);
//   - the call filter's rules (filter.go, hold.go), run by the API-free
//     engine in streaming/internal/callfilter: refused tool_calls elements
//     removed, the others renumbered, the refusal given as content; held
//     elements wait for their choice's finish_reason;
//   - the reshaping of held replies: the completion a whole stream carries
//     (assemble.go), and a held reply joined with its continuation, as a
//     stream or a body (splice.go);
//   - the keepalive of a held stream: an SSE comment, since no chunk
//     leaves every SDK's completion unchanged (keepalive.go).
//
// Request reading and tool restriction are still done by the streaming
// root, which Dialect calls with streaming.APIChat (dialect.go).
package chat
