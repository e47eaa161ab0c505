// Package streaming understands the replies and requests of the model
// providers' APIs while gatekeeper forwards them byte for byte.
//
// Each API is a dialect: a package below this one whose Dialect value
// (anthropic.Dialect, chat.Dialect, responses.Dialect, gemini.Dialect) satisfies the
// Dialect interface declared here (dialect.go). The proxy binds one per
// request from its table of APIs and calls nothing else per API.
//
// The root owns:
//
//   - the vocabulary of a reply and a request: API, Result, Stop and
//     StopReason, ToolCall, Usage, ProviderError (types.go), Request and
//     ToolResult, ErrNoConversation and ErrNoToolResult (request.go),
//     Extras (extras.go), and the Dialect, Decoder and Keepalive
//     interfaces;
//   - the call filter: CallFilter withholds refused client tool calls
//     from a reply as it streams, and with Hold buffers every client call
//     until the reply's stop shows it whole (filter.go, filter_cut.go,
//     hold.go hold its contract); it wraps the engine of a dialect
//     (FilterEngine), internal/callfilter run by the API's own rules;
//   - what is not one API's: Chat's stream_options rewrite (usage.go,
//     which the proxy applies where its table says a stream must ask for
//     usage); the contract of the reshaping of held replies (escrow.go);
//     CheckRendered, which reads a rendered stream back with its dialect's
//     decoder (render.go); CallDigest (digest.go).
//
// Nothing here branches on the API: each request is read and rewritten by
// its dialect (request.go, rewrite.go of each dialect package).
//
// Below it, besides the dialects: sse (the Reader and event framing),
// internal/jsonscan (the one JSON scanner and editor), internal/callfilter
// (the call filter's engine, API-free), internal/request (what reading and
// rewriting a request shares: the top-level walk, tool results, the
// fingerprint's hashing, the append to a conversation, the restrict
// engine, the continuation), internal/reshape (what the reshaping of
// whole replies shares: a reply object, a stream's events, usage summed),
// internal/callitems (the Responses call-item table) and internal/openai
// (what the two OpenAI APIs share in their replies).
//
// The tree is pure: it does no I/O of its own and imports nothing from the
// rest of gatekeeper (internal/purity checks it).
//
// What the client gets of a streamed reply through a CallFilter is, at every
// moment, a prefix of the bytes the provider sent, but for the filter's
// deliberate edits: a refused or withheld call (its events replaced by a
// text or removed, and what refers to its place renumbered), an event
// whose JSON repeats a member (rewritten into the one reading gatekeeper
// and the agent then share: ValidJSON, Unrepeated) and, from the
// proxy, usage it asked for on the agent's behalf and strips and its own
// keepalives while a reply is held. Once a call is held (Hold), everything
// after its first event is held too, and released in the provider's order
// when no call before it is held any more: nothing overtakes a held call.
package streaming
