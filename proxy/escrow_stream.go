package proxy

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming/sse"
)

// Error type of a gated call refused where no reply can carry the refusal
// (README.md, "How a held call behaves").
const errApprovalRefused = "approval_refused"

// heldPhase is where a streamed turn of a tenant with gates stands.
type heldPhase uint8

const (
	phaseForward heldPhase = iota // events go to the client as they come
	phaseEscrow                   // a gated call was found at the stop: the rest is read and kept
	phaseWait                     // the hold is open: awaitDecision, keepalives until the decision
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
	wait  *escrowWait
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
// first; when the event carries the reply's stop and the filter is
// buffering client calls, the calls are matched against the gates before
// the event goes on. A match stops the reply here: the stop event, the
// buffered calls and everything after stay with gatekeeper, in escrow.
func (b *sseBody) takeHeld(ev *sse.Event) error {
	h := b.held
	stops := len(b.dec.Result().Stops)
	b.dec.Decode(ev)
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
		hold, err := t.openHold(context.WithoutCancel(t.ctx), res, reply{form: formStream, body: h.raw}, h.gated, t.outcomeOf(res, http.StatusOK, nil))
		if err != nil {
			t.log.LogAttrs(t.ctx, slog.LevelError, "holding a gated call failed; the call is not delivered", slog.String("error", err.Error()))
			he := errApprovalsDown(err)
			b.endHeld(he.Type, he.Msg)
			return
		}
		// What the client has of the reply is final: nothing more was
		// forwarded once the escrow began.
		c := &escrowClient{req: t.req, hdr: t.hdr, form: formStream, strip: t.stripUsage, sent: h.sent, sum: h.sum,
			allow: t.allowPolicy(), refusal: shape.Refusal(t.adm.Decision), log: t.log}
		h.wait, h.phase, h.raw = &escrowWait{hold: hold, c: c}, phaseWait, nil
		b.out = append(b.out, b.alive.Event()...)
	case phaseWait:
		b.writeAwaited(t.s.awaitDecision(t.ctx, h.wait))
	}
}

// writeAwaited is the stream writer: it writes what the original client
// gets of a step of its wait after the bytes it already has.
func (b *sseBody) writeAwaited(a awaited) {
	h := b.held
	switch a.end {
	case awaitPending:
		b.out = append(b.out, b.alive.Event()...)
		return
	case awaitDecided:
		h.phase = phaseDone
		b.out = append(b.out, a.body...)
		return
	}
	if he, drop := a.answer(formStream); !drop {
		b.endHeld(he.Type, he.Msg)
		return
	}
	// Never ended cleanly: the agent retries, or a killed run gets no more.
	h.phase, b.err = phaseDone, a.err
}

// allowPolicy is the allow function of the turn's call filter.
func (t *turn) allowPolicy() func(string) bool {
	if t.adm.Decision.Stage == meter.Restrict || t.loop.Restrict {
		return shape.Grant(t.req.tenant.ReadOnlyTools)
	}
	return nil
}
