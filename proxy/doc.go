// Package proxy is gatekeeper's agent-facing HTTP side: it reads each
// provider path in one canonical form, authenticates virtual keys, resolves which trajectory and thread a
// request belongs to, and runs each model call (a turn) through its
// lifecycle: admit, rewrite, forward, tee the reply through a stream
// decoder while it is forwarded event by event, and record the outcome.
//
// Other requests under a provider pass through, unmetered, only when an
// allowlist names them (model lists, token counting, and what config's
// providers[].passthrough adds), with the agent's virtual key swapped for
// a provider key; the rest are refused. Upstream error bodies lose every
// fragment of a provider key on the way back.
//
// A reply whose tool call an approval gate matches is held in escrow
// (escrow*.go) until its approval requests are decided, and a retry of the
// same turn, on any replica, re-attaches to it.
package proxy
