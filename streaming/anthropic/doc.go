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
//   - the call filter's rules (filter.go), run by the API-free engine in
//     streaming/internal/callfilter: a refused tool_use block becomes a text
//     block at its index, a held one waits for the message_delta with the
//     stop, block indices close the gap a dropped block leaves;
//   - the reshaping of held replies: the Message a whole stream carries
//     (assemble.go), and a held reply joined with its continuation, as a
//     stream or a body (splice.go);
//   - the keepalive of a held stream: ping events until message_start went
//     out, then a message_delta that changes nothing (keepalive.go).
//
// Request reading and tool restriction are still done by the streaming
// root, which Dialect calls with streaming.APIAnthropic (dialect.go).
package anthropic
