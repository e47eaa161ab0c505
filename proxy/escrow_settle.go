package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/holds"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// maxContinuations bounds the model calls made to continue one held turn
// past refused calls; after them a refused call ends the turn instead.
const maxContinuations = 2

// escrowClient is one client attached to a held turn: the request that
// produced the reply, or a retry of it.
type escrowClient struct {
	req   *request    // its routing: tenant, API, request id
	hdr   http.Header // its headers, which a continuation call sends on
	form  replyForm   // the form it asked for
	strip bool        // Chat usage it did not ask for is taken out
	// sent and sum are the length and CRC-32 of what the client already
	// has of the streamed reply (the original request only).
	sent int
	sum  uint32
	// allow and refusal are the client's call filter policy (the restrict
	// stage's grant); nil: every call allowed.
	allow   func(string) bool
	refusal func(streaming.ToolCall) string
	log     *slog.Logger
}

// decidedReply is a decided held turn: the reply that goes out, and the
// calls in it that are replaced by a text saying why; or, when the
// model's continuation after a refusal made a gated call of its own, the
// hold the turn waits on next.
type decidedReply struct {
	reply  reply
	refuse []string          // client call ids the client does not get
	texts  map[string]string // what replaces each of them
	next   *approvals.Hold
}

// settleHold turns a held turn whose requests are all decided into the
// reply that client c receives. Delivery is claimed on the hold first, in
// one atomic update: only one client ever gets a held turn's reply, and a
// later one gets errDelivered. Approved calls are re-checked and released
// (AWAITING_APPROVAL → WAITING_TOOL); refused ones are answered by a
// continuation, or by a text that ends the turn.
func (s *Server) settleHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, c *escrowClient) (*decidedReply, error) {
	esc := s.esc
	h, err := esc.store.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		if h.Delivered {
			return errDelivered
		}
		h.Delivered = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	hr, err := s.decideHold(ctx, h, reqs, c)
	if err != nil {
		// Nothing went out: a retry may still get the reply.
		if _, uerr := esc.store.UpdateHold(context.WithoutCancel(ctx), h.ID, func(h *approvals.Hold) error {
			h.Delivered = false
			return nil
		}); uerr != nil {
			c.log.LogAttrs(ctx, slog.LevelError, "releasing the delivery claim failed", slog.String("hold", h.ID), slog.String("error", uerr.Error()))
		}
		return nil, err
	}
	return hr, nil
}

