package replybody

import (
	"fmt"
	"io"
	"slices"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// The streamed reply of a tenant with gates: Stream reads it into the
// escrow's state of it (escrow.Stream).

// takeHeld is take for a tenant with gates. The decoder sees the event
// first; when the event carries the reply's stop and the filter is
// buffering client calls, the calls are matched against the gates before
// the event goes on. A match stops the reply here: the stop event, the
// buffered calls and everything after stay with gatekeeper, in escrow.
func (b *Stream) takeHeld(ev *sse.Event) error {
	h := b.held
	stops := len(b.dec.Result().Stops)
	b.dec.Decode(ev)
	h.Keep(ev.Raw)
	if h.Phase() != escrow.Forward {
		return nil
	}
	var cut []escrow.Gated // gated calls cut at the output limit, which this stop drops
	if res := b.dec.Result(); len(res.Stops) > stops && b.s.Filter.Holding() {
		if g := b.gated(res); len(g) > 0 {
			h.Escrow(g)
			if h.TooLarge() {
				// Too large to hold: the gated call is never delivered.
				b.endHeld(apierr.ApprovalRefused, fmt.Sprintf("the reply carries a tool call that needs approval (gate %s) and is larger than gatekeeper can hold (approvals.max_held_bytes); the call was not delivered", g[0].Gate.Name))
			}
			return nil
		}
		cut = b.s.Gates.Escrow.Gated(res, b.s.Gates.Input, b.s.Gates.Withheld)
	}
	mark := len(b.out)
	b.forward(ev)
	if b.cutKept(cut) {
		// Fail closed: a call left out of the gates as cut must be one the
		// filter withheld at this stop.
		b.out = b.out[:mark]
		b.endHeld(apierr.ApprovalRefused, "the reply carries a tool call that needs approval and whose input gatekeeper could not read as the agent would; the call was not delivered")
		return nil
	}
	h.Forwarded(b.out[mark:])
	return nil
}

// gated is the reply's calls that some gate matches. A call the reply was
// still writing when it stopped at its output limit is not judged: the
// filter withholds it at that stop, the truncation notice in its place
// (streaming.Result.CutCalls), and nobody is asked to approve half a call.
func (b *Stream) gated(res *streaming.Result) []escrow.Gated {
	g := b.s.Gates
	cut := res.CutCalls()
	return g.Escrow.Gated(res, g.Input, func(id string) bool {
		return g.Withheld(id) || slices.ContainsFunc(cut, func(c streaming.ToolCall) bool { return c.ID == id })
	})
}

// cutKept reports whether some call of cut, gated calls left out of the
// gates as cut at the output limit, was not withheld by the filter.
func (b *Stream) cutKept(cut []escrow.Gated) bool {
	if len(cut) == 0 {
		return false
	}
	withheld := b.s.Filter.Withheld()
	for _, g := range cut {
		if !slices.ContainsFunc(withheld, func(c streaming.ToolCall) bool { return c.ID == g.Call.ID }) {
			return true
		}
	}
	return false
}

// holding reports whether the escrow owns the rest of the reply.
func (b *Stream) holding() bool {
	return b.held != nil && b.held.Holding()
}

// endHeld ends the client's stream with the provider's error event; held
// calls are dropped.
func (b *Stream) endHeld(typ, msg string) {
	b.out = b.s.Filter.End(b.out, typ, msg)
	b.held.End()
}

// holdRead advances a held turn once the upstream reply has ended: it
// opens the hold, then hands out a keepalive per approvals.keepalive until
// the decision, then the decided reply.
func (b *Stream) holdRead() {
	h := b.held
	b.out, b.off = b.out[:0], 0
	switch h.Phase() {
	case escrow.Escrowed:
		switch st := b.r.Turn.Stopped(); {
		case st.Kind == outcome.Killed:
			h.End()
			b.err = ErrKilled
			return
		case st.Kind == outcome.Canceled:
			b.endHeld(st.Type, st.Msg)
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
		hold, c, err := b.r.Turn.OpenHold(res, h.Reply(), h.Gated(b.gated(res)))
		if err != nil {
			ans := escrow.ApprovalsDown(err)
			b.endHeld(ans.Type, ans.Msg)
			return
		}
		h.Attach(hold, c)
		b.out = append(b.out, b.alive.Event()...)
	case escrow.Waiting:
		b.writeAwaited(b.s.Gates.Escrow.Await(b.s.Gates.Ctx, h.Wait()))
	}
}

// writeAwaited is the stream writer: it writes what the original client
// gets of a step of its wait after the bytes it already has.
func (b *Stream) writeAwaited(a escrow.Awaited) {
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
		b.err = ErrKilled
	}
}
