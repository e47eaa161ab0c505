// Package mockprovider is a scripted fake model provider. It answers the
// Anthropic Messages API, the OpenAI Chat Completions and Responses APIs
// and the Gemini API (gemini.go) with the providers' exact wire formats, streaming and not, so that the
// official SDKs, real agents (Claude Code, Codex) and gatekeeper itself can
// be driven end to end without a network or a key.
//
// It owns:
//
//   - the routes a provider serves (turns, count_tokens, models, HEAD) and
//     their request validation, authentication and error bodies;
//   - the turn a request gets, chosen in this order: the X-Mock-Turn header
//     (a TurnSpec as JSON, or a turn name; with first_only it skips
//     requests that end in tool results); a "mock:<name>" directive in the
//     user message that ends the conversation; the Script's rules; a default
//     that echoes the prompt ("You said: ...") or, after tool results,
//     answers "Done: ..." so that an agent loop ends;
//   - rendering a turn (text, tool calls, truncation, refusal, thinking,
//     errors in the stream or as HTTP statuses, cut connections, slow
//     streams) into each API's event stream or JSON body, with realistic ids,
//     headers and usage (about one token per four bytes), compressed in the
//     turn's encoding (gzip, deflate, br, zstd) or broken on purpose;
//   - optionally (Options.RateLimit), a provider's rate limits per key:
//     token buckets of requests, input and output tokens that answer 429
//     with retry-after above them and report their levels in the
//     providers' rate-limit headers, with counts for tests (RateCounts);
//   - a record of the requests it received (RecordedRequest): key, body,
//     when each event was flushed, whether the client went away.
//
// Randomness (ids, fragment boundaries, padding) comes from Options.Rand,
// timestamps from Options.Clock and waits from Options.Sleep, so a seeded
// server replies byte for byte the same and tests step streams without
// sleeping.
package mockprovider
