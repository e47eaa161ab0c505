package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"

	"gatekeeper/approvals"
	"gatekeeper/meter"
	"gatekeeper/streaming/sse"

	"gatekeeper/streaming"
)

// Error type of a gated call refused where no reply can carry the refusal
// (README.md, "How a held call behaves").
const errApprovalRefused = "approval_refused"

// heldPhase is where a streamed turn of a tenant with gates stands.
type heldPhase uint8

const (
	phaseForward heldPhase = iota // events go to the client as they come
	phaseEscrow                   // a gated call was found at the stop: the rest is read and kept
	phaseWait                     // the hold is open: keepalives until the decision
	phaseDone                     // the decided reply (or an error event) was handed over
)

// heldStream is the escrow's part of a streamed turn whose tenant has
// gates: the reply as received (bounded), and what the client has of it.
type heldStream struct {
	raw   []byte
	over  bool // raw passed approvals.max_held_bytes and was dropped
	sent  int  // bytes the client was handed
	sum   uint32
	phase heldPhase
	gated []gatedCall
	hold  *approvals.Hold
	alive streaming.Keepalive // what the keepalive of the held stream is
}

// keep adds an event's bytes to the held reply, within limit.
func (h *heldStream) keep(raw []byte, limit int64) {
	if h.over {
		return
	}
	if int64(len(h.raw)+len(raw)) > limit {
		h.over, h.raw = true, nil
		return
	}
	h.raw = append(h.raw, raw...)
}

// takeHeld is take for a tenant with gates. The decoder sees the event
// first; when the event carries the reply's stop and the filter holds
// client calls, the calls are matched against the gates before the event
// goes on. A match stops the reply here: the stop event, the held calls
// and everything after stay with gatekeeper.
func (b *sseBody) takeHeld(ev *sse.Event) error {
	h := b.held
	stops := len(b.dec.Result().Stops)
	b.dec.Decode(ev, nil)
	h.keep(ev.Raw, b.t.s.esc.maxHeld)
	if h.phase != phaseForward {
		return nil
	}
	if res := b.dec.Result(); len(res.Stops) > stops && b.t.filter.Holding() {
		if g := b.t.gatedCalls(res); len(g) > 0 {
			h.gated, h.phase = g, phaseEscrow
			if h.over {
				// Too large to hold: the gated call is never delivered.
				b.endHeld(errApprovalRefused, fmt.Sprintf("the reply carries a tool call that needs approval (gate %s) and is larger than gatekeeper can hold (approvals.max_held_bytes); the call was not delivered", g[0].gate.Name))
			}
			return nil
		}
	}
	mark := len(b.out)
	b.forward(ev)
	h.alive.Forwarded(ev, b.dec.Result())
	h.sent += len(b.out) - mark
	h.sum = crc32.Update(h.sum, crc32.IEEETable, b.out[mark:])
	return nil
}

// holding reports whether the escrow owns the rest of the reply.
func (b *sseBody) holding() bool {
	return b.held != nil && (b.held.phase == phaseEscrow || b.held.phase == phaseWait)
}

// endHeld ends the client's stream with the provider's error event; held
// calls are dropped.
func (b *sseBody) endHeld(typ, msg string) {
	b.out = b.t.filter.End(b.out, typ, msg)
	b.held.phase = phaseDone
}

// holdRead advances a held turn once the upstream reply has ended: it
// opens the hold, then hands out a keepalive per approvals.keepalive until
// the decision, then the decided reply.
func (b *sseBody) holdRead() {
	t, h := b.t, b.held
	b.out, b.off = b.out[:0], 0
	switch h.phase {
	case phaseEscrow:
		switch why := t.stopReason(); {
		case why == stopKill:
			h.phase, b.err = phaseDone, errKilled
			return
		case why == stopCancel:
			typ, msg := t.stopError()
			b.endHeld(typ, msg)
			b.err = io.EOF
			return
		case b.err != io.EOF:
			b.endHeld(errUpstream, "the provider's reply broke off after a tool call that needs approval; the call was not delivered; retry")
			b.err = io.EOF
			return
		}
		// Judged again on the whole reply: a call that completed after the
		// stop that started the escrow (another Chat choice) is gated too.
		res := b.dec.Result()
		if g := t.gatedCalls(res); len(g) > 0 {
			h.gated = g
		}
		hold, err := t.openHold(context.WithoutCancel(t.ctx), res, h.raw, true, h.gated, t.outcomeOf(res, http.StatusOK, nil))
		if err != nil {
			t.log.LogAttrs(t.ctx, slog.LevelError, "holding a gated call failed; the call is not delivered", slog.String("error", err.Error()))
			he := errApprovalsDown(err)
			b.endHeld(he.Type, he.Msg)
			return
		}
		h.hold, h.phase, h.raw = hold, phaseWait, nil
		b.out = append(b.out, h.alive.Event()...)
	case phaseWait:
		reqs, done, err := t.s.holdStep(t.ctx, h.hold, t.s.esc.keepalive)
		var stopped *errRunStopped
		switch {
		case errors.As(err, &stopped) && stopped.kill:
			h.phase, b.err = phaseDone, errKilled
		case errors.As(err, &stopped):
			he := stoppedError(stopped)
			b.endHeld(he.Type, he.Msg)
		case err != nil:
			// The client went away or gatekeeper is closing: the hold stays
			// for a retry. The connection is dropped, never ended cleanly.
			h.phase, b.err = phaseDone, err
		case !done:
			b.out = append(b.out, h.alive.Event()...)
		default:
			b.release(reqs)
		}
	}
}

// release hands the original client the decided reply from where its
// stream stopped.
func (b *sseBody) release(reqs []*approvals.Request) {
	t, h := b.t, b.held
	h.phase = phaseDone
	c := &holdClient{req: t.req, hdr: t.hdr, stream: true, strip: t.stripUsage, sent: h.sent, sum: h.sum,
		allow: t.allowPolicy(), refusal: t.refusal, log: t.log}
	ctx := context.WithoutCancel(t.ctx)
	hr, err := t.s.settleHold(ctx, h.hold, reqs, c)
	if errors.Is(err, errDelivered) {
		b.endHeld(errInvalidRequest, "this turn's held reply was already delivered to another request of the same turn")
		return
	}
	if err != nil {
		t.log.LogAttrs(ctx, slog.LevelError, "settling a held turn failed", slog.String("hold", h.hold.ID), slog.String("error", err.Error()))
		he := errApprovalsDown(err)
		b.endHeld(he.Type, he.Msg)
		return
	}
	if hr.next != nil {
		// The continuation made a gated call of its own: held again.
		h.hold, h.phase = hr.next, phaseWait
		b.out = append(b.out, h.alive.Event()...)
		return
	}
	out, err := render(t.req.api, hr, c)
	if err != nil {
		// Nothing can be appended coherently: the connection is dropped so
		// that the agent retries. The hold was delivered and is not sent again.
		t.log.LogAttrs(ctx, slog.LevelError, "rendering the decided reply failed", slog.String("hold", h.hold.ID), slog.String("error", err.Error()))
		b.err = err
		return
	}
	b.out = append(b.out, out...)
}

// allowPolicy is the allow function of the turn's call filter.
func (t *turn) allowPolicy() func(string) bool {
	if t.adm.decision.Stage == meter.Restrict || t.loop.restrict {
		return t.readOnly
	}
	return nil
}
