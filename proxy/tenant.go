package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/ceiling"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// A tenant's ceilings (tenants[].limits) bound all its runs together: a
// call reserves its worst case against the tenant's ledger before its run
// admits it, and is clamped, or refused, by what the tenant has left, as
// by a run's budget. The ledger's keys are not the run's, so the two are
// separate atomic steps of one admission: the tenant's first, released
// again should the run refuse the call.

// tenantReserveAttempts bounds the reservations tried when other calls of
// the tenant take its room between reading it and reserving.
const tenantReserveAttempts = 8

// tenantHold is what a turn reserved against its tenant's ceilings.
type tenantHold struct {
	call   string // the ledger's id of the reservation; "" when none
	clamp  map[string]any
	passed bool // the reservation was handed to the turn's settle
}

// reserveTenant reserves the call's worst case against its tenant's
// ceilings, lowering its output limit to what the tenant has left. It
// refuses the call (402 budget_exceeded, naming the ceiling and when room
// frees up) only when not even the input and a minimal reply fit. A call
// whose room is held by the tenant's calls in flight waits for them, as
// for a run's budget.
func (t *turn) reserveTenant(ctx context.Context) error {
	s, tn := t.s, t.req.tenant
	lim := ceiling.Limits(tn)
	if s.ledger == nil || !lim.Spends() {
		return nil
	}
	w := t.worstCase()
	asked := t.maxOut
	if asked <= 0 {
		asked = defaultMaxOutput
	}
	need := min(asked, max(s.minOutput, 1))
	// The turn's own call id: a sweeper that reclaims the call charges
	// the tenant under it, and the ledger's settle is idempotent by call.
	call := t.callID()
	var since time.Time
	wait := 5 * time.Millisecond
	for attempt := 0; attempt < tenantReserveAttempts; {
		u, err := s.ledger.Usage(ctx, tn.Name)
		if err != nil {
			return storeErr(err)
		}
		ls := ceiling.Levels(tn, u)
		f := meter.FitCall(ls, w, false)
		if f.MaxOutput < need {
			if meter.FitCall(ls, w, true).MaxOutput < need {
				return &HTTPError{Code: http.StatusPaymentRequired, Type: errBudgetExceeded, NoRetry: true,
					Msg: ceiling.Refusal(tn, u, f, w.Reservation(need))}
			}
			// The tenant's calls in flight hold the rest: they may give
			// some back when they settle.
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) > budgetWaitMax || sleepCtx(ctx, wait) != nil {
				return &HTTPError{Code: http.StatusTooManyRequests, Type: errRateLimited, RetryAfter: 5 * time.Second,
					Msg: fmt.Sprintf("the calls tenant %s has in flight hold the rest of its %s limit; retry when they finish", tn.Name, ceiling.Name(f))}
			}
			wait = min(wait*2, budgetWaitStep)
			continue
		}
		out := min(asked, f.MaxOutput)
		r := w.Reservation(out)
		ok, err := s.ledger.Reserve(ctx, tn.Name, call, tenant.Amount{Micros: r.Micros, Tokens: r.Tokens}, lim, s.staleCall(tn))
		if err != nil {
			return storeErr(err)
		}
		if !ok {
			// Another call took the room between the reading and the
			// reservation: read again.
			attempt++
			continue
		}
		t.ceil.call = call
		if out < asked {
			t.maxOut = out
			t.ceil.clamp = map[string]any{"to": out, "binding": "tenant " + tn.Name, "binding_dimension": f.Binding,
				"limit": ceiling.Name(f), "reserved_dollars": meter.ToDollars(r.Micros)}
			if asked != defaultMaxOutput || t.pr.MaxOutputTokens > 0 {
				t.ceil.clamp["from"] = asked
			}
		}
		return nil
	}
	return &HTTPError{Code: http.StatusTooManyRequests, Type: errRateLimited, RetryAfter: time.Second,
		Msg: fmt.Sprintf("tenant %s's calls contend for the rest of its limits; retry shortly", tn.Name)}
}

// clampEvent is the budget_clamp event of a call its tenant's ceilings
// clamped, on the thread record id; nil when they did not.
func (t *turn) tenantClampEvent(id string, now time.Time) []trajectory.Event {
	if t.ceil.clamp == nil {
		return nil
	}
	return []trajectory.Event{chainrule.Event(id, now, trajectory.EventBudgetClamp, t.ceil.clamp)}
}

// releaseTenant gives back the reservation of a call that was not sent.
func (t *turn) releaseTenant() {
	if t.ceil.call == "" || t.ceil.passed {
		return
	}
	t.ceil.passed = true
	t.settleTenantWith(context.WithoutCancel(t.ctx), tenant.Amount{})
}

