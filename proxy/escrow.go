package proxy

import (
	"context"
	"errors"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/streaming"
)

// Escrow: a reply whose client tool call some gate matches is held,
// undelivered, until its approval requests are decided (proxy/internal/escrow
// owns the hold, the wait and the decision). What stays here needs the
// turn or its reply's readers: the turn's part of a hold (openHold,
// gateInput), the continuation's model call (escrow_continue.go), a
// retry's re-attachment and the non-streamed turn (escrow_retry.go), and
// the streamed turn's reader (escrow_stream.go).

// Errors of the escrow's side of admission and of the reply's reading.
var (
	// errHeldTooLarge: the reply grew past approvals.max_held_bytes.
	errHeldTooLarge = errors.New("proxy: reply too large to hold for approval")
)

// Error type of a gated call refused where no reply can carry the refusal
// (README.md, "How a held call behaves").
const errApprovalRefused = "approval_refused"

// answerError is the escrow's answer as the error apierr.Write writes; any
// other error as it is.
func answerError(err error) error {
	var a *escrow.Answer
	if !errors.As(err, &a) {
		return err
	}
	return httpAnswer(a)
}

func httpAnswer(a *escrow.Answer) *apierr.Error {
	return &apierr.Error{Code: a.Status, Type: a.Type, Msg: a.Msg, RetryAfter: a.RetryAfter, NoRetry: a.NoRetry, Err: a.Err}
}

// gateInput is what the gates judge a call of the turn's reply on,
// besides the call itself.
func (t *turn) gateInput() approvals.Input {
	return approvals.Input{Tenant: t.req.tenant.Name, Trajectory: t.recID, Stage: string(t.adm.Decision.Stage),
		BudgetUsed: t.adm.Decision.Rho, Provider: t.req.up.cfg.Name, Model: t.pr.Model}
}

// openHold holds the turn's reply rep (decoded as res) for the gated
// calls, and records the turn as held with outcome o (holdOpened).
func (t *turn) openHold(ctx context.Context, res *streaming.Result, rep escrow.Reply, gated []escrow.Gated, o outcome.Turn) (*approvals.Hold, error) {
	held := escrow.Turn{Trajectory: t.recID, Root: t.root, Thread: t.thread, Tenant: t.req.tenant.Name, Key: t.key,
		API: t.req.api, Provider: t.req.up.cfg.Name, Model: t.pr.Model, Request: t.body, Continuations: t.conts,
		Stage: t.adm.Decision.Stage, BudgetUsed: t.adm.Decision.Rho, Grant: t.req.tenant.ReadOnlyTools, Log: t.log}
	return t.s.esc.Open(ctx, held, res, rep, gated, func(approvalID string) { t.holdOpened(o, approvalID) })
}

// tenantReadOnly is a tenant's read-only grant.
func (s *Server) tenantReadOnly(name string) []string {
	for i := range s.cfg.Tenants {
		if s.cfg.Tenants[i].Name == name {
			return s.cfg.Tenants[i].ReadOnlyTools
		}
	}
	return nil
}
