package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/replybody"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming"
)

// The turn's reply bodies are proxy/internal/replybody's; what they call
// back for stays the turn's (replyTurn).

// jsonBody is the whole reply body of the turn: src, which came with
// status, kept up to limit bytes to decode at its end.
func (t *turn) jsonBody(src io.ReadCloser, status int, limit int64) io.ReadCloser {
	return replybody.NewJSON(t.reply(), src, status, limit)
}

// streamBody is the streamed reply body of the turn, read from src.
func (t *turn) streamBody(src io.ReadCloser) io.ReadCloser {
	s := replybody.Streamed{Filter: t.filter, StripUsage: t.stripUsage, Keepalive: t.req.rules.keepaliveEvery(),
		MaxEventBytes: int(t.req.rules.cfg.Limits.MaxEventBytes), Buf: t.s.bufs.Get(), Release: t.s.bufs.Put, Output: &t.streamed}
	if t.gated {
		s.Gates = &replybody.Gates{Escrow: t.req.rules.esc, Input: t.gateInput(), Withheld: t.withheld, Ctx: t.ctx}
	}
	return replybody.NewStream(t.reply(), src, s)
}

func (t *turn) reply() replybody.Reply {
	return replybody.Reply{Turn: replyTurn{t}, Dialect: t.req.dialect.Stream, Span: t.tt, Extras: &t.extras}
}

// replyTurn is the turn as its reply's body sees it.
type replyTurn struct{ t *turn }

var _ replybody.Turn = replyTurn{}

func (r replyTurn) Settle(res *streaming.Result, status int, cause error) {
	if status >= 200 && status <= 299 {
		r.t.linkRun(res)
	}
	r.t.settle(r.t.outcomeOf(res, status, cause))
}

func (r replyTurn) SettleError(status int, body []byte) { r.t.settleUpstreamError(status, body) }

func (r replyTurn) Stopped() replybody.Stop {
	st := replybody.Stop{Kind: r.t.stopReason()}
	if st.Kind != outcome.NotStopped && st.Kind != outcome.Killed {
		st.Type, st.Msg = r.t.stopError()
	}
	return st
}

func (r replyTurn) OpenHold(res *streaming.Result, rep escrow.Reply, gated []escrow.Gated) (*approvals.Hold, *escrow.Client, error) {
	t := r.t
	hold, err := t.openHold(context.WithoutCancel(t.ctx), res, rep, gated, t.outcomeOf(res, http.StatusOK, nil))
	if err != nil {
		t.log.LogAttrs(t.ctx, slog.LevelError, "holding a gated call failed; the call is not delivered", slog.String("error", err.Error()))
		return nil, nil, err
	}
	c := t.client(escrow.FormStream)
	c.Strip, c.Allow, c.Refusal = t.stripUsage, t.allowPolicy(), shape.Refusal(t.adm.Decision)
	return hold, c, nil
}

// settleUpstreamError records the turn from the provider's error reply:
// its status and its body (nil when it passed the body's limit).
func (t *turn) settleUpstreamError(status int, body []byte) {
	t.settle(outcome.Turn{Stop: "error", Status: status, Upstream: true, Detail: upstreamErrorDetail(t.req.dialect, body)})
}

// upstreamErrorDetail picks the provider's error type out of an error body
// for the event log; the body itself reaches the agent unchanged.
func upstreamErrorDetail(d *dialect.Spec, body []byte) string {
	if res, err := d.Stream.DecodeJSON(body); err == nil && len(res.Errors) > 0 {
		return res.Errors[0].Type + ": " + res.Errors[0].Message
	}
	return ""
}

// keepaliveEvery is the period of keepalives on a held stream, and the
// longest a held call's stream leaves the agent without one.
func (ru *rules) keepaliveEvery() time.Duration {
	if d := ru.cfg.Approvals.Keepalive.Std(); d > 0 {
		return d
	}
	return config.DefaultKeepalive
}

// allowPolicy is the allow function of the turn's call filter.
func (t *turn) allowPolicy() func(string) bool {
	if t.adm.Decision.Stage == meter.Restrict || t.loop.Restrict {
		return shape.Grant(t.req.tenant.ReadOnlyTools)
	}
	return nil
}