// settleTenant charges the turn's spend to its tenant's ledger and
// releases its reservation. A turn of a tenant without spend ceilings
// charges nothing: the ledger keeps only what the ceilings need.
func (t *turn) settleTenant(ctx context.Context, charge meter.Charge, o outcome) {
	if t.s.ledger == nil || !ceiling.Limits(t.req.tenant).Spends() {
		return
	}
	t.ceil.passed = true
	var used tenant.Amount
	if !o.upstream {
		used = tenant.Amount{Micros: charge.Micros, Tokens: trajectory.Spend{InputTokens: o.usage.InputTokens,
			CachedInputTokens: o.usage.CachedInputTokens, CacheWriteTokens: o.usage.CacheWriteTokens, OutputTokens: o.usage.OutputTokens}.Tokens()}
	}
	t.settleTenantWith(ctx, used)
}

func (t *turn) settleTenantWith(ctx context.Context, used tenant.Amount) {
	t.s.chargeTenant(ctx, t.log, t.req.tenant.Name, t.ceil.call, used)
}

// chargeTenant settles call on its tenant's ledger: its reservation is
// released and used charged. A store that is out is retried in the
// background; any other failure is logged with the figures.
func (s *Server) chargeTenant(ctx context.Context, log *slog.Logger, name, call string, used tenant.Amount) {
	write := func(ctx context.Context) error { return s.ledger.Settle(ctx, name, call, used) }
	err := write(ctx)
	if err == nil {
		return
	}
	attrs := []slog.Attr{slog.String("tenant", name), slog.String("call", call),
		slog.Int64("micros", used.Micros), slog.Int64("tokens", used.Tokens)}
	if errors.Is(err, trajectory.ErrUnavailable) {
		s.settles.Retry(log, settle.WriteTenant, write, attrs)
		return
	}
	log.LogAttrs(ctx, slog.LevelError, "tenant charge not recorded", append(attrs, slog.String("error", err.Error()))...)
}

// mayStart decides whether a request may start run id of its tenant: a
// tenant whose runs operators start refuses it, and the tenant's live and
// hourly ceilings count it. named says the request named the run itself.
func (s *Server) mayStart(ctx context.Context, tn *config.Tenant, id string, named bool) error {
	name := trajectory.Unscoped(id, tn.Name) // as the agent named it
	if tn.Trajectories == config.TrajectoriesOperators {
		msg := fmt.Sprintf("tenant %s's runs are started by operators only (tenants[].trajectories: operators), and this request names no trajectory; ask an operator to create one through the admin API and send its id in X-Gatekeeper-Trajectory", tn.Name)
		if named {
			msg = fmt.Sprintf("tenant %s's runs are started by operators only (tenants[].trajectories: operators), and no operator created trajectory %s; ask an operator to create it through the admin API", tn.Name, name)
		}
		return &HTTPError{Code: http.StatusForbidden, Type: errPermission, NoRetry: true, Msg: msg}
	}
	lim := ceiling.Limits(tn)
	if s.ledger == nil || lim.MaxLive == 0 && lim.NewPerHour == 0 {
		return nil
	}
	st, err := s.ledger.StartRun(ctx, tn.Name, id, lim)
	if err == nil && st.Refused == tenant.LimitLive {
		// The ledger learns of finished runs only here: forget those
		// and try again.
		var n int
		if n, err = s.pruneLive(ctx, tn.Name); err == nil && n > 0 {
			st, err = s.ledger.StartRun(ctx, tn.Name, id, lim)
		}
	}
	if err != nil {
		return storeErr(err)
	}
	switch st.Refused {
	case tenant.LimitLive:
		return &HTTPError{Code: http.StatusPaymentRequired, Type: errBudgetExceeded, NoRetry: true,
			Msg: fmt.Sprintf("tenant %s has reached its %s limit (%d runs not finished); trajectory %s was not started; it resets when one of the tenant's runs finishes",
				tn.Name, tenant.LimitLive, lim.MaxLive, name)}
	case tenant.LimitNewPerHour:
		return &HTTPError{Code: http.StatusPaymentRequired, Type: errBudgetExceeded, NoRetry: true,
			Msg: fmt.Sprintf("tenant %s has reached its %s limit (%d runs started in the last hour); trajectory %s was not started; it resets at %s",
				tn.Name, tenant.LimitNewPerHour, lim.NewPerHour, name, st.Retry.UTC().Format(time.RFC3339))}
	}
	return nil
}

// unstart forgets a run counted live whose record could not be created.
func (s *Server) unstart(tn *config.Tenant, id string) {
	if s.ledger == nil || tn.Limits.MaxLiveTrajectories == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.ledger.EndRuns(ctx, tn.Name, id); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "a run that did not start still counts as live", slog.String("tenant", tn.Name),
			slog.String("trajectory", id), slog.String("error", err.Error()))
	}
}

// pruneLive forgets the runs the ledger counts live that have finished
// or expired, and returns how many.
func (s *Server) pruneLive(ctx context.Context, name string) (int, error) {
	ids, err := s.ledger.LiveRuns(ctx, name)
	if err != nil {
		return 0, err
	}
	var ended []string
	for _, id := range ids {
		rec, err := s.store.Get(ctx, id)
		switch {
		case errors.Is(err, trajectory.ErrNotFound):
			ended = append(ended, id)
		case err != nil:
			return 0, err
		case rec.State.Terminal():
			ended = append(ended, id)
		}
	}
	return len(ended), s.ledger.EndRuns(ctx, name, ended...)
}
