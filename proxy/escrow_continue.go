package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"gatekeeper/approvals"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// continuer is the escrow's way to send, for client req (with its headers
// hdr), the model call that continues a held turn after refused calls.
// The call is admitted on the hold's record like a turn (budget checked,
// estimate reserved, charged as a turn), sent to the same provider with
// the client's headers, and read whole. A gated call in its reply is held
// in turn: the next hold of the same turn.
func (s *Server) continuer(req *request, hdr http.Header, log *slog.Logger) escrow.Continuer {
	return func(ctx context.Context, h *approvals.Hold, body []byte, form escrow.Form) ([]byte, *approvals.Hold, error) {
		api := streaming.API(h.API)
		up, ok := s.providers[h.Provider]
		if !ok {
			return nil, nil, fmt.Errorf("provider %s of the held turn is no longer configured", h.Provider)
		}
		pr, err := dialect.Stream(api).ParseRequest(body)
		if err != nil {
			return nil, nil, err
		}
		sub := &turn{s: s, req: &request{up: up, rest: dialect.Of(api).Path, tenant: req.tenant, keyHash: req.keyHash, api: api, id: req.id}, rate: s.sched.Turn(up.pool, req.tenant.Priority),
			pr: pr, body: body, started: s.now(), ctx: ctx, log: log, recID: h.Trajectory, root: h.Root, key: h.Key, gated: true,
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
			return nil, nil, fmt.Errorf("admitting the continuation: %w", err)
		}
		sub.adm = adm
		if adm.Decision.Stage == meter.Halt {
			return nil, nil, errors.New("the run's budget is spent")
		}
		raw, status, err := s.callUpstream(ctx, sub, hdr)
		if err != nil {
			sub.failed(err)
			return nil, nil, err
		}
		if status < 200 || status > 299 {
			sub.settle(outcome.Turn{Stop: "error", Status: status, Upstream: true, Detail: upstreamErrorDetail(api, raw)})
			return nil, nil, fmt.Errorf("provider answered the continuation with status %d", status)
		}
		cont := escrow.Reply{Form: form, Body: raw}
		res, err := cont.Decode(dialect.Stream(api))
		if err != nil {
			sub.failed(err)
			return nil, nil, err
		}
		o := sub.outcomeOf(res, status, nil)
		if res.Truncated || len(res.Errors) > 0 {
			sub.settle(o)
			return nil, nil, errors.New("the continuation did not end cleanly")
		}
		if gated := s.esc.Gated(res, sub.gateInput(), sub.withheld); len(gated) > 0 {
			next, err := sub.openHold(ctx, res, cont, gated, o)
			if err != nil {
				// Charged, and nothing of it delivered: the turn ends with the
				// earlier refusal.
				o.Calls, o.Stop = nil, string(streaming.StopEndTurn)
				sub.settle(o)
				return nil, nil, fmt.Errorf("holding the continuation's gated call: %w", err)
			}
			return nil, next, nil
		}
		sub.settle(o)
		return raw, nil, nil
	}
}

// callUpstream sends the continuation t through the one send path, on a
// key with capacity, with the client's headers hdr, and reads the whole
// reply, bounded by approvals.max_held_bytes.
func (s *Server) callUpstream(ctx context.Context, t *turn, hdr http.Header) ([]byte, int, error) {
	// A continuation is a model call like any other: it waits for key
	// capacity in the tenant's class, and settling it corrects the estimate.
	if err := keyRefused(t.rate.Acquire(ctx, outcome.EstimateTokens(int64(len(t.body))), t.maxOut, nil)); err != nil {
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
	limit := s.esc.MaxHeld()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if int64(len(raw)) > limit {
		return nil, resp.StatusCode, errHeldTooLarge
	}
	return raw, resp.StatusCode, nil
}
