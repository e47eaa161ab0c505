// Package gemini is the streaming dialect of the Gemini API's
// generateContent and streamGenerateContent?alt=sse (Dialect, a
// streaming.Dialect). It owns:
//
//   - the stream decoder and the decoder of a whole GenerateContentResponse
//     (decode.go): candidates' text, thought and functionCall parts, the
//     finishReason (STOP with a call is a stop for tool use), usageMetadata
//     (the last report wins), error objects; the id of a call that names
//     none, derived from the reply's responseId and the call's place
//     (CallID);
//   - the error body in the API's own format, google.rpc.Status, and the
//     keepalive of a held stream, a chunk that changes nothing (errors.go);
//   - the reading of a request (request.go): generationConfig's output
//     limit, its function declarations and other tools by name, the
//     functionResponse parts answering the previous reply, what the
//     conversation's fingerprint hashes;
//   - the request rewrites (rewrite.go): the budget notice appended to
//     contents, tools removed (and toolConfig's names of them), the
//     contents that continue a reply whose calls were refused;
//   - the call filter's rules (filter.go): refused functionCall parts
//     replaced by a text part, held calls waiting for the finishReason;
//   - the reshaping of held replies (reshape.go): the body a stream
//     carries, the stream of a body, a reply joined with its continuation.
//
// The model and whether a reply streams are in a Gemini request's path,
// not its body: the proxy reads them there.
package gemini
