package sweep

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"gatekeeper/trajectory"
)

// Idle finish: a run whose last turn ended its task (end_turn) and that
// then stayed READY for limits.idle_finish is finished, as an orchestrator's
// finish would.
const exitIdle = "IDLE"

var errNotIdle = errors.New("sweep: record not idle")

// SweepIdle finishes the idle runs it finds; it returns how many.
func (s *Sweeper) SweepIdle(ctx context.Context) int {
	idle := s.rules.Load().cfg.Limits.IdleFinish.Std()
	if idle <= 0 {
		return 0
	}
	recs, err := s.o.Store.List(ctx, trajectory.Filter{State: trajectory.Ready, Limit: trajectory.MaxListLimit})
	s.answered(ctx, err)
	if err != nil {
		s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "idle sweep: listing records failed", slog.String("error", err.Error()))
		return 0
	}
	n := 0
	for _, rec := range recs {
		if rec.LastStopReason != "end_turn" || s.o.Clock().Sub(rec.UpdatedAt) < idle {
			continue
		}
		_, err := s.o.Store.Update(ctx, rec.ID, func(r *trajectory.Record) ([]trajectory.Event, error) {
			now := s.o.Clock()
			if r.State != trajectory.Ready || r.LastStopReason != "end_turn" || now.Sub(r.UpdatedAt) < idle {
				return nil, errNotIdle
			}
			ts, err := r.Finalize(trajectory.Completed, exitIdle, now)
			return trajectory.EventsFor(r.ID, ts), err
		})
		s.answered(ctx, err)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, errNotIdle):
			s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "idle sweep: finishing a run failed", slog.String("trajectory", rec.ID), slog.String("error", err.Error()))
		}
	}
	return n
}

// FinishIdle runs SweepIdle every quarter of limits.idle_finish (at most
// every 30 s) until ctx ends; it returns at once when runs never finish
// idle.
func (s *Sweeper) FinishIdle(ctx context.Context) {
	idle := s.rules.Load().cfg.Limits.IdleFinish.Std()
	if idle <= 0 {
		return
	}
	every := min(max(idle/4, 10*time.Millisecond), 30*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.SweepIdle(ctx)
		}
	}
}
