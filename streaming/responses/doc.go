// Package responses is the streaming dialect of the OpenAI Responses API
// (Dialect, a streaming.Dialect). It owns:
//
//   - the stream decoder and the decoder of a whole response object
//     (decode.go): output items, the call items of every type
//     (streaming/internal/callitems), statuses, usage, error and failed
//     events;
//   - the error body in the API's own format, the OpenAI error object (errors.go);
//   - the budget notice appended to a request's conversation (rewrite.go),
//     and the items that continue a reply whose calls were refused: its
//     output and one answer per call (continuation.go);
//   - the rendering of a whole response as the stream that carries it
//     (render.go);
//   - the call filter's rules (filter.go, hold.go), run by the API-free
//     engine in streaming/internal/callfilter: a refused call item becomes
//     a message item at its output index; held items move to just before
//     the terminal event, output indices and sequence numbers following
//     the order the client gets them in;
//   - the reshaping of held replies: the response a whole stream carries
//     (assemble.go), and a held reply joined with its continuation, as a
//     stream or a body (splice.go);
//   - the keepalive of a held stream: the stream's own
//     response.in_progress event again (keepalive.go).
//
// Request reading and tool restriction are still done by the streaming
// root, which Dialect calls with streaming.APIResponses (dialect.go).
package responses
