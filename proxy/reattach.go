package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"gatekeeper/approvals"
	"gatekeeper/streaming"
)

// findHold looks, for a request admission found on a record that holds a
// reply for approval (or has just released one), for the held turn with
// this request's key. found is true when the request is answered from the
// hold (t.hold is set: it re-attaches) or refused (err: the turn's reply
// was delivered already, or the approvals store failed). When the record
// holds no turn of this key, admission goes on as usual.
func (t *turn) findHold(ctx context.Context, id string) (found bool, err error) {
	var h *approvals.Hold
	for gen := 0; gen <= maxHoldGenerations; gen++ {
		next, err := t.s.esc.store.FindHold(ctx, id, holdKey(t.key, gen))
		if errors.Is(err, approvals.ErrNotFound) {
			break
		}
		if err != nil {
			return true, errApprovalsDown(err)
		}
		h = next // the latest generation decides
	}
	switch {
	case h == nil:
		t.holdChecked = true
		return false, nil
	case h.Delivered:
		return true, &HTTPError{Code: http.StatusConflict, Type: errInvalidRequest, NoRetry: true,
			Msg: "this turn's reply, held for approval, was already delivered to an earlier request of the same turn; continue from it"}
	}
	t.hold, t.recID = h, id
	return true, nil
}

// serveReattach serves a retry of a held turn: no model call, no
// reservation. It waits for the decision like the original request did
// (keepalives on a stream) and receives the decided reply in its own form.
func (s *Server) serveReattach(w http.ResponseWriter, r *http.Request, t *turn) {
	h, api := t.hold, t.req.api
	log := t.log.With(slog.String("hold", h.ID))
	log.LogAttrs(r.Context(), slog.LevelInfo, "request re-attached to a held turn", slog.Bool("stream", t.pr.Stream))
	w.Header().Set("X-Gatekeeper-Trajectory", t.recID)
	c := &holdClient{req: t.req, hdr: r.Header, stream: t.pr.Stream, log: log}
	if c.stream && dialectOf(api).askUsage {
		_, c.strip, _ = streaming.EnsureIncludeUsage(t.body)
	}
	rc := http.NewResponseController(w)
	if c.stream {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
	}
	fail := func(he *HTTPError) {
		if c.stream {
			_, _ = w.Write(errorEvent(api, he.Type, he.Msg))
			_ = rc.Flush()
			return
		}
		writeError(w, api, he)
	}
	for {
		reqs, done, err := s.holdStep(r.Context(), h, s.esc.keepalive)
		var stopped *errRunStopped
		switch {
		case errors.As(err, &stopped) && stopped.kill:
			panic(http.ErrAbortHandler) // a killed run gets no answer
		case errors.As(err, &stopped):
			fail(stoppedError(stopped))
			return
		case r.Context().Err() != nil:
			return // the client went away; the hold stays
		case errors.Is(err, errServerClosing) && c.stream:
			panic(http.ErrAbortHandler) // the agent retries elsewhere
		case errors.Is(err, errServerClosing):
			fail(errHeldClosing())
			return
		case err != nil:
			fail(errApprovalsDown(err))
			return
		case !done:
			if c.stream {
				if _, err := w.Write(streamOf(api).NewKeepalive().Event()); err != nil {
					return
				}
				_ = rc.Flush()
			}
			continue
		}
		if h = s.deliverHeld(w, r, h, reqs, c, fail); h == nil {
			return
		}
	}
}

// deliverHeld settles a decided hold and writes its reply to a re-attached
// client; it returns the next hold when the turn is held again.
func (s *Server) deliverHeld(w http.ResponseWriter, r *http.Request, h *approvals.Hold, reqs []*approvals.Request, c *holdClient, fail func(*HTTPError)) *approvals.Hold {
	ctx := context.WithoutCancel(r.Context())
	hr, err := s.settleHold(ctx, h, reqs, c)
	switch {
	case errors.Is(err, errDelivered):
		fail(errHeldDelivered())
		return nil
	case err != nil:
		c.log.LogAttrs(ctx, slog.LevelError, "settling a held turn failed", slog.String("error", err.Error()))
		fail(errApprovalsDown(err))
		return nil
	case hr.next != nil:
		return hr.next
	}
	out, err := render(c.req.api, hr, c)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelError, "rendering the decided reply failed", slog.String("error", err.Error()))
		fail(&HTTPError{Code: http.StatusInternalServerError, Type: errUpstream, NoRetry: true, Err: err,
			Msg: "gatekeeper could not render the decided reply of this held turn"})
		return nil
	}
	if !c.stream {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.Write(out)
	_ = http.NewResponseController(w).Flush()
	return nil
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
		resp.Body = &jsonBody{t: t, src: io.NopCloser(bytes.NewReader(body)), status: resp.StatusCode, limit: limit}
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	res, derr := streamOf(t.req.api).DecodeJSON(raw)
	if derr != nil {
		return pass(raw)
	}
	gated := t.gatedCalls(res)
	if len(gated) == 0 {
		return pass(raw)
	}
	c := &holdClient{req: t.req, hdr: t.hdr, allow: t.allowPolicy(), refusal: t.refusal, log: t.log}
	if int64(len(raw)) > s.esc.maxHeld {
		// Too large to hold: the gated calls end the turn, refused.
		hr := &heldReply{body: raw, texts: map[string]string{}}
		for _, g := range gated {
			hr.refuse = append(hr.refuse, g.tc.ID)
			hr.texts[g.tc.ID] = "[gatekeeper] The call to " + g.tc.Name + " needs approval and the reply was too large to hold for it (approvals.max_held_bytes); the call was not delivered."
		}
		out, err := render(t.req.api, hr, c)
		if err != nil {
			return err
		}
		return pass(out)
	}
	ctx := context.WithoutCancel(t.ctx)
	h, err := t.openHold(ctx, res, raw, false, gated, t.outcomeOf(res, resp.StatusCode, nil))
	if err != nil {
		// Nothing is delivered; what the provider produced is charged.
		t.chargeUndelivered(res, int64(len(raw)), err)
		return errApprovalsDown(err)
	}
	for {
		reqs, done, err := s.holdStep(t.ctx, h, s.esc.keepalive)
		var stopped *errRunStopped
		switch {
		case errors.As(err, &stopped) && stopped.kill:
			panic(http.ErrAbortHandler)
		case errors.As(err, &stopped):
			return stoppedError(stopped)
		case err != nil && t.ctx.Err() != nil:
			return t.ctx.Err() // the client went away; the hold stays
		case errors.Is(err, errServerClosing):
			return errHeldClosing()
		case err != nil:
			return errApprovalsDown(err)
		case !done:
			continue
		}
		hr, err := s.settleHold(ctx, h, reqs, c)
		if errors.Is(err, errDelivered) {
			return errHeldDelivered()
		}
		if err != nil {
			return errApprovalsDown(err)
		}
		if hr.next != nil {
			h = hr.next // held again: the continuation made a gated call
			continue
		}
		out, err := render(t.req.api, hr, c)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
		return nil
	}
}