func (s *Server) decideHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, c *escrowClient) (*decidedReply, error) {
	res, err := heldReply(h).decode(streaming.API(h.API))
	if err != nil {
		return nil, fmt.Errorf("decoding the held reply: %w", err)
	}
	base, err := s.heldBase(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("rebuilding the held reply: %w", err)
	}
	approved := true
	for _, r := range reqs {
		approved = approved && r.State == approvals.Approved
	}
	if approved {
		err := s.releaseHeld(ctx, h, reqs, res)
		var stale *holds.StaleError
		switch {
		case err == nil:
			s.closeHold(ctx, h, approvals.Released, reqs, c.log)
			c.log.LogAttrs(ctx, slog.LevelInfo, "held tool calls released", slog.String("hold", h.ID))
			return &decidedReply{reply: base}, nil
		case errors.As(err, &stale):
			reqs = holds.MarkStale(ctx, s.esc.store, reqs, stale.Why, s.now(), c.log)
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
	if err := s.refuseHeld(ctx, h, reason); err != nil {
		return nil, err
	}
	hr := s.refusalReply(ctx, h, base, reqs, res, c)
	s.closeHold(ctx, h, approvals.Refused, reqs, c.log)
	c.log.LogAttrs(ctx, slog.LevelInfo, "held tool calls refused", slog.String("hold", h.ID), slog.String("reason", reason),
		slog.Bool("held_again", hr.next != nil))
	return hr, nil
}

// releaseHeld re-checks an approved hold against the world as it is now
// and, when it still holds, moves the record AWAITING_APPROVAL →
// WAITING_TOOL in the same atomic update: the digest of each held call is
// the one approved, each approval came before its expiry, the run is live
// and still awaiting this approval, its budget is not spent, and the stage
// still grants the tool.
func (s *Server) releaseHeld(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, res *streaming.Result) error {
	if err := holds.CheckApproved(reqs, res); err != nil {
		return err
	}
	now := s.now()
	_, err := s.store.UpdateChain(ctx, h.Trajectory, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		rec := chain[0]
		for _, r := range chain {
			if r.State.Terminal() || r.State == trajectory.Finalizing {
				return nil, &holds.StaleError{Why: fmt.Sprintf("trajectory %s has ended", r.ID)}
			}
		}
		if rec.State != trajectory.AwaitingApproval || rec.Pending.ApprovalID != h.Requests[0] {
			return nil, &holds.StaleError{Why: fmt.Sprintf("trajectory %s is %s, no longer awaiting this approval", rec.ID, rec.State)}
		}
		d := meter.Check(chainrule.Levels(chain, now, true), s.stages)
		switch d.Stage {
		case meter.Halt:
			return nil, &holds.StaleError{Why: "the run's budget is spent"}
		case meter.Restrict:
			for _, r := range reqs {
				if !slices.Contains(s.tenantReadOnly(h.Tenant), r.Call.Name) {
					return nil, &holds.StaleError{Why: "the run's budget stage no longer grants " + r.Call.Name}
				}
			}
		}
		ts, err := rec.ApproveHeld(s.cfg.Limits.ToolDeadline.Std(), now)
		if err != nil {
			return nil, err
		}
		return trajectory.EventsFor(rec.ID, ts), nil
	})
	return err
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

// refuseHeld moves the record AWAITING_APPROVAL → READY: the agent gets no
// held call, so nothing is owed.
func (s *Server) refuseHeld(ctx context.Context, h *approvals.Hold, reason string) error {
	now := s.now()
	_, err := s.store.UpdateChain(ctx, h.Trajectory, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
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

// closeHold records the hold's end. The decisions themselves reach
// telemetry through the Service's Decided hook; here the held requests
// leave the pending gauge.
func (s *Server) closeHold(ctx context.Context, h *approvals.Hold, st approvals.HoldState, reqs []*approvals.Request, log *slog.Logger) {
	holds.Close(ctx, s.esc.store, h, st, log)
	s.tel.ApprovalPending(-int64(len(reqs)))
}

// refusalReply is the reply for a hold with refused calls: with
// on_refusal continue, the model's continuation after being told each call
// was refused, spliced into the held reply (or, when the continuation
// makes a gated call, the next hold); otherwise, when the turn already had
// its continuations, or when the continuation cannot be had, the held
// reply with every client call replaced by a text saying why, ending the
// turn. base is the held reply as the client would get it.
func (s *Server) refusalReply(ctx context.Context, h *approvals.Hold, base reply, reqs []*approvals.Request, res *streaming.Result, c *escrowClient) *decidedReply {
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
		texts[r.CallID] = holds.RefusalText(r)
		endTurn = endTurn || r.OnRefusal == config.OnRefusalEndTurn
	}
	for _, tc := range res.ClientToolCalls() {
		if _, ok := results[tc.ID]; ok {
			continue
		}
		results[tc.ID] = holds.NotRun(tc.Name, first)
		texts[tc.ID] = fmt.Sprintf("[gatekeeper] The call to %s was not delivered and was not run: another call of this reply was refused approval.", tc.Name)
	}
	endTurnReply := &decidedReply{reply: base, refuse: slices.Clone(h.Calls), texts: texts}
	if endTurn || h.Continuations >= maxContinuations {
		return endTurnReply
	}
	hr, err := s.continueHeld(ctx, h, base, results, c)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "continuation after a refused call failed; the turn ends with the refusal",
			slog.String("hold", h.ID), slog.String("error", err.Error()))
		return endTurnReply
	}
	return hr
}

// heldBase is the reply a client gets of hold h before its own calls are
// decided: h's reply, or for a hold of a continuation, the earlier held
// reply (its refused calls dropped) with h's reply spliced in.
func (s *Server) heldBase(ctx context.Context, h *approvals.Hold) (reply, error) {
	if h.Continuations == 0 {
		return heldReply(h), nil
	}
	parent, err := holds.Previous(ctx, s.esc.store, h)
	if err != nil {
		return reply{}, err
	}
	first, err := s.heldBase(ctx, parent)
	if err != nil {
		return reply{}, err
	}
	return first.splice(streaming.API(h.API), h.Reply)
}
