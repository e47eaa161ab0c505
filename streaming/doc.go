// Package streaming understands the replies and requests of the model
// providers' APIs while gatekeeper forwards them byte for byte.
//
// It owns three things:
//
//   - Reader, one incremental server-sent-events reader (WHATWG event-stream
//     rules) that hands back every event's raw bytes with its fields, so a
//     caller can forward or hold exactly what came in;
//   - a Decoder per API (Anthropic Messages, OpenAI Chat Completions, OpenAI
//     Responses) that turns those events into a small normalized set of Parts
//     and accumulates a Result: stop reason, tool calls, usage, errors;
//   - request readers (ParseRequest) that pick the model, the stream flag,
//     the output limit, the declared tools and the tool results out of a raw
//     request body without unmarshalling it.
//
// The package is pure: it does no I/O of its own and imports nothing from the
// rest of gatekeeper.
package streaming
