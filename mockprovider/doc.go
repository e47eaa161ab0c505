// Package mockprovider is a scripted fake model provider. It answers the
// Anthropic Messages API and the OpenAI Chat Completions and Responses APIs
// with the providers' exact wire formats, streaming and not, so that the
// official SDKs, real agents (Claude Code, Codex) and gatekeeper itself can
// be driven end to end without a network or a key.
//
// It owns:
//
//   - the routes a provider serves (turns, count_tokens, models, HEAD) and
//     their request validation, authentication and error bodies;
//   - the turn a request gets: an X-Mock-Turn header, a "mock:<name>"
//     directive in the last user message, a Script's rules, or a default
//     that lets an agent loop finish;
//   - rendering a turn (text, tool calls, truncation, refusal, thinking,
//     errors in the stream or as HTTP statuses, broken connections, slow
//     streams) into each API's event stream or JSON body, with realistic ids
//     and usage;
//   - a record of every request it received (RecordedRequest), including
//     when each event was flushed and whether the client went away.
//
// Randomness (ids, fragment boundaries, padding) comes from Options.Rand
// and timestamps from Options.Clock, so a seeded server replies byte for
// byte the same.
package mockprovider
