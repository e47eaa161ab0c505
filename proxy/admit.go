package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/trajectory"
)

// A turn's admission (package admit) bound to the turn: its call, its
// tenant's reservation, and admission's refusals in the agent's error
// form.

// admitted is err in the agent's error form: an *admit.Refusal becomes
// the HTTPError it describes (a store failure, storeErr's); any other
// error, an HTTPError above all, is returned as it is.
func admitted(err error) error {
	var r *admit.Refusal
	if errors.As(err, new(*apierr.Error)) || !errors.As(err, &r) {
		return err
	}
	switch r.Kind {
	case admit.Exhausted:
		return &apierr.Error{Code: http.StatusPaymentRequired, Type: apierr.BudgetExceeded, NoRetry: true, Msg: r.Msg, Err: r.Err}
	case admit.Contended:
		return &apierr.Error{Code: http.StatusTooManyRequests, Type: apierr.RateLimited, RetryAfter: r.RetryAfter, Msg: r.Msg, Err: r.Err}
	case admit.OperatorsOnly:
		return &apierr.Error{Code: http.StatusForbidden, Type: apierr.Permission, NoRetry: true, Msg: r.Msg, Err: r.Err}
	}
	return storeErr(r.Err)
}

// storeErr turns a store failure into the agent's answer: fail closed.
func storeErr(err error) error {
	var he *apierr.Error
	if errors.As(err, &he) {
		return err
	}
	return &apierr.Error{Code: http.StatusServiceUnavailable, Type: "api_error",
		Msg: "gatekeeper's store is unavailable, so no new turn can be admitted; retry shortly", RetryAfter: 5e9, Err: err}
}

// admitCall is the turn's call as admission weighs it: its id, drawn
// once, and its worst case, read once, so that the tenant's ceilings and
// every attempt at admitting the call against its budgets weigh the same
// call under the same id (an attempt that finds the id on the record
// knows the reservation is its own).
func (t *turn) admitCall() admit.Call {
	if t.call == "" {
		t.call = admit.NewCallID()
	}
	if t.worst == nil {
		w := admit.Worst(t.s.prices, t.pr.Model, t.body)
		t.worst = &w
	}
	return admit.Call{ID: t.call, Worst: *t.worst, MaxOut: t.maxOut, AgentSet: t.pr.MaxOutputTokens > 0}
}

// reserveTenant reserves the turn's call against its tenant's ceilings
// (admit.Ceilings.Reserve), lowering its output limit to what the tenant
// has left.
func (t *turn) reserveTenant(ctx context.Context) error {
	h, err := t.s.ceilings.Reserve(ctx, t.req.tenant, t.admitCall())
	if err != nil {
		return admitted(err)
	}
	t.ceil = h
	if h.MaxOut > 0 {
		t.maxOut = h.MaxOut
	}
	return nil
}

// settleTenant charges the turn's spend to its tenant's ledger and
// releases its reservation; a call the provider refused spent nothing.
func (t *turn) settleTenant(ctx context.Context, charge meter.Charge, o outcome.Turn) {
	var micros int64
	var usage trajectory.Usage
	if !o.Upstream {
		micros, usage = charge.Micros, o.Usage
	}
	t.s.ceilings.Settle(ctx, t.log, t.req.tenant, &t.ceil, admit.Amount(micros, usage))
}

// reserve admits the turn's call against every budget of its chain
// (admit.Budget.Reserve), inside the store's atomic update; what each
// attempt reserved is kept in tried.
func (t *turn) reserve(chain []*trajectory.Record, now time.Time) (admit.Admission, []trajectory.Event, error) {
	adm, evs, err := t.s.budget.Reserve(chain, t.admitCall(), outcome.EstimateTokens(int64(len(t.body))), now)
	if err == nil && adm.Decision.Stage != meter.Halt {
		t.tried = append(t.tried, adm)
	}
	return adm, evs, err
}

// abandon gives back, in the background, a reservation the turn may have
// made though its admission failed: the store's answer was lost, and the
// script may have run. It is idempotent by call id (admit.Abandon).
func (t *turn) abandon(id string, cause error) {
	if t.call == "" || len(t.tried) == 0 {
		return
	}
	call := t.call
	release := func(ctx context.Context) error {
		_, err := t.s.store.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			return admit.Abandon(chain, call, t.s.now())
		})
		if errors.Is(err, admit.ErrNotHeld) {
			return nil
		}
		return err
	}
	attrs := []slog.Attr{slog.String("trajectory", id), slog.String("call", call), slog.String("cause", cause.Error())}
	t.s.settles.Retry(t.s.log, settle.WriteRelease, release, attrs)
}
