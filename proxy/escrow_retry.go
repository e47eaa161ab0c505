package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming"
)

// findHold looks, for a request admission found on a record that holds a
// reply for approval (or has just released one), for the held turn with
// this request's key (escrow.Find). found is true when the request is
// answered from the hold (t.hold is set: it re-attaches) or refused (err).
// When the record holds no turn of this key, admission goes on as usual.
func (t *turn) findHold(ctx context.Context, id string, opening bool) (found bool, err error) {
	h, err := deadline.Spend(ctx, func(ctx context.Context) (*approvals.Hold, error) {
		return t.req.rules.esc.Find(ctx, id, t.turnHash, opening)
	})
	switch {
	case err != nil:
		// The approvals store unread is the store unavailable: the
		// agent hears that, not that a call needs approval.
		return true, storeErr(agentError(err))
	case h == nil:
		t.holdChecked = true
		return false, nil
	}
	t.hold, t.recID = h, id
	return true, nil
}

// client is the escrow's client for the turn's request, which asked for
// the reply in form.
func (t *turn) client(form escrow.Form) *escrow.Client {
	return &escrow.Client{API: t.req.api, Form: form, Log: t.log, Continue: t.s.continuer(t.req, t.hdr, t.log)}
}

// serveReattach serves a retry of a held turn: no model call, no
// reservation. It waits for the decision like the original request did
// (keepalives on a stream) and receives the decided reply in its own form.
// The error is what the agent gets (apierr.Write).
func (s *Server) serveReattach(w http.ResponseWriter, r *http.Request, t *turn) error {
	t.log.LogAttrs(r.Context(), slog.LevelInfo, "request re-attached to a held turn", slog.String("hold", t.hold.ID), slog.Bool("stream", t.pr.Stream))
	w.Header().Set("X-Gatekeeper-Trajectory", t.recID)
	c := t.client(escrow.FormOf(t.pr.Stream))
	if c.Form == escrow.FormStream && t.req.dialect.AskUsage {
		_, c.Strip, _ = streaming.EnsureIncludeUsage(t.body)
	}
	wait := &escrow.Wait{Hold: t.hold, Client: c}
	if c.Form == escrow.FormStream {
		return t.req.rules.esc.WriteRetryStream(r.Context(), w, wait)
	}
	err := t.req.rules.esc.WriteRetryJSON(r.Context(), w, wait)
	if err != nil && r.Context().Err() != nil {
		return apierr.ErrClientGone
	}
	return agentError(err)
}

// holdJSON decides a non-streamed reply of a tenant with gates before any
// of it reaches the agent (escrow.HoldJSON): a reply with a gated call is
// held and replaced by the decided reply; any other goes out as it came.
func (t *turn) holdJSON(resp *http.Response) error {
	limit := t.req.rules.cfg.Limits.MaxBodyBytes
	raw, err := escrow.ReadWhole(resp.Body, limit)
	_ = resp.Body.Close()
	if err != nil {
		// The provider produced the reply: it is charged, undelivered.
		t.chargeUndelivered(nil, int64(len(raw)), err)
		return err
	}
	c := t.client(escrow.FormJSON)
	c.Allow, c.Refusal = t.allowPolicy(), shape.Refusal(t.adm.Decision)
	out, held, err := t.req.rules.esc.HoldJSON(t.ctx, heldJSON{t: t, status: resp.StatusCode}, c, raw)
	switch {
	case err != nil:
		return agentError(err)
	case held:
		// Recorded when its hold opened: the reply goes out as it is.
		resp.Body = io.NopCloser(bytes.NewReader(out))
	default:
		resp.Body = t.jsonBody(io.NopCloser(bytes.NewReader(out)), resp.StatusCode, limit)
	}
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

// heldJSON is a non-streamed turn's side of its hold.
type heldJSON struct {
	t      *turn
	status int // the reply's
}

var _ escrow.Opener = heldJSON{}

func (h heldJSON) Gated(res *streaming.Result) []escrow.Gated { return h.t.gatedCalls(res) }

func (h heldJSON) Open(ctx context.Context, res *streaming.Result, rep escrow.Reply, gated []escrow.Gated) (*approvals.Hold, error) {
	hold, err := h.t.openHold(ctx, res, rep, gated, h.t.outcomeOf(res, h.status, nil))
	if err != nil {
		// Nothing is delivered; what the provider produced is charged.
		h.t.chargeUndelivered(res, int64(len(rep.Body)), err)
	}
	return hold, err
}
