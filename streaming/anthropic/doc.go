// Package anthropic is the streaming dialect of the Anthropic Messages API
// (Dialect, a streaming.Dialect). It owns:
//
//   - the stream decoder and the decoder of a whole message body
//     (decode.go): content blocks, tool_use and server tool calls, stop
//     reasons, usage including cache reads and writes, error events;
//   - the error body in the API's own format,
//     {"type":"error","error":{...}} (errors.go);
//   - the budget notice appended to a request's conversation (rewrite.go),
//     and the items that continue a reply whose calls were refused: its
//     output and one answer per call (continuation.go);
//   - the rendering of a whole message body as the stream that carries it
//     (render.go);
//   - the keepalive of a held stream: ping events until message_start went
//     out, then a message_delta that changes nothing (keepalive.go).
//
// Request reading, tool restriction, the call filter's rules, assembly and
// splicing of Anthropic replies are still done by the streaming
// root, which Dialect calls with streaming.APIAnthropic (dialect.go).
package anthropic
