package chainrule

import (
	"time"

	"gatekeeper/config"
	"gatekeeper/trajectory"
)

// WatchLimits are the loop watchdog's thresholds of w, a tenant's
// watchdog config; false when it is off.
func WatchLimits(w config.Watchdog) (trajectory.WatchLimits, bool) {
	if !w.On() {
		return trajectory.WatchLimits{}, false
	}
	last := trajectory.LoopPause
	if w.OnLoop == config.OnLoopFail {
		last = trajectory.LoopFail
	}
	return trajectory.WatchLimits{RepeatedCalls: int64(w.RepeatedCalls), CallWindow: int64(w.CallWindow),
		RepeatedResults: int64(w.RepeatedResults), ErrorResults: int64(w.ErrorResults), IdleTurns: int64(w.IdleTurns), Last: last}, true
}

// Escalate takes the thread's next step for sig, if any, with a loop
// event carrying the evidence; the fail step ends the run at once.
func Escalate(rec *trajectory.Record, l trajectory.WatchLimits, sig *trajectory.LoopSignal, now time.Time) ([]trajectory.Event, error) {
	step := rec.Watch.Escalate(l, sig, rec.Turns)
	if step == "" {
		return nil, nil
	}
	evs := []trajectory.Event{Event(rec.ID, now, trajectory.EventLoop, map[string]any{"step": step, "signal": sig})}
	if step != trajectory.LoopFail || rec.State.Terminal() || rec.State == trajectory.Finalizing {
		return evs, nil
	}
	ts, err := rec.Finalize(trajectory.Failed, ExitLoop, now)
	if err != nil {
		return nil, err
	}
	return append(evs, trajectory.EventsFor(rec.ID, ts)...), nil
}
