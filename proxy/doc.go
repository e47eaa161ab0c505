// Package proxy is gatekeeper's agent-facing HTTP side: it routes provider
// paths, authenticates virtual keys, resolves which trajectory and thread a
// request belongs to, and runs each model call (a turn) through its
// lifecycle: admit, rewrite, forward, tee the reply through a stream
// decoder while it is forwarded event by event, and record the outcome.
//
// Everything else under a provider (model lists, token counting, files)
// passes through with the agent's virtual key swapped for a provider key.
package proxy
