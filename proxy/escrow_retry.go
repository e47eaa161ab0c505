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
	"gatekeeper/proxy/internal/holds"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming"
)

// findHold looks, for a request admission found on a record that holds a
// reply for approval (or has just released one), for the held turn with
// this request's key. found is true when the request is answered from the
// hold (t.hold is set: it re-attaches) or refused (err: the turn's reply
// was delivered already, or the approvals store failed). When the record
// holds no turn of this key, admission goes on as usual. opening: the
// record is calling the model, and only a hold still undecided and
// undelivered (the call in flight's own) is this turn's: an earlier one
// of the same conversation is not.
func (t *turn) findHold(ctx context.Context, id string, opening bool) (found bool, err error) {
	h, err := t.s.esc.store.FindHold(ctx, id, t.key)
	if err == nil && h.Generation == 0 {
		h, err = holds.Latest(ctx, t.s.esc.store, h, maxHolds)
	}
	switch {
	case errors.Is(err, approvals.ErrNotFound),
		err == nil && opening && (h.Delivered || h.State != approvals.Holding):
		t.holdChecked = true
		return false, nil
	case err != nil:
		return true, errApprovalsDown(err)
	case h.Delivered:
		return true, errHeldDelivered()
	}
	t.hold, t.recID = h, id
	return true, nil
}

// serveReattach serves a retry of a held turn: no model call, no
// reservation. It waits for the decision like the original request did
// (keepalives on a stream) and receives the decided reply in its own form.
// The error is what the agent gets (writeError).
func (s *Server) serveReattach(w http.ResponseWriter, r *http.Request, t *turn) error {
	t.log.LogAttrs(r.Context(), slog.LevelInfo, "request re-attached to a held turn", slog.String("hold", t.hold.ID), slog.Bool("stream", t.pr.Stream))
	w.Header().Set("X-Gatekeeper-Trajectory", t.recID)
	c := &escrowClient{req: t.req, hdr: r.Header, form: formOf(t.pr.Stream), log: t.log}
	if c.form == formStream && dialectOf(t.req.api).askUsage {
		_, c.strip, _ = streaming.EnsureIncludeUsage(t.body)
	}
	wait := &escrowWait{hold: t.hold, c: c}
	if c.form == formStream {
		return s.writeRetryStream(w, r, wait)
	}
	out, err := s.awaitJSON(r.Context(), wait)
	if err != nil {
		if r.Context().Err() != nil {
			return errClientGone
		}
		return err
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
func (s *Server) writeRetryStream(w http.ResponseWriter, r *http.Request, wait *escrowWait) error {
	api := wait.c.req.api
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for {
		a := s.awaitDecision(r.Context(), wait)
		var out []byte
		switch a.end {
		case awaitPending:
			out = streamOf(api).NewKeepalive().Event()
		case awaitDecided:
			out = a.body
		default:
			he, drop := a.answer(formStream)
			if drop {
				return http.ErrAbortHandler // the agent retries, or a killed run gets no answer
			}
			out = errorEvent(api, he.Type, he.Msg)
		}
		if _, err := w.Write(out); err != nil {
			return nil // the agent went away
		}
		_ = rc.Flush()
		if a.end != awaitPending {
			return nil
		}
	}
}

// awaitJSON is the JSON writer, for the original non-streamed request and
// its retries alike: it waits until the decision and returns the decided
// reply as one JSON body, or the error the agent gets. A client that went
// away gets its context's error; a killed run's, no answer
// (http.ErrAbortHandler).
func (s *Server) awaitJSON(ctx context.Context, wait *escrowWait) ([]byte, error) {
	for {
		a := s.awaitDecision(ctx, wait)
		switch a.end {
		case awaitPending:
			continue
		case awaitDecided:
			return a.body, nil
		case awaitGone:
			return nil, a.err
		}
		he, drop := a.answer(formJSON)
		if drop {
			return nil, http.ErrAbortHandler
		}
		return nil, he
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
		resp.Body = &jsonBody{t: t, src: io.NopCloser(bytes.NewReader(body)), status: resp.StatusCode, limit: limit}
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	held := reply{form: formJSON, body: raw}
	res, derr := held.decode(t.req.api)
	if derr != nil {
		return pass(raw)
	}
	gated := t.gatedCalls(res)
	if len(gated) == 0 {
		return pass(raw)
	}
	c := &escrowClient{req: t.req, hdr: t.hdr, form: formJSON, allow: t.allowPolicy(), refusal: shape.Refusal(t.adm.Decision), log: t.log}
	if int64(len(raw)) > s.esc.maxHeld {
		// Too large to hold: the gated calls end the turn, refused.
		dr := &decidedReply{reply: held, texts: map[string]string{}}
		for _, g := range gated {
			dr.refuse = append(dr.refuse, g.tc.ID)
			dr.texts[g.tc.ID] = "[gatekeeper] The call to " + g.tc.Name + " needs approval and the reply was too large to hold for it (approvals.max_held_bytes); the call was not delivered."
		}
		out, err := render(t.req.api, dr, c)
		if err != nil {
			return err
		}
		return pass(out)
	}
	h, err := t.openHold(context.WithoutCancel(t.ctx), res, held, gated, t.outcomeOf(res, resp.StatusCode, nil))
	if err != nil {
		// Nothing is delivered; what the provider produced is charged.
		t.chargeUndelivered(res, int64(len(raw)), err)
		return errApprovalsDown(err)
	}
	out, err := s.awaitJSON(t.ctx, &escrowWait{hold: h, c: c})
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}
