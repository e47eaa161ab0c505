package escrow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// maxContinuations bounds the model calls made to continue one held turn
// past refused calls; after them a refused call ends the turn instead.
const maxContinuations = 2

// Client is one client attached to a held turn: the request that produced
// the reply, or a retry of it.
type Client struct {
	API   streaming.API
	Form  Form // the form it asked for
	Strip bool // Chat usage it did not ask for is taken out
	// Sent and Sum are the length and CRC-32 of what the client already
	// has of the streamed reply (the original request only; Stream.Attach
	// sets them).
	Sent int
	Sum  uint32
	// Allow and Refusal are the client's call filter policy (the restrict
	// stage's grant); nil: every call allowed.
	Allow   func(string) bool
	Refusal func(streaming.ToolCall) string
	// Continue sends the continuation after refused calls on the client's
	// behalf.
	Continue Continuer
	Log      *slog.Logger
}

// Continuer sends the model call that continues held turn h after its
// refused calls: body (the held request, the held reply and each call's
// refusal) to the hold's provider, admitted and charged on the hold's
// record like a turn, read whole. It returns the reply in form; or, when
// the reply makes a gated call of its own, the hold it opened for it (the
// next hold of the same turn). An error that is (or wraps) an *Answer is
// the continuation refused as any call would be (its tenant's ceilings):
// the client gets that answer rather than a reply.
type Continuer func(ctx context.Context, h *approvals.Hold, body []byte, form Form) (reply []byte, next *approvals.Hold, err error)

// Decision is a decided held turn: the reply that goes out, and the calls
// in it that are replaced by a text saying why; or, when the model's
// continuation after a refusal made a gated call of its own, the hold the
// turn waits on next.
type Decision struct {
	Reply  Reply
	Refuse []string          // client call ids the client does not get
	Texts  map[string]string // what replaces each of them
	Next   *approvals.Hold
	// Refused, when set, is the answer the client gets instead of a
	// reply: the continuation after a refusal was refused in turn, as
	// any call over its tenant's ceilings is.
	Refused *Answer
}

// settle turns a held turn whose requests are all decided into the reply
// that client c receives. Delivery is claimed on the hold first, in one
// atomic update: only one client ever gets a held turn's reply, and a
// later one gets errDelivered. Approved calls are re-checked and released
// (AWAITING_APPROVAL → WAITING_TOOL); refused ones are answered by a
// continuation, or by a text that ends the turn.
func (e *Keeper) settle(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, c *Client) (*Decision, error) {
	h, err := e.store.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		if h.Delivered {
			return errDelivered
		}
		h.Delivered = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	dr, err := e.decide(ctx, h, reqs, c)
	if err != nil {
		// Nothing went out: a retry may still get the reply.
		if _, uerr := e.store.UpdateHold(context.WithoutCancel(ctx), h.ID, func(h *approvals.Hold) error {
			h.Delivered = false
			return nil
		}); uerr != nil {
			c.Log.LogAttrs(ctx, slog.LevelError, "releasing the delivery claim failed", slog.String("hold", h.ID), slog.String("error", uerr.Error()))
		}
		return nil, err
	}
	return dr, nil
}

func (e *Keeper) decide(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, c *Client) (*Decision, error) {
	d := e.dialect(streaming.API(h.API))
	res, err := Held(h).Decode(d)
	if err != nil {
		return nil, fmt.Errorf("decoding the held reply: %w", err)
	}
	base, err := e.heldBase(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("rebuilding the held reply: %w", err)
	}
	approved := true
	for _, r := range reqs {
		approved = approved && r.State == approvals.Approved
	}
	if approved {
		err := e.release(ctx, h, reqs, res)
		var stale *staleError
		switch {
		case err == nil:
			e.close(ctx, h, approvals.Released, reqs, c.Log)
			c.Log.LogAttrs(ctx, slog.LevelInfo, "held tool calls released", slog.String("hold", h.ID))
			return &Decision{Reply: base}, nil
		case errors.As(err, &stale):
			reqs = markStale(ctx, e.store, reqs, stale.Why, e.now(), c.Log)
		default:
			return nil, err
		}
	}
	reason := "refused"
	for _, r := range reqs {
		if r.State != approvals.Approved {
			reason = r.RefusalReason()
			break
		}
	}
	if err := e.refuse(ctx, h, reason); err != nil {
		return nil, err
	}
	dr := e.refusal(ctx, h, base, reqs, res, c)
	e.close(ctx, h, approvals.Refused, reqs, c.Log)
	c.Log.LogAttrs(ctx, slog.LevelInfo, "held tool calls refused", slog.String("hold", h.ID), slog.String("reason", reason),
		slog.Bool("held_again", dr.Next != nil))
	return dr, nil
}

// release re-checks an approved hold against the world as it is now and,
// when it still holds, moves the record AWAITING_APPROVAL → WAITING_TOOL
// in the same atomic update: the digest of each held call is the one
// approved, each approval came before its expiry, the run is live and
// still awaiting this approval, its budget is not spent, and the stage
// still grants the tool.
func (e *Keeper) release(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, res *streaming.Result) error {
	if err := checkApproved(reqs, res); err != nil {
		return err
	}
	now := e.now()
	_, err := e.records.UpdateChain(ctx, h.Trajectory, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		rec := chain[0]
		for _, r := range chain {
			if r.State.Terminal() || r.State == trajectory.Finalizing {
				return nil, &staleError{Why: fmt.Sprintf("trajectory %s has ended", r.ID)}
			}
		}
		if rec.State != trajectory.AwaitingApproval || rec.Pending.ApprovalID != h.Requests[0] {
			return nil, &staleError{Why: fmt.Sprintf("trajectory %s is %s, no longer awaiting this approval", rec.ID, rec.State)}
		}
		d := meter.Check(chainrule.Levels(chain, now, true), e.stages)
		switch d.Stage {
		case meter.Halt:
			return nil, &staleError{Why: "the run's budget is spent"}
		case meter.Restrict:
			for _, r := range reqs {
				if !slices.Contains(e.readOnly(h.Tenant), r.Call.Name) {
					return nil, &staleError{Why: "the run's budget stage no longer grants " + r.Call.Name}
				}
			}
		}
		ts, err := rec.ApproveHeld(e.toolDeadline, now)
		if err != nil {
			return nil, err
		}
		return trajectory.EventsFor(rec.ID, ts), nil
	})
	return err
}

