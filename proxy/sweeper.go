package proxy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/ceiling"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Calls in flight cannot leak: every replica beats for its own calls (the
// record's CallBeat, with the output streamed so far as CallOutput) and
// sweeps the store for calls whose replica fell silent. The store's atomic
// update coordinates the replicas: the first sweep to find a call still
// there and still silent reclaims it, the others find it gone.

// errNotLost aborts a sweep of a call that settled, or beat, meanwhile.
var errNotLost = errors.New("proxy: call not lost")

// beatEvery is store.heartbeat; lostAfter how long a call may go without a
// beat before it is taken for lost.
func (s *Server) beatEvery() time.Duration {
	if d := s.cfg.Store.Heartbeat.Std(); d > 0 {
		return d
	}
	return config.DefaultHeartbeat
}

func (s *Server) lostAfter() time.Duration { return config.LostBeats * s.beatEvery() }

// silent reports a call in flight on rec whose replica stopped beating:
// its last beat is older than lostAfter. sweeping says the sweeper asks,
// not a request on the record. A request waits one heartbeat more: a
// sweep charges the call as estimated, a request reclaims it uncharged
// (only its reply would be charged, and a crashed replica's never comes),
// so the sweeps, which every replica runs each beat, come first even on
// a loaded host.
func (s *Server) silent(rec *trajectory.Record, now time.Time, sweeping bool) bool {
	if rec.State != trajectory.CallingModel || rec.Call == "" {
		return false
	}
	if rec.CallBeat.IsZero() {
		// A call of a version that wrote no beat: taken for lost past the
		// stale-call bound, by the next request on its record only (it
		// has no estimate to charge).
		return !sweeping && now.Sub(rec.UpdatedAt) >= admit.StaleAfter(s.tenant(rec.Tenant))
	}
	bound := s.lostAfter()
	if !sweeping {
		bound += s.beatEvery()
	}
	return now.Sub(rec.CallBeat) >= bound
}

// tenant is the config of a tenant by name; an empty one when the config
// no longer has it.
func (s *Server) tenant(name string) *config.Tenant {
	for i := range s.cfg.Tenants {
		if s.cfg.Tenants[i].Name == name {
			return &s.cfg.Tenants[i]
		}
	}
	return &config.Tenant{Name: name}
}

// watchCalls beats for this replica's calls and sweeps lost ones until ctx
// ends. Its first sweep reclaims the calls this replica left unsettled
// when it last stopped: no call of a process that just started is alive.
func (s *Server) watchCalls(ctx context.Context) {
	s.sweepCalls(ctx, true)
	close(s.startSwept)
	tick := time.NewTicker(s.beatEvery())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.beat(ctx)
			s.sweepCalls(ctx, false)
		}
	}
}

// beat tells the store that this replica's calls in flight are alive, and
// how much output each has streamed.
func (s *Server) beat(ctx context.Context) {
	for _, t := range s.live.All() {
		call, streamed := t.adm.Call, t.streamed.Load()
		_, err := s.store.Update(ctx, t.recID, func(r *trajectory.Record) ([]trajectory.Event, error) {
			if r.Call != call || r.State != trajectory.CallingModel {
				return nil, errNotLost
			}
			r.CallBeat, r.CallOutput = s.now(), estimateTokens(streamed)
			return nil, nil
		})
		if err != nil && !errors.Is(err, errNotLost) && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "heartbeat of a call in flight failed", slog.String("trajectory", t.recID),
				slog.String("call", call), slog.String("error", err.Error()))
		}
	}
}

// sweepCalls reclaims the calls in flight whose replica fell silent (and,
// with own, every call this replica owns); it returns how many.
func (s *Server) sweepCalls(ctx context.Context, own bool) int {
	recs, err := s.store.List(ctx, trajectory.Filter{State: trajectory.CallingModel, Limit: trajectory.MaxListLimit})
	if err != nil {
		if ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "lost-call sweep: listing records failed", slog.String("error", err.Error()))
		}
		return 0
	}
	n := 0
	for _, rec := range recs {
		mine := own && s.leftBehind(rec)
		if !mine && !s.silent(rec, s.now(), true) {
			continue
		}
		if s.sweepCall(ctx, rec.ID, rec.Call, mine) {
			n++
		}
	}
	return n
}

// sweepCall reclaims call on record id, if it is still there and still
// lost, and charges it as estimated: its input estimate and the output its
// replica last said had streamed. The reservation goes back on the whole
// chain, the record is READY again, and the tenant's ledger, when its
// ceilings keep one, is charged the same under the call's id (a settle
// by the call's own replica, should it come after all, changes nothing).
func (s *Server) sweepCall(ctx context.Context, id, call string, mine bool) bool {
	var data map[string]any
	var owner string
	var used tenant.Amount
	_, err := s.store.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		now := s.now()
		rec := chain[0]
		if rec.Call != call || !(mine && s.leftBehind(rec)) && !s.silent(rec, now, true) {
			return nil, errNotLost
		}
		usage := trajectory.Usage{InputTokens: rec.CallInput, OutputTokens: rec.CallOutput}
		charge := s.prices.Cost(rec.Model, usage)
		owner, used = rec.Tenant, tenant.Amount{Micros: charge.Micros, Tokens: trajectory.Spend{InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens}.Tokens()}
		dollars := charge.Dollars()
		why := "its replica stopped beating"
		if mine {
			why = "its replica restarted"
		}
		data = map[string]any{"stop": "error", "estimated": true, "usage": usage, "dollars": dollars, "call": call,
			"model": rec.Model, "provider": rec.Provider, "owner": rec.CallOwner, "swept_by": s.replica,
			"detail": "call lost: " + why + "; charged as estimated from its input and the output streamed by its last heartbeat"}
		evs, err := chainrule.ChargeLost(chain, usage, charge, data, now)
		if err != nil {
			return nil, err
		}
		ls := chainrule.Levels(chain, now, true)
		return append(evs, chainrule.ReadStages(chain, ls, meter.Check(ls, s.stages), s.stages, now)...), nil
	})
	switch {
	case err == nil:
		if s.ledger != nil && ceiling.Limits(s.tenant(owner)).Spends() {
			s.ceilings.Charge(ctx, s.log, owner, call, used)
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "lost call reclaimed and charged as estimated", slog.String("trajectory", id),
			slog.String("call", call), slog.Any("usage", data["usage"]), slog.Any("dollars", data["dollars"]), slog.Any("owner", data["owner"]))
		return true
	case errors.Is(err, errNotLost):
	case ctx.Err() == nil:
		s.log.LogAttrs(ctx, slog.LevelWarn, "lost-call sweep: reclaiming a call failed", slog.String("trajectory", id),
			slog.String("call", call), slog.String("error", err.Error()))
	}
	return false
}

// leftBehind reports a call in flight on rec that an earlier run of this
// replica owned: same replica name, another incarnation. Calls this run
// admitted are alive, even while the start's sweep is still going.
func (s *Server) leftBehind(rec *trajectory.Record) bool {
	name, _, ok := strings.Cut(rec.CallOwner, "#")
	return ok && name == s.replica && rec.CallOwner != s.owner
}
