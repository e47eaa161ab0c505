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
// state (Stream). The continuation's model call is the caller's: a
// Client's Continue sends it. The stored holds themselves are read through
// proxy/internal/holds.
package escrow
