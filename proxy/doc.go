// Package proxy is gatekeeper's agent-facing HTTP side: it routes each
// provider path, authenticates the agent, resolves which trajectory and
// thread a request belongs to, and runs each model call (a turn) through
// its lifecycle: admit against the chain's budgets and the tenant's
// ceilings, rewrite, forward, tee the reply through a stream decoder while
// it is forwarded event by event, and settle the outcome. It also holds
// the approval escrow (escrow*.go): a reply whose tool call an approval
// gate matches is held until its approval requests are decided, and a
// retry of the same turn, on any replica, re-attaches to it. Other
// requests under a provider pass through, unmetered, only when the
// allowlist names them.
//
// What the turn uses but does not need the turn for lives under
// proxy/internal: wire (the agent-facing wire: paths, virtual keys,
// bodies, headers, key redaction, request checks, the pass-through
// allowlist), threadid (run and thread ids), chainrule (the rules applied
// to a chain of records), ceiling (a tenant's ceilings), notice (the texts
// put in front of the model), settle (settle retries and the write-behind
// queue), deadline (the store deadlines), inflight (the calls in flight
// that control signals act on) and holds (the escrow's stored holds).
package proxy
