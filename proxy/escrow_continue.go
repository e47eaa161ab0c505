package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"gatekeeper/approvals"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// continueHeld asks the model to go on after refused calls: the held
// request, plus the held reply, plus each call's REFUSED result. The call
// is admitted on the hold's record like a turn (budget checked, estimate
// reserved, charged as a turn), sent to the same provider with the
// client's headers, and read whole; its reply is spliced into base, the
// held reply as the client would get it, so that the client reads one
// coherent message. A gated call in the continuation is held in turn: the
// reply is the next hold of the same turn, which the client waits on.
func (s *Server) continueHeld(ctx context.Context, h *approvals.Hold, base reply, results map[string][]byte, c *escrowClient) (*decidedReply, error) {
	api := streaming.API(h.API)
	body, err := streamOf(api).Continuation(h.Request, h.Reply, h.Streamed, results)
	if err != nil {
		return nil, err
	}
	up, ok := s.providers[h.Provider]
	if !ok {
		return nil, fmt.Errorf("provider %s of the held turn is no longer configured", h.Provider)
	}
	pr, err := streamOf(api).ParseRequest(body)
	if err != nil {
		return nil, err
	}
	sub := &turn{s: s, req: &request{up: up, rest: dialectOf(api).path, tenant: c.req.tenant, keyHash: c.req.keyHash, api: api, id: c.req.id},
		pr: pr, body: body, started: s.now(), ctx: ctx, log: c.log, recID: h.Trajectory, root: h.Root, key: h.Key, gated: true,
		conts: h.Continuations + 1, maxOut: pr.MaxOutputTokens}
	var adm admit.Admission
	_, err = s.store.UpdateChain(ctx, h.Trajectory, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		var evs []trajectory.Event
		var err error
		sub.thread = chain[0].Thread
		adm, evs, err = sub.admitChain(chain, chain[0].Thread, nil)
		if err == nil && adm.Paused {
			err = errors.New("the run was paused")
		}
		return evs, err
	})
	if err != nil {
		return nil, fmt.Errorf("admitting the continuation: %w", err)
	}
	sub.adm = adm
	if adm.Decision.Stage == meter.Halt {
		return nil, errors.New("the run's budget is spent")
	}
	raw, status, err := s.callUpstream(ctx, sub, c.hdr)
	if err != nil {
		sub.failed(err)
		return nil, err
	}
	if status < 200 || status > 299 {
		sub.settle(outcome{stop: "error", status: status, upstream: true, detail: upstreamErrorDetail(api, raw)})
		return nil, fmt.Errorf("provider answered the continuation with status %d", status)
	}
	cont := reply{form: base.form, body: raw}
	res, err := cont.decode(api)
	if err != nil {
		sub.failed(err)
		return nil, err
	}
	o := sub.outcomeOf(res, status, nil)
	if res.Truncated || len(res.Errors) > 0 {
		sub.settle(o)
		return nil, errors.New("the continuation did not end cleanly")
	}
	if gated := sub.gatedCalls(res); len(gated) > 0 {
		next, err := sub.openHold(ctx, res, cont, gated, o)
		if err != nil {
			// Charged, and nothing of it delivered: the turn ends with the
			// earlier refusal.
			o.calls, o.stop = nil, string(streaming.StopEndTurn)
			sub.settle(o)
			return nil, fmt.Errorf("holding the continuation's gated call: %w", err)
		}
		return &decidedReply{next: next}, nil
	}
	sub.settle(o)
	spliced, err := base.splice(api, raw)
	if err != nil {
		return nil, err
	}
	return &decidedReply{reply: spliced}, nil
}

// callUpstream sends the continuation t through the one send path, on a
// key with capacity, with the client's headers hdr, and reads the whole
// reply, bounded by approvals.max_held_bytes.
func (s *Server) callUpstream(ctx context.Context, t *turn, hdr http.Header) ([]byte, int, error) {
	// A continuation is a model call like any other: it waits for key
	// capacity in the tenant's class, and settling it corrects the estimate.
	if err := t.acquireKey(ctx, nil); err != nil {
		return nil, 0, err
	}
	// The same transport as the turn's own call: a provider refusal before
	// any byte (429, 529, 503, no connection) moves the continuation to
	// another key with room, and the reply's rate-limit headers reach the
	// key's settle.
	resp, err := t.send(ctx, hdr, "")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	limit := s.esc.maxHeld
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if int64(len(raw)) > limit {
		return nil, resp.StatusCode, errHeldTooLarge
	}
	return raw, resp.StatusCode, nil
}
