package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"gatekeeper/approvals"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/passthrough"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// continuer is the escrow's way to send, for client req (with its headers
// hdr), the model call that continues a held turn after refused calls.
// The call is admitted like a turn: its worst case reserved against its
// tenant's ceilings, then admitted on the hold's record (budget checked,
// estimate reserved), its output limit clamped by either, and charged as
// a turn, the charge settling its tenant's reservation. It is sent to the
// same provider with the client's headers, and read whole
// (escrow.Continue). A gated call in its reply is held in turn: the next
// hold of the same turn. A continuation its tenant's ceilings refuse is
// not sent: the client gets the refusal in its API's format, as an
// *escrow.Answer.
func (s *Server) continuer(req *request, hdr http.Header, log *slog.Logger) escrow.Continuer {
	return func(ctx context.Context, h *approvals.Hold, body []byte, form escrow.Form) ([]byte, *approvals.Hold, error) {
		sub, err := s.admitContinuation(ctx, req, log, h, body)
		if err != nil {
			return nil, nil, err
		}
		return req.rules.esc.Continue(ctx, &continuation{t: sub, hdr: hdr}, sub.req.api, form)
	}
}

// admitContinuation is the turn of the continuation body of hold h, for
// client req, admitted on the hold's record.
func (s *Server) admitContinuation(ctx context.Context, req *request, log *slog.Logger, h *approvals.Hold, body []byte) (*turn, error) {
	api := streaming.API(h.API)
	up, ok := req.rules.providers[h.Provider]
	if !ok {
		return nil, fmt.Errorf("provider %s of the held turn is no longer configured", h.Provider)
	}
	d := dialect.Of(api)
	pr, err := d.Stream.ParseRequest(body)
	if err != nil {
		return nil, err
	}
	rest, query := d.Rest(h.Model, h.Streamed)
	if d.Route != nil {
		pr.Model, pr.Stream = h.Model, h.Streamed // the route names them, not the body
	}
	if req.ownQuery != "" {
		// The agent's own key, when it came in the query, goes with it.
		query = strings.TrimPrefix(query+"&"+req.ownQuery, "&")
	}
	sub := &turn{s: s, req: &request{rules: req.rules, up: up, rest: rest, query: query, tenant: req.tenant, keyHash: req.keyHash, api: api, dialect: d, id: req.id,
		own: req.own, ownQuery: req.ownQuery}, rate: req.keyTurn(up),
		pr: pr, body: body, started: s.now(), ctx: ctx, log: log, recID: h.Trajectory, root: h.Root, turnHash: h.Key, gated: true,
		conts: h.Continuations + 1, maxOut: pr.MaxOutputTokens}
	if err := sub.reserveTenant(ctx); err != nil {
		return nil, refusedAnswer(err)
	}
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
	if err == nil && adm.Decision.Stage == meter.Halt {
		err = errors.New("the run's budget is spent")
	}
	if err != nil {
		req.rules.ceilings.Release(context.WithoutCancel(ctx), log, req.tenant.Name, &sub.ceil)
		return nil, fmt.Errorf("admitting the continuation: %w", err)
	}
	sub.adm = adm
	if adm.MaxOut > 0 {
		sub.maxOut = adm.MaxOut
	}
	if sub.body, err = shape.LimitOutput(body, sub.outputField(), d.Thinking, sub.maxOut, pr.MaxOutputTokens); err != nil {
		sub.body = body
		sub.failed(err) // admitted, never sent: its record and its tenant settle it
		return nil, err
	}
	return sub, nil
}

// refusedAnswer is a refusal of admission (agentError's *apierr.Error) as
// the escrow's answer to the client of a held turn; any other error as it
// is.
func refusedAnswer(err error) error {
	ae, ok := errors.AsType[*apierr.Error](err)
	if !ok {
		return err
	}
	return &escrow.Answer{Status: ae.Code, Type: ae.Type, Msg: ae.Msg, RetryAfter: ae.RetryAfter, NoRetry: ae.NoRetry, Err: err}
}

// continuation is the continuation turn's side of its model call.
type continuation struct {
	t      *turn
	hdr    http.Header // the client's headers, sent on
	status int         // the reply's, once sent
}

var _ escrow.Call = (*continuation)(nil)

// Send sends the continuation through the one send path: a model call
// like any other, it waits for key capacity in the tenant's class, and
// settling it corrects the estimate.
func (c *continuation) Send(ctx context.Context) (*http.Response, error) {
	t := c.t
	if err := agentError(t.rate.Acquire(ctx, outcome.EstimateTokens(int64(len(t.body))), t.maxOut, nil)); err != nil {
		return nil, err
	}
	// The same transport as the turn's own call: a provider refusal before
	// any byte (429, 529, 503, no connection) moves the continuation to
	// another key with room, and the reply's rate-limit headers reach the
	// key's settle.
	resp, err := t.send(ctx, c.hdr, t.req.query)
	if err != nil {
		return nil, err
	}
	c.status = resp.StatusCode
	if c.status < 200 || c.status > 299 {
		// Its body goes to the turn's event as its error's detail: never
		// with a fragment of a key in it.
		passthrough.RedactErrorBody(resp, t.req.up.cfg.Name, t.req.up.api, t.req.redacted())
	}
	return resp, nil
}

func (c *continuation) Failed(err error) { c.t.failed(err) }

func (c *continuation) Settle(res *streaming.Result, status int, body []byte) {
	if res == nil {
		c.t.settleUpstreamError(status, body)
		return
	}
	c.t.settle(c.t.outcomeOf(res, status, nil))
}

func (c *continuation) Gated(res *streaming.Result) []escrow.Gated { return c.t.gatedCalls(res) }

func (c *continuation) Open(ctx context.Context, res *streaming.Result, rep escrow.Reply, gated []escrow.Gated) (*approvals.Hold, error) {
	o := c.t.outcomeOf(res, c.status, nil)
	next, err := c.t.openHold(ctx, res, rep, gated, o)
	if err != nil {
		// Charged, and nothing of it delivered: the turn ends with the
		// earlier refusal.
		o.Calls, o.Stop = nil, string(streaming.StopEndTurn)
		c.t.settle(o)
	}
	return next, err
}
