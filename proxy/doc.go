// Package proxy is gatekeeper's agent-facing HTTP side: it reads each
// provider path in one canonical form, authenticates virtual keys, resolves
// which trajectory and thread a request belongs to, and runs each model call
// (a turn) through its lifecycle. serveTurn reads it as named steps: read
// (readTurn), admit (admitTurn), shape (shapeBody), send (sendTurn: key
// capacity, then the one send path in send.go, shared with a held turn's
// continuation), relay (the reply decoded, filtered and held by its reply
// body, proxy/internal/replybody, with the turn's side in tee.go, and copied
// to the agent by proxy/relay), then settle. A turn is recorded at one of two
// points: its hold opened (holdOpened) or its settle. Handlers return errors,
// which apierr.Write alone writes, in the provider's error format.
//
// Other requests under a provider pass through, unmetered, only when an
// allowlist names them (model lists, token counting, and what config's
// providers[].passthrough adds), with the agent's virtual key swapped for
// a provider key, through httputil.ReverseProxy; the rest are refused.
// Upstream error bodies lose every fragment of a provider key on the way
// back.
//
// What the config decides of a request (tenants and their keys, providers
// and their key pools, prices, budget stages, gates, limits, the watchdog)
// is one rules value, read once when the request arrives and kept to its
// end; Reload swaps in a new one for the requests after it.
//
// A reply whose tool call an approval gate matches is held in escrow
// (proxy/internal/escrow; escrow*.go here are the turn's side of it) until
// its approval requests are decided, and a retry of the same turn, on any
// replica, re-attaches to it.
//
// This package keeps the turn's spine: its steps, its state, and the small
// adapters through which the packages under proxy/internal act on it. What
// the turn uses but does not need the turn for lives there, each package's
// doc.go saying what it owns: dialect (the one table of the turn APIs),
// apierr (the agent's error form and its one writer), wire, threadid,
// chainrule, ceiling, notice, settle, deadline, inflight, admit (the
// records a call is admitted on, its tenant's reservation, its admission
// on its chain and the waits between attempts), shape, watchdog, outcome
// (what a reply comes to and the rules of its settle), replybody (the
// reply bodies the agent reads), escrow, keys, passthrough and sweep.
package proxy
