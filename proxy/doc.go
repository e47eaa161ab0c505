// Package proxy is gatekeeper's agent-facing HTTP side: it reads each
// provider path in one canonical form, authenticates virtual keys, resolves
// which trajectory and thread a request belongs to, and runs each model call
// (a turn) through its lifecycle. serveTurn reads it as named steps: read
// (readTurn), admit (admitTurn), shape (shapeBody), send (sendTurn: key
// capacity, then the one send path in send.go, shared with a held turn's
// continuation), relay (the reply decoded, filtered and held by its reply
// body, proxy/internal/replybody, with the turn's side in reply.go, and copied
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
//
// # Words
//
// Each word below has one meaning in this package and those under it;
// the other things it could name go by the longer name given.
//
//   - hold: an approval hold (approvals.Hold): a reply kept, undelivered,
//     until its approval requests are decided (escrow.Keeper). The call
//     filter's keeping back of tool calls until a reply's stop shows them
//     whole is withholding (streaming.CallFilter's Hold, Withheld); a
//     share of a tenant's ceilings taken before a call is a reservation
//     (ceiling), released at its settle.
//   - key: a provider key, gatekeeper's credential at a provider (keys,
//     passthrough.ProviderHeader). The agent's credential is its virtual
//     key (tenants[].keys), never forwarded; a person's sign-in token
//     stands in for one. The hash that finds a held turn again on a retry
//     is the turn hash (escrow.TurnKey, turn.turnHash); the label that
//     tells a conversation's threads apart is the thread key.
//   - turn: one model call, admitted, sent, relayed and settled; a run
//     (trajectory) is the record its turns are charged to.
//   - settle: the write that records a turn's outcome and charge, at once
//     or behind the reply (settle.Behind).
//   - dialect: what gatekeeper reads of one provider API, its table row a
//     dialect.Spec (dialect.Of).
package proxy
