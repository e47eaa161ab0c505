// Package streaming understands the replies and requests of the model
// providers' APIs while gatekeeper forwards them byte for byte. It knows
// three APIs (API: Anthropic Messages, OpenAI Chat Completions, OpenAI
// Responses); every exported function takes the API it works on.
//
// It owns:
//
//   - the vocabulary of a reply: Result, Stop and StopReason, ToolCall,
//     Usage, ProviderError (types.go);
//   - a Decoder per API (anthropic.go, chat.go, responses.go) that reads a
//     reply's events as the sse package splits them and accumulates its
//     Result, and DecodeJSON for a reply that was not streamed;
//   - ParseRequest (request.go), which picks the model, the stream flag,
//     the output limit, the declared tools, the tool results and the
//     conversation's fingerprint (fingerprint.go) out of a raw request body
//     without unmarshalling it;
//   - request rewrites that change only what they must: AppendNotice and
//     RestrictTools (rewrite.go), EnsureIncludeUsage and, on the reply,
//     StripUsage (usage.go);
//   - CallFilter (filter*.go), which withholds refused client tool calls from
//     a reply as it streams, and with Hold buffers every client call until
//     the reply's stop shows it whole (hold*.go);
//   - the reshaping of whole replies the proxy holds for an approval:
//     AssembleJSON and RenderSSE (a stream into a body and back),
//     Continuation (the request that answers refused calls), SpliceStream
//     and SpliceJSON (the two replies joined into one) in escrow.go,
//     assemble.go, render.go, continuation.go and splice.go;
//   - one JSON scanner that reads members and values in place (jsonscan.go).
//
// What the client gets of a streamed reply through a CallFilter is, at every
// moment, a prefix of the bytes the provider sent, but for the filter's
// deliberate edits: a refused or withheld call (its events replaced by a
// text or removed, and what refers to its place renumbered) and, from the
// proxy, usage it asked for on the agent's behalf and strips and its own
// keepalives while a reply is held. Once a call is held (Hold), everything
// after its first event is held too, and released in the provider's order
// when no call before it is held any more: nothing overtakes a held call.
//
// The package is pure: it does no I/O of its own and imports nothing from the
// rest of gatekeeper but its sse subpackage.
package streaming
