package proxy

import (
	"context"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/streaming"
)

// Escrow: a reply whose client tool call some gate matches is held,
// undelivered, until its approval requests are decided (proxy/internal/escrow
// owns the hold, the wait and the decision). What stays here needs the
// turn or its reply's readers: the turn's part of a hold (openHold,
// gateInput, gatedCalls), the continuation's admission and its side of
// the model call (escrow_continue.go), a retry's re-attachment and the
// non-streamed turn's side of its hold (escrow_retry.go); the streamed
// turn's side is in its reply body (proxy/internal/replybody).

// gateInput is what the gates judge a call of the turn's reply on,
// besides the call itself.
func (t *turn) gateInput() approvals.Input {
	return approvals.Input{Tenant: t.req.tenant.Name, Trajectory: t.recID, Stage: string(t.adm.Decision.Stage),
		BudgetUsed: t.adm.Decision.Rho, Provider: t.req.up.cfg.Name, Model: t.pr.Model}
}

// gatedCalls is the calls of the turn's reply res that some gate matches.
//
// A reply the call filter forwarded rewritten into one reading (it
// repeated a member) is ambiguous even when res was decoded from what the
// filter forwarded, which repeats nothing.
func (t *turn) gatedCalls(res *streaming.Result) []escrow.Gated {
	if t.filter != nil && t.filter.Ambiguous() {
		res.Ambiguous = true
	}
	return t.req.rules.esc.Gated(res, t.gateInput(), t.withheld)
}

// openHold holds the turn's reply rep (decoded as res) for the gated
// calls, and records the turn as held with outcome o (holdOpened).
func (t *turn) openHold(ctx context.Context, res *streaming.Result, rep escrow.Reply, gated []escrow.Gated, o outcome.Turn) (*approvals.Hold, error) {
	t.linkRun(res)
	held := escrow.Turn{Trajectory: t.recID, Root: t.root, Thread: t.thread, Tenant: t.req.tenant.Name, Key: t.turnHash,
		API: t.req.api, Provider: t.req.up.cfg.Name, Model: t.pr.Model, Request: t.body, Continuations: t.conts,
		Stage: t.adm.Decision.Stage, BudgetUsed: t.adm.Decision.Rho, Grant: t.req.tenant.ReadOnlyTools, Log: t.log}
	return t.req.rules.esc.Open(ctx, held, res, rep, gated, func(approvalID string) { t.holdOpened(o, approvalID) })
}
