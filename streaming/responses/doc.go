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
//   - the keepalive of a held stream: the stream's own
//     response.in_progress event again (keepalive.go).
//
// Request reading, tool restriction, the call filter's rules, assembly and
// splicing of Responses replies are still done by the streaming
// root, which Dialect calls with streaming.APIResponses (dialect.go).
package responses
