package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"

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
	h, err := t.s.esc.Find(ctx, id, t.key, opening)
	switch {
	case err != nil:
		return true, answerError(err)
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
// The error is what the agent gets (writeError).
func (s *Server) serveReattach(w http.ResponseWriter, r *http.Request, t *turn) error {
	t.log.LogAttrs(r.Context(), slog.LevelInfo, "request re-attached to a held turn", slog.String("hold", t.hold.ID), slog.Bool("stream", t.pr.Stream))
	w.Header().Set("X-Gatekeeper-Trajectory", t.recID)
	c := t.client(escrow.FormOf(t.pr.Stream))
	if c.Form == escrow.FormStream && dialectOf(t.req.api).askUsage {
		_, c.Strip, _ = streaming.EnsureIncludeUsage(t.body)
	}
	wait := &escrow.Wait{Hold: t.hold, Client: c}
	if c.Form == escrow.FormStream {
		return s.writeRetryStream(w, r, wait)
	}
	out, err := s.esc.AwaitJSON(r.Context(), wait)
	if err != nil {
		if r.Context().Err() != nil {
			return errClientGone
		}
		return answerError(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	return nil
}

// writeRetryStream is the streamed retry's writer: a stream of keepalives
// until the decision, then the whole decided reply or an error event. Its
// only error is http.ErrAbortHandler: the stream had begun.
func (s *Server) writeRetryStream(w http.ResponseWriter, r *http.Request, wait *escrow.Wait) error {
	d := streamOf(wait.Client.API)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for {
		a := s.esc.Await(r.Context(), wait)
		var out []byte
		switch a.End {
		case escrow.Pending:
			out = d.NewKeepalive().Event()
		case escrow.Decided:
			out = a.Body
		default:
			ans, drop := a.Answer(escrow.FormStream)
			if drop {
				return http.ErrAbortHandler // the agent retries, or a killed run gets no answer
			}
			out = escrow.ErrorEvent(d, ans.Type, ans.Msg)
		}
		if _, err := w.Write(out); err != nil {
			return nil // the agent went away
		}
		_ = rc.Flush()
		if a.End != escrow.Pending {
			return nil
		}
	}
}

// holdJSON decides a non-streamed reply of a tenant with gates before any
// of it reaches the agent: a reply with a gated call is held (the agent's
// request simply waits) and replaced by the decided reply; any other goes
// out as it came.
func (t *turn) holdJSON(resp *http.Response) error {
	s := t.s
	limit := s.cfg.Limits.MaxBodyBytes
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	_ = resp.Body.Close()
	if err == nil && int64(len(raw)) > limit {
		err = errHeldTooLarge
	}
	if err != nil {
		// The provider produced the reply: it is charged, undelivered.
		t.chargeUndelivered(nil, int64(len(raw)), err)
		return err
	}
	pass := func(body []byte) error {
		resp.Body = t.jsonBody(io.NopCloser(bytes.NewReader(body)), resp.StatusCode, limit)
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	held := escrow.Reply{Form: escrow.FormJSON, Body: raw}
	res, derr := held.Decode(streamOf(t.req.api))
	if derr != nil {
		return pass(raw)
	}
	gated := s.esc.Gated(res, t.gateInput(), t.withheld)
	if len(gated) == 0 {
		return pass(raw)
	}
	c := t.client(escrow.FormJSON)
	c.Allow, c.Refusal = t.allowPolicy(), shape.Refusal(t.adm.Decision)
	if int64(len(raw)) > s.esc.MaxHeld() {
		// Too large to hold: the gated calls end the turn, refused.
		dr := &escrow.Decision{Reply: held, Texts: map[string]string{}}
		for _, g := range gated {
			dr.Refuse = append(dr.Refuse, g.Call.ID)
			dr.Texts[g.Call.ID] = "[gatekeeper] The call to " + g.Call.Name + " needs approval and the reply was too large to hold for it (approvals.max_held_bytes); the call was not delivered."
		}
		out, err := escrow.Render(streamOf(t.req.api), dr, c)
		if err != nil {
			return err
		}
		return pass(out)
	}
	h, err := t.openHold(context.WithoutCancel(t.ctx), res, held, gated, t.outcomeOf(res, resp.StatusCode, nil))
	if err != nil {
		// Nothing is delivered; what the provider produced is charged.
		t.chargeUndelivered(res, int64(len(raw)), err)
		return httpAnswer(escrow.ApprovalsDown(err))
	}
	out, err := s.esc.AwaitJSON(t.ctx, &escrow.Wait{Hold: h, Client: c})
	if err != nil {
		return answerError(err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}
