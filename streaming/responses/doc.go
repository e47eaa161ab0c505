// Package responses is the streaming dialect of the OpenAI Responses API
// (Dialect, a streaming.Dialect). It owns:
//
//   - the stream decoder and the decoder of a whole response object
//     (decode.go): output items, the call items of every type
//     (streaming/internal/callitems), statuses, usage, error and failed
//     events; the reading of an event's members, which the call filter
//     shares;
//   - the error body in the API's own format, the OpenAI error object
//     (dialect.go);
//   - the reading of a request (request.go): max_output_tokens, its tools
//     by name (those inside namespaces and code-mode additional_tools input
//     items too, hosted tools by type), the tool outputs after the last
//     model output, prompt_cache_key as the session, and what the
//     conversation's fingerprint hashes (instructions, leading system and
//     developer messages, the first user message unless the server holds
//     the history);
//   - the request rewrites (rewrite.go): the budget notice appended to
//     "input" (an input string made an array first), tools removed with
//     the tool_choice and allowed_tools entries naming them; and the items
//     that continue a reply whose calls were refused: its output and one
//     answer per call (continuation.go);
//   - the rendering of a whole response as the stream that carries it
//     (render.go);
//   - the call filter's rules (filter.go, hold.go), run by the API-free
//     engine in streaming/internal/callfilter: a refused call item becomes
//     a message item at its output index; held items move to just before
//     the terminal event, output indices and sequence numbers following
//     the order the client gets them in (the engine's Positions and Seq);
//   - the reshaping of held replies: the response a whole stream carries
//     (assemble.go), and a held reply joined with its continuation, as a
//     stream or a body (splice.go);
//   - the keepalive of a held stream: the stream's own
//     response.in_progress event again (keepalive.go).
//
// What every dialect shares of this, API-free, is in streaming/internal:
// request (request reading and rewriting), reshape, callfilter, jsonscan;
// callitems is the table of Responses call items, and openai holds what
// the two OpenAI APIs' replies share (the error object and body, usage,
// text counts, the comment keepalive).
package responses
