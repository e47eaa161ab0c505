package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/config"
	"gatekeeper/internal/ride"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/proxy/internal/sweep"
	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// A turn's admission (package admit) bound to the turn: its call, its
// tenant's reservation, the store's update that admits it on its thread
// record (with the settles and the key take that ride along), and
// admission's refusals in the agent's error form.

// storeErr is a store failure of an admission as the agent is told it
// (agentError): fail closed, a 503 that asks for a retry. An
// apierr.Error, or a refusal, is returned as it is.
func storeErr(err error) error {
	if errors.As(err, new(*apierr.Error)) || errors.As(err, new(*admit.Refusal)) {
		return err
	}
	return agentError(&admit.Refusal{Kind: admit.Unavailable, Err: err})
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
		hidden := t.req.tenant.MaxInputTokens
		if hidden <= 0 {
			hidden = config.DefaultHiddenInputTokens
		}
		w := admit.Worst(t.req.rules.prices, t.req.api, t.pr.Model, t.body, hidden)
		t.worst = &w
	}
	return admit.Call{ID: t.call, Worst: *t.worst, MaxOut: t.maxOut, AgentSet: t.pr.MaxOutputTokens > 0, Person: t.req.person}
}

// reserveTenant reserves the turn's call against its tenant's ceilings
// (admit.Ceilings.Reserve), lowering its output limit to what the tenant
// has left.
func (t *turn) reserveTenant(ctx context.Context) error {
	h, err := t.req.rules.ceilings.Reserve(ctx, t.req.tenant, t.admitCall())
	if err != nil {
		return agentError(err)
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
	t.req.rules.ceilings.Settle(ctx, t.log, t.req.tenant, &t.ceil, admit.Amount(micros, usage))
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

// admit finds the turn's thread record (from a hint, or
// admit.Records.Place) and, in one atomic step over the record and its
// ancestors, checks the budget, reserves the call's estimate and moves the
// record READY → CALLING_MODEL, accepting the tool results the request
// carries. A thread that already has a call in flight
// forks a sibling: a call is never blocked for that.
func (t *turn) admit(ctx context.Context, r *http.Request) error {
	s := t.s
	rid, err := t.rootID(ctx, r)
	if err != nil {
		return err
	}
	t.req.run = rid
	key, parentKey := threadid.Key(r.Header, t.pr.Fingerprint)
	t.thread, t.root = key, rid
	ids := make([]string, len(t.pr.ToolResults))
	for i, tr := range t.pr.ToolResults {
		ids[i] = tr.ID
	}
	hintKey := t.req.tenant.Name + "\x00" + rid + "\x00" + key
	if h, ok := s.hints.Get(hintKey); ok {
		// The thread's record is known from an earlier call: admission is
		// one store call.
		t.shared = h.Shared
		err := t.admitOn(ctx, h.Parent, h.Base, key, ids)
		if !errors.Is(err, admit.ErrOtherThread) && !errors.Is(err, trajectory.ErrNotFound) {
			return err
		}
		s.hints.Drop(hintKey)
	}
	named := t.req.trajectoryID != "" || r.Header.Get("X-Gatekeeper-Trajectory") != ""
	root, h, shared, err := t.req.rules.records.Place(ctx, rid, named, t.req.tenant, key, parentKey)
	if shared {
		t.shared, t.sharedNew = true, true
	}
	if err != nil {
		return err
	}
	err = t.admitOn(ctx, h.Parent, h.Base, key, ids)
	if errors.Is(err, admit.ErrOtherThread) && h.Base == root.ID {
		// Another conversation claimed the root after it was read.
		if h.Base, err = t.child(ctx, root.ID, threadid.Child(root.ID, key), key); err != nil {
			return err
		}
		err = t.admitOn(ctx, h.Parent, h.Base, key, ids)
	}
	h.Shared = t.shared
	if errors.Is(err, admit.ErrOtherThread) || errors.Is(err, trajectory.ErrNotFound) {
		return storeErr(err)
	}
	if err == nil {
		s.hints.Put(hintKey, h)
	}
	return err
}

// child returns the record a thread under parent is admitted on
// (admit.Records.Thread): its own child id, or, once parent has
// limits.max_children children, the last of them, shared.
func (t *turn) child(ctx context.Context, parent, id, key string) (string, error) {
	id, shared, err := t.req.rules.records.Thread(ctx, parent, t.req.tenant.Name, id, key)
	if shared {
		t.shared, t.sharedNew = true, true
	}
	return id, err
}

// admitOn admits the turn on the thread record base, or on a sibling of
// it when base (and each earlier sibling) already has a call in flight
// (admit.Records.Fork).
func (t *turn) admitOn(ctx context.Context, parent, base, key string, ids []string) error {
	return t.req.rules.records.Fork(ctx, parent, base, t.req.tenant.Name, key, func(id string) error {
		chain, adm, err := t.admitWaiting(ctx, id, key, ids)
		if errors.Is(err, admit.ErrAwaiting) {
			// The record holds a reply for approval, or has just released
			// one: this request may be a retry of that turn.
			opening := errors.Is(err, admit.ErrHoldOpening)
			if found, err := t.findHold(ctx, id, opening); found || err != nil {
				return err
			}
			chain, adm, err = t.admitWaiting(ctx, id, key, ids)
		}
		switch {
		case errors.Is(err, admit.ErrBusy), errors.Is(err, admit.ErrOtherThread), errors.Is(err, trajectory.ErrNotFound):
			return err
		case err != nil:
			return storeErr(err)
		}
		t.recID, t.parentID = chain[0].ID, chain[0].ParentID
		t.req.run = t.recID
		t.adm = adm
		if adm.Ended {
			t.rate.DropRide(ctx)
			return admit.Ended(chain[0])
		}
		if adm.Decision.Stage == meter.Halt {
			t.rate.DropRide(ctx)
			return admit.Halted(chain[0], adm)
		}
		if adm.MaxOut > 0 {
			t.maxOut = adm.MaxOut
		}
		return nil
	})
}

// admitWaiting runs the admission step on record id, in the store's
// atomic update with the settles waiting behind the thread's replies and
// the turn's key take, as often as admit.Waiter has it wait and look
// again; an update whose answer was lost is sent again once.
func (t *turn) admitWaiting(ctx context.Context, id, key string, ids []string) ([]*trajectory.Record, admit.Admission, error) {
	var adm admit.Admission
	w := admit.Waiter{Tenant: t.req.tenant.Name, Store: t.s.store, PauseHold: t.req.rules.cfg.Limits.PauseHold.Std(), Resumes: t.s.live}
	if t.s.behind != nil {
		w.BusyStep = max(t.s.behind.Window(), time.Millisecond)
	}
	// retried: an attempt that ran with its answer lost was sent again;
	// the reservation it may have saved is given back should the retry
	// fail too, even one that failed before reaching the record.
	for retried := false; ; {
		var evs []trajectory.Event
		tried := len(t.tried)
		// The settles of the thread's earlier calls that wait behind their
		// replies (behind.go) go in the same update, ahead of admission.
		// Waiting for the flush of its settles is waiting on the store.
		pend, err := deadline.Spend(ctx, func(ctx context.Context) ([]*settle.Turn, error) { return t.s.behind.Take(ctx, id) })
		if err != nil {
			return nil, adm, err
		}
		pevs, perrs := make([][]trajectory.Event, len(pend)), make([]error, len(pend))
		uctx := ctx
		var take *ratelimit.Ride
		if t.rate.Riding() != nil && !t.rate.Riding().Sent() {
			// The key take goes in the update's round trip, once.
			take = t.rate.Riding()
		}
		// So do the key settles of the settles it takes, one on the
		// take's key in the take's own script call.
		keys := rideKeySettles(pend)
		if take != nil || keys != nil {
			uctx = ride.With(ctx, ratelimit.Fuse(take, keys))
		}
		chain, err := t.s.store.UpdateChain(uctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			var all []trajectory.Event
			for i, p := range pend {
				pevs[i], perrs[i] = p.Apply(chain)
				switch {
				case perrs[i] == nil:
					all = append(all, pevs[i]...)
				case !errors.Is(perrs[i], outcome.ErrSettled) && !errors.Is(perrs[i], outcome.ErrCallGone):
					return nil, perrs[i]
				}
			}
			var err error
			adm, evs, err = t.admitChain(chain, key, ids)
			return append(all, evs...), err
		})
		keys.Finish(context.WithoutCancel(ctx))
		if err == nil {
			t.admitEvents = evs
			t.chargeReclaimed(ctx)
			for i, p := range pend {
				p.Done(ctx, pevs[i], perrs[i])
			}
			t.s.behind.Applied(pend)
		} else {
			t.s.behind.GiveBack(pend)
		}
		if (err != nil || adm.Paused) && t.rate.Riding() != nil && t.rate.Riding().Sent() {
			// Refused, held, or unanswered: the take that rode with the
			// update goes back, and the turn takes its key after
			// admission, as a turn whose store carries no take.
			t.rate.DropRide(ctx)
		}
		if errors.Is(err, trajectory.ErrUnavailable) && (len(t.tried) > tried || retried) {
			// The reservation may have been saved with its answer lost.
			// Admission is idempotent by the call id, so it is sent
			// again once, in what is left of the turn's store time,
			// unless the store took all of it to fail (the turn waits no
			// longer); failing that, whatever was saved is given back.
			if !retried && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				retried = true
				continue
			}
			t.abandon(id, err)
			return nil, adm, err
		}
		again, err := w.Wait(ctx, id, err, adm.Paused, t.busyElsewhere)
		if !again {
			return chain, adm, err
		}
	}
}