// refuse moves the record AWAITING_APPROVAL → READY: the agent gets no
// held call, so nothing is owed.
func (e *Keeper) refuse(ctx context.Context, h *approvals.Hold, reason string) error {
	now := e.now()
	_, err := e.records.UpdateChain(ctx, h.Trajectory, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		rec := chain[0]
		if rec.State != trajectory.AwaitingApproval || rec.Pending.ApprovalID != h.Requests[0] {
			return nil, nil // already moved on: nothing to undo
		}
		ts, err := rec.RefuseHeld(reason, now)
		if err != nil {
			return nil, err
		}
		return trajectory.EventsFor(rec.ID, ts), nil
	})
	return err
}

// close records the hold's end. The decisions themselves reach telemetry
// through the Service's Decided hook; here the held requests leave the
// pending gauge.
func (e *Keeper) close(ctx context.Context, h *approvals.Hold, st approvals.HoldState, reqs []*approvals.Request, log *slog.Logger) {
	closeHold(ctx, e.store, h, st, log)
	e.metrics.ApprovalPending(-int64(len(reqs)))
}

// refusal is the reply for a hold with refused calls: with on_refusal
// continue, the model's continuation after being told each call was
// refused, spliced into the held reply (or, when the continuation makes a
// gated call, the next hold); otherwise, when the turn already had its
// continuations, or when the continuation cannot be had, the held reply
// with every client call replaced by a text saying why, ending the turn.
// base is the held reply as the client would get it.
func (e *Keeper) refusal(ctx context.Context, h *approvals.Hold, base Reply, reqs []*approvals.Request, res *streaming.Result, c *Client) *Decision {
	results := make(map[string][]byte)
	texts := make(map[string]string)
	endTurn := false
	var first *approvals.Request
	for _, r := range reqs {
		if r.State == approvals.Approved {
			continue
		}
		if first == nil {
			first = r
		}
		results[r.CallID] = r.Refusal()
		texts[r.CallID] = refusalText(r)
		endTurn = endTurn || r.OnRefusal == config.OnRefusalEndTurn
	}
	for _, tc := range res.ClientToolCalls() {
		if _, ok := results[tc.ID]; ok {
			continue
		}
		results[tc.ID] = notRun(tc.Name, first)
		texts[tc.ID] = fmt.Sprintf("[gatekeeper] The call to %s was not delivered and was not run: another call of this reply was refused approval.", tc.Name)
	}
	endTurnReply := &Decision{Reply: base, Refuse: slices.Clone(h.Calls), Texts: texts}
	if endTurn || h.Continuations >= maxContinuations {
		return endTurnReply
	}
	dr, err := e.continueHeld(ctx, h, base, results, c)
	if ans, ok := errors.AsType[*Answer](err); ok {
		c.Log.LogAttrs(ctx, slog.LevelInfo, "continuation after a refused call was refused; the client gets the refusal",
			slog.String("hold", h.ID), slog.String("error", err.Error()))
		return &Decision{Refused: ans}
	}
	if err != nil {
		c.Log.LogAttrs(ctx, slog.LevelWarn, "continuation after a refused call failed; the turn ends with the refusal",
			slog.String("hold", h.ID), slog.String("error", err.Error()))
		return endTurnReply
	}
	return dr
}

// continueHeld asks the model to go on after refused calls: the held
// request, plus the held reply, plus each call's REFUSED result, sent by
// the client's Continuer. Its reply is spliced into base, the held reply
// as the client would get it, so that the client reads one coherent
// message. A gated call in the continuation is held in turn: the reply is
// the next hold of the same turn, which the client waits on.
func (e *Keeper) continueHeld(ctx context.Context, h *approvals.Hold, base Reply, results map[string][]byte, c *Client) (*Decision, error) {
	d := e.dialect(streaming.API(h.API))
	body, err := d.Continuation(h.Request, h.Reply, h.Streamed, results)
	if err != nil {
		return nil, err
	}
	if c.Continue == nil {
		return nil, errors.New("the client cannot send a continuation")
	}
	raw, next, err := c.Continue(ctx, h, body, base.Form)
	switch {
	case err != nil:
		return nil, err
	case next != nil:
		return &Decision{Next: next}, nil
	}
	spliced, err := base.Splice(d, raw)
	if err != nil {
		return nil, err
	}
	return &Decision{Reply: spliced}, nil
}

// heldBase is the reply a client gets of hold h before its own calls are
// decided: h's reply, or for a hold of a continuation, the earlier held
// reply (its refused calls dropped) with h's reply spliced in.
func (e *Keeper) heldBase(ctx context.Context, h *approvals.Hold) (Reply, error) {
	if h.Continuations == 0 {
		return Held(h), nil
	}
	parent, err := previousHold(ctx, e.store, h)
	if err != nil {
		return Reply{}, err
	}
	first, err := e.heldBase(ctx, parent)
	if err != nil {
		return Reply{}, err
	}
	return first.Splice(e.dialect(streaming.API(h.API)), h.Reply)
}
