package chainrule

import (
	"time"

	"gatekeeper/trajectory"
)

// ControlApplied is the event of a pending control taking effect.
func ControlApplied(id string, c *trajectory.Control, now time.Time) trajectory.Event {
	return Event(id, now, trajectory.EventControl, map[string]any{"kind": c.Kind, "by": c.By, "applied": true})
}

// ApplyPause applies a pending pause c to a READY record at a turn
// boundary, with its events.
func ApplyPause(rec *trajectory.Record, c *trajectory.Control, now time.Time) ([]trajectory.Event, error) {
	rec.TakeControl()
	tr, err := rec.Transition(trajectory.Paused, "operator pause", now)
	if err != nil {
		return nil, err
	}
	return append([]trajectory.Event{ControlApplied(rec.ID, c, now)}, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...), nil
}

// AfterTurn applies, when a call ends, what an operator asked while it
// was out: the call was stopped by a cancel (canceled), or a cancel,
// finish or pause was left pending for this boundary.
func AfterTurn(rec *trajectory.Record, canceled bool, now time.Time) ([]trajectory.Event, error) {
	if rec.State.Terminal() {
		return nil, nil
	}
	c := rec.Pending.Control
	var ts []trajectory.Transition
	var err error
	switch {
	case canceled || c != nil && c.Kind == trajectory.ControlCancel:
		ts, err = rec.Finalize(trajectory.Canceled, trajectory.ExitCanceled, now)
	case c != nil && c.Kind == trajectory.ControlFinish:
		ts, err = rec.Finalize(trajectory.Completed, trajectory.ExitFinished, now)
	case c != nil && c.Kind == trajectory.ControlPause && rec.State == trajectory.Ready:
		return ApplyPause(rec, c, now)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var evs []trajectory.Event
	if c != nil {
		evs = append(evs, ControlApplied(rec.ID, c, now))
	}
	return append(evs, trajectory.EventsFor(rec.ID, ts)...), nil
}
