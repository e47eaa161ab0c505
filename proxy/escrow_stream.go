package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming/sse"
)

// The streamed turn's reader for a tenant with gates: sseBody reads the
// reply into the escrow's state of it (escrow.Stream).

// takeHeld is take for a tenant with gates. The decoder sees the event
// first; when the event carries the reply's stop and the filter is
// buffering client calls, the calls are matched against the gates before
// the event goes on. A match stops the reply here: the stop event, the
// buffered calls and everything after stay with gatekeeper, in escrow.
func (b *sseBody) takeHeld(ev *sse.Event) error {
	h, t := b.held, b.t
	stops := len(b.dec.Result().Stops)
	b.dec.Decode(ev)
	h.Keep(ev.Raw)
	if h.Phase() != escrow.Forward {
		return nil
	}
	if res := b.dec.Result(); len(res.Stops) > stops && t.filter.Holding() {
		if g := t.s.esc.Gated(res, t.gateInput(), t.withheld); len(g) > 0 {
			h.Escrow(g)
			if h.TooLarge() {
				// Too large to hold: the gated call is never delivered.
				b.endHeld(escrow.TypeRefused, fmt.Sprintf("the reply carries a tool call that needs approval (gate %s) and is larger than gatekeeper can hold (approvals.max_held_bytes); the call was not delivered", g[0].Gate.Name))
			}
			return nil
		}
	}
	mark := len(b.out)
	b.forward(ev)
	h.Forwarded(b.out[mark:])
	return nil
}

// holding reports whether the escrow owns the rest of the reply.
func (b *sseBody) holding() bool {
	return b.held != nil && b.held.Holding()
}

// endHeld ends the client's stream with the provider's error event; held
// calls are dropped.
func (b *sseBody) endHeld(typ, msg string) {
	b.out = b.t.filter.End(b.out, typ, msg)
	b.held.End()
}

// holdRead advances a held turn once the upstream reply has ended: it
// opens the hold, then hands out a keepalive per approvals.keepalive until
// the decision, then the decided reply.
func (b *sseBody) holdRead() {
	t, h := b.t, b.held
	b.out, b.off = b.out[:0], 0
	switch h.Phase() {
	case escrow.Escrowed:
		switch why := t.stopReason(); {
		case why == stopKill:
			h.End()
			b.err = errKilled
			return
		case why == stopCancel:
			typ, msg := t.stopError()
			b.endHeld(typ, msg)
			b.err = io.EOF
			return
		case b.err != io.EOF:
			b.endHeld(apierr.Upstream, "the provider's reply broke off after a tool call that needs approval; the call was not delivered; retry")
			b.err = io.EOF
			return
		}
		// Judged again on the whole reply: a call that completed after the
		// stop that started the escrow (another Chat choice) is gated too.
		res := b.dec.Result()
		gated := h.Gated(t.s.esc.Gated(res, t.gateInput(), t.withheld))
		hold, err := t.openHold(context.WithoutCancel(t.ctx), res, h.Reply(), gated, t.outcomeOf(res, http.StatusOK, nil))
		if err != nil {
			t.log.LogAttrs(t.ctx, slog.LevelError, "holding a gated call failed; the call is not delivered", slog.String("error", err.Error()))
			ans := escrow.ApprovalsDown(err)
			b.endHeld(ans.Type, ans.Msg)
			return
		}
		c := t.client(escrow.FormStream)
		c.Strip, c.Allow, c.Refusal = t.stripUsage, t.allowPolicy(), shape.Refusal(t.adm.Decision)
		h.Attach(hold, c)
		b.out = append(b.out, b.alive.Event()...)
	case escrow.Waiting:
		b.writeAwaited(t.s.esc.Await(t.ctx, h.Wait()))
	}
}

// writeAwaited is the stream writer: it writes what the original client
// gets of a step of its wait after the bytes it already has.
func (b *sseBody) writeAwaited(a escrow.Awaited) {
	h := b.held
	switch a.End {
	case escrow.Pending:
		b.out = append(b.out, b.alive.Event()...)
		return
	case escrow.Decided:
		h.End()
		b.out = append(b.out, a.Body...)
		return
	}
	if ans, drop := a.Answer(escrow.FormStream); !drop {
		b.endHeld(ans.Type, ans.Msg)
		return
	}
	// Never ended cleanly: the agent retries, or a killed run gets no more.
	h.End()
	b.err = a.Err
	if a.End == escrow.Killed {
		b.err = errKilled
	}
}

// allowPolicy is the allow function of the turn's call filter.
func (t *turn) allowPolicy() func(string) bool {
	if t.adm.Decision.Stage == meter.Restrict || t.loop.Restrict {
		return shape.Grant(t.req.tenant.ReadOnlyTools)
	}
	return nil
}
