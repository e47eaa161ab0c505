// Package escrow owns the approval escrow: a reply whose client tool call
// some gate matches is held, undelivered, until its approval requests are
// decided. The reply is kept whole in an approvals.Hold keyed by the
// turn's content (TurnKey), so that a retry of the same turn, on any
// replica, re-attaches to it instead of calling the model again.
//
// It owns matching a reply's calls against the gates (Gated), opening and
// storing a hold (Open), finding a turn's hold for a retry (Find), the one
// wait for a decision with its typed ends (Await, AwaitJSON) and the
// agent's answer to each (Awaited.Answer), deciding a hold (release, or
// refusal answered by the model's continuation or by a text that ends the
// turn), the reply and its forms (Reply, Render), and a held stream's
// state (Stream). It judges whole replies: a non-streamed turn's, held
// and decided before any of it goes out (HoldJSON), and the continuation
// after refused calls (Continue), read whole and then settled, failed or
// held again; it writes a retry's answer in either form (WriteRetryJSON,
// WriteRetryStream). The turn itself stays the caller's: its gate input
// and the recording of its turn (Opener), and the continuation's
// admission and model call (a Client's Continue, and Call).
//
// Its reading and bookkeeping of stored holds, over the approvals store
// (holds.go, legacy.go): a turn's latest hold and the hold a
// continuation's hold follows (holds stored before a hold recorded its
// place in its turn's chain included), a hold's requests and whether all
// are decided, the release re-check of approved calls against the held
// reply, approvals turned stale, a hold's end, and the texts and tool
// results of refused calls.
package escrow
