// Package proxy is gatekeeper's agent-facing HTTP side: it reads each
// provider path in one canonical form, authenticates virtual keys, resolves which trajectory and thread a
// request belongs to, and runs each model call (a turn) through its
// lifecycle. serveTurn reads it as named steps: read (readTurn), admit
// (admitTurn), shape (shapeBody), send (sendTurn: key capacity, then the
// one send path in send.go, shared with a held turn's continuation),
// relay (the reply decoded, filtered and held by the turn's reader,
// tee.go and escrow_stream.go, and copied to the agent by proxy/relay),
// then settle. A turn is recorded at one of two points: its hold opened
// (holdOpened) or its settle. Handlers return errors, which writeError
// alone writes, in the provider's error format.
//
// Other requests under a provider pass through, unmetered, only when an
// allowlist names them (model lists, token counting, and what config's
// providers[].passthrough adds), with the agent's virtual key swapped for
// a provider key, through httputil.ReverseProxy; the rest are refused.
// Upstream error bodies lose every fragment of a provider key on the way
// back.
//
// A reply whose tool call an approval gate matches is held in escrow
// (proxy/internal/escrow; escrow*.go here are the turn's side of it) until
// its approval requests are decided, and a retry of the same turn, on any
// replica, re-attaches to it.
//
// What the turn uses but does not need the turn for lives under
// proxy/internal: wire (the agent-facing wire: paths, virtual keys,
// bodies, headers, key redaction, request checks, the pass-through
// allowlist), threadid (run and thread ids), chainrule (the rules applied
// to a chain of records), ceiling (a tenant's ceilings), notice (the texts
// put in front of the model), settle (settle retries and the write-behind
// queue), deadline (the store deadlines), inflight (the calls in flight
// that control signals act on) and escrow (the approval escrow: gate
// matching, holds opened, found and kept, the wait for a decision and the
// agent's answer to each end, release or refusal and its continuation, the
// held reply's forms and rendering, a held stream's state, the turn key).
// keys holds the provider key pools and a call's side of their scheduling
// (grant, ride, settle, the move of a refused call to another key);
// passthrough the pass-through reverse proxy, the provider header, the
// run check of a pass-through request and the unreachable-provider error;
// sweep the heartbeats, the lost-call sweep and the idle finish; admit
// the records a call is admitted on, its tenant's reservation and its
// budget admission; shape a request's rewrites for its stage; watchdog the
// loop watchdog's checks of a request and a reply.
package proxy
