package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/inflight"
	"gatekeeper/trajectory"
)

// Reasons a call in flight is stopped before its reply ends.
type stopKind int32

const (
	stopNone     stopKind = iota
	stopCancel            // an operator canceled the run: end the stream with an error event
	stopKill              // an operator killed the run: drop the agent's connection
	stopDeadline          // the call outlived the tenant's call_deadline
	stopShutdown          // gatekeeper is stopping and its shutdown_grace ran out
)

// errPausedWait: the thread's record is paused; the request waits.
var errPausedWait = errors.New("proxy: trajectory paused")

// pausePoll bounds how long a held request waits between looks at its
// record, in case a resume signal was lost.
const pausePoll = time.Second

// errKilled drops the agent's connection: a killed run gets no more bytes.
var errKilled = errors.New("proxy: trajectory killed by an operator")

// Record is the thread record the turn's call runs on.
func (t *turn) Record() string { return t.recID }

// Control stops the turn's call for an operator's cancel or kill.
func (t *turn) Control(k trajectory.ControlKind) {
	switch k {
	case trajectory.ControlCancel:
		t.stop(stopCancel)
	case trajectory.ControlKill:
		t.stop(stopKill)
	}
}

var _ = inflight.New[*turn] // *turn is an inflight.Call

// listen applies the signals of every replica until ctx ends.
func (s *Server) listen(ctx context.Context, sigs trajectory.Signals) {
	for ctx.Err() == nil {
		ch, err := sigs.Subscribe(ctx)
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "control signals unavailable; controls act at the next turn boundary", slog.String("error", err.Error()))
			if sleepCtx(ctx, 2*time.Second) != nil {
				return
			}
			continue
		}
		for sig := range ch {
			s.live.Signal(sig)
		}
	}
}

// stop ends the call in flight for why; the first reason wins.
func (t *turn) stop(why stopKind) {
	if atomic.CompareAndSwapInt32((*int32)(&t.stopped), int32(stopNone), int32(why)) {
		t.cancelUp()
	}
}

// stopError is the error type and message the agent gets for a call
// stopped by a cancel or by its deadline.
func (t *turn) stopError() (typ, msg string) {
	if t.stopReason() == stopShutdown {
		return errUpstream, "gatekeeper is shutting down and this call outlived its grace; it was stopped and charged for what streamed; retry"
	}
	if t.stopReason() == stopDeadline {
		return errUpstream, fmt.Sprintf("the call ran past its deadline (call_limits.call_deadline %s) and was stopped",
			t.req.tenant.CallLimits.CallDeadline.Std())
	}
	return errTrajectoryCanceled, fmt.Sprintf("trajectory %s was canceled by an operator; this call was stopped and the run has ended", t.recID)
}

func (t *turn) stopReason() stopKind { return stopKind(atomic.LoadInt32((*int32)(&t.stopped))) }

// afterTurn applies, when a call ends, what an operator asked while it was
// out (chainrule.AfterTurn): the call was stopped by a cancel, or a
// cancel, finish or pause was left pending for this boundary.
func (t *turn) afterTurn(rec *trajectory.Record, now time.Time) ([]trajectory.Event, error) {
	return chainrule.AfterTurn(rec, t.stopReason() == stopCancel, now)
}

// Idle finish: a run whose last turn ended its task (end_turn) and that
// then stayed READY for limits.idle_finish is finished, as an orchestrator's
// finish would.
const exitIdle = "IDLE"

// sweepIdle finishes the idle runs it finds; it returns how many.
func (s *Server) sweepIdle(ctx context.Context) int {
	idle := s.cfg.Limits.IdleFinish.Std()
	if idle <= 0 {
		return 0
	}
	recs, err := s.store.List(ctx, trajectory.Filter{State: trajectory.Ready, Limit: trajectory.MaxListLimit})
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "idle sweep: listing records failed", slog.String("error", err.Error()))
		return 0
	}
	n := 0
	for _, rec := range recs {
		if rec.LastStopReason != "end_turn" || s.now().Sub(rec.UpdatedAt) < idle {
			continue
		}
		_, err := s.store.Update(ctx, rec.ID, func(r *trajectory.Record) ([]trajectory.Event, error) {
			now := s.now()
			if r.State != trajectory.Ready || r.LastStopReason != "end_turn" || now.Sub(r.UpdatedAt) < idle {
				return nil, errNotIdle
			}
			ts, err := r.Finalize(trajectory.Completed, exitIdle, now)
			return trajectory.EventsFor(r.ID, ts), err
		})
		switch {
		case err == nil:
			n++
		case !errors.Is(err, errNotIdle):
			s.log.LogAttrs(ctx, slog.LevelWarn, "idle sweep: finishing a run failed", slog.String("trajectory", rec.ID), slog.String("error", err.Error()))
		}
	}
	return n
}

var errNotIdle = errors.New("proxy: record not idle")

// sweep runs sweepIdle every quarter of limits.idle_finish (at most every
// 30 s) until ctx ends.
func (s *Server) sweep(ctx context.Context) {
	idle := s.cfg.Limits.IdleFinish.Std()
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
			s.sweepIdle(ctx)
		}
	}
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
