// Package anthropic is the streaming dialect of the Anthropic Messages API
// (Dialect, a streaming.Dialect). It owns:
//
//   - the stream decoder and the decoder of a whole message body
//     (decode.go): content blocks, tool_use and server tool calls, stop
//     reasons, usage including cache reads and writes, error events;
//   - the error body in the API's own format,
//     {"type":"error","error":{...}} (errors.go);
//   - the reading of a request (request.go): max_tokens, its tools by name
//     (server tools too, else by type), the tool_result blocks answering the
//     previous reply, Claude Code's session in metadata.user_id, and what
//     the conversation's fingerprint hashes (the system prompt less Claude
//     Code's billing line, the first user message);
//   - the request rewrites (rewrite.go): the budget notice appended to the
//     conversation, tools removed with the tool_choice naming them; and the
//     items that continue a reply whose calls were refused: its output and
//     one answer per call (continuation.go);
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
// What every dialect shares of this, API-free, is in streaming/internal:
// request (request reading and rewriting), reshape, callfilter, jsonscan.
package anthropic