// admitChain is the admission step on a thread record (chain[0]) and its
// ancestors (admit.Budget.Chain), run inside the store's atomic update:
// ids are the tool results the request hands in.
func (t *turn) admitChain(chain []*trajectory.Record, key string, ids []string) (admit.Admission, []trajectory.Event, error) {
	at := &admit.Turn{Tenant: t.req.tenant.Name, Thread: key, IDs: ids, Results: t.pr.ToolResults,
		Call: t.admitCall(), Input: outcome.EstimateTokens(int64(len(t.body))), Provider: t.req.up.cfg.Name, Model: t.pr.Model,
		Ceil: &t.ceil, Gated: t.gated, HoldChecked: t.holdChecked, OperatorsOnly: t.req.tenant.Trajectories == config.TrajectoriesOperators, Shared: t.shared, MaxChildren: t.req.rules.cfg.Limits.MaxChildren,
		Watchdog: t.req.rules.cfg.WatchdogFor(t.req.tenant), ReadOnly: t.req.tenant.ReadOnlyTools, Sweep: t.s.sweeper,
		Tried: t.tried, SharedNew: t.sharedNew, Interrupt: t.interrupt, Truncated: t.truncated, Loop: t.loop}
	adm, evs, err := t.req.rules.budget.Chain(chain, at, t.s.now())
	t.tried, t.sharedNew, t.busyElsewhere = at.Tried, at.SharedNew, at.BusyElsewhere
	t.interrupt, t.truncated, t.loop = at.Interrupt, at.Truncated, at.Loop
	t.reclaimed = at.Reclaimed
	return adm, evs, err
}

// chargeReclaimed logs the silent call the saved admission took for lost
// and charged as estimated, and charges it to its tenant's ledger.
func (t *turn) chargeReclaimed(ctx context.Context) {
	l := t.reclaimed
	if l.Call == "" {
		return
	}
	t.reclaimed = sweep.Lost{}
	t.s.sweeper.ChargeLedgers(context.WithoutCancel(ctx), l)
	t.s.log.LogAttrs(ctx, slog.LevelWarn, "lost call reclaimed by a request and charged as estimated", slog.String("trajectory", t.recID),
		slog.String("call", l.Call), slog.Any("usage", l.Usage), slog.Float64("dollars", l.Dollars), slog.String("owner", l.Owner))
}
