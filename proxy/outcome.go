package proxy

import (
	"context"
	"time"

	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming"
)

// Recording a turn: its outcome (package outcome), charged to its thread
// record and the record's ancestors once, when the reply ends (or fails).

// failed settles a turn that produced no reply the decoder saw. It is a
// no-op once the turn was recorded.
func (t *turn) failed(err error) {
	t.settle(outcome.Failed(err, t.clientGone(), int64(len(t.body))))
}

// settle records the turn's outcome: one of the two points where a turn
// is recorded, the other being holdOpened. Only the first of them
// records; what comes after a recorded turn (a reply body closed after
// its end, a late failure) changes nothing. A turn runs on its request's
// goroutine, and so do its records: no lock is needed.
func (t *turn) settle(o outcome.Turn) {
	if t.recorded {
		return
	}
	t.recorded = true
	t.record(o)
}

// holdOpened records a turn whose reply is held for approval (openHold):
// charged, its calls pending on approvalID, the record AWAITING_APPROVAL.
func (t *turn) holdOpened(o outcome.Turn, approvalID string) {
	o.ApprovalID = approvalID
	t.settle(o)
}

// record writes the turn's outcome to its thread record (through behind.go
// on Redis, or at once), with the request's context detached from its
// cancellation: a turn whose client went away is still charged, in the
// turn's span and with the request's values.
func (t *turn) record(o outcome.Turn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 10*time.Second)
	defer cancel()
	t.write(ctx, o)
}

func (t *turn) write(ctx context.Context, o outcome.Turn) {
	now := t.s.now()
	model := o.Ran(t.pr.Model)
	charge := o.Price(t.req.rules.prices, model)
	data := o.EventData(t.adm.Call, model, t.req.up.cfg.Name, now.Sub(t.started), charge)
	shape.Note(&data, t.adm.Decision.Stage, t.removed, t.loop.Step)
	defer t.endSpan(o, charge)
	// t.log names the trajectory.
	p := t.pendingSettle(o, charge, data, now)
	if !t.gated && t.s.behind.Add(p) {
		// Written behind the reply (behind.go). A gated tenant's turns
		// settle at once: a held reply's record must be waiting for its
		// approval before the agent can ask again.
		return
	}
	p.Sides(ctx)
	p.Write(ctx)
}

// settleRules is what the settle's rules read of the turn, read when the
// settle is applied: an operator's cancel may have come since its reply
// ended.
func (t *turn) settleRules() outcome.Settle {
	return outcome.Settle{Call: t.adm.Call, ToolDeadline: t.req.rules.cfg.Limits.ToolDeadline.Std(),
		MaxTruncations: t.req.tenant.MaxTruncations, Watchdog: t.req.rules.cfg.WatchdogFor(t.req.tenant),
		Stages: t.req.rules.stages, Canceled: t.stopReason() == outcome.Canceled}
}

// chargeUndelivered records a reply the provider produced, and billed,
// that the agent does not get (it could not be checked or held).
func (t *turn) chargeUndelivered(res *streaming.Result, replyBytes int64, cause error) {
	t.settle(outcome.Undelivered(res, int64(len(t.body)), replyBytes, cause))
}

// outcomeOf turns a decoded reply into an outcome.
func (t *turn) outcomeOf(res *streaming.Result, status int, cause error) outcome.Turn {
	return outcome.Of(t.outcomeFacts(), res, status, cause)
}

// outcomeFacts is what the turn knows of its call that its outcome reads.
func (t *turn) outcomeFacts() outcome.Facts {
	f := outcome.Facts{ClientGone: t.clientGone(), BodyBytes: int64(len(t.body)), Extras: t.extras,
		Watchdog: t.req.rules.cfg.WatchdogFor(t.req.tenant), Proposed: t.proposed, Stopped: t.stopReason()}
	if t.filter != nil {
		f.Withheld = t.filter.Withheld()
	}
	return f
}

func (t *turn) clientGone() bool { return t.ctx.Err() != nil }
