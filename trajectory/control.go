package trajectory

import (
	"fmt"
	"slices"
	"time"
)

// Exit reasons of runs an operator ended.
const (
	ExitCanceled = "CANCELED"
	ExitKilled   = "KILLED"
	ExitFinished = "FINISHED"
)

// RequestControl is what an operator's request does to r the moment it
// arrives. A record not in CALLING_MODEL stands at a turn boundary, so most
// requests act at once there; in CALLING_MODEL a model call is running on
// some replica, which acts on the request when the call ends (or at once,
// on the signal the admin API publishes).
//
//   - pause: READY → PAUSED now; in CALLING_MODEL, WAITING_TOOL and
//     AWAITING_APPROVAL it is kept as Pending.Control for the next
//     boundary; PAUSED stays as it is.
//   - resume: PAUSED → READY; a pending pause is withdrawn; the loop
//     watchdog's counters and step are cleared; nothing else.
//   - cancel: pending in CALLING_MODEL (the replica serving the call ends
//     it and finalizes); otherwise CANCELED with exit reason CANCELED now.
//   - kill: FAILED with exit reason KILLED now, whatever the live state.
//   - finish: pending in CALLING_MODEL; otherwise COMPLETED with exit
//     reason FINISHED now.
//   - interrupt: kept as Pending.Control in every live state; the proxy
//     appends its Message to the next request. It needs a Message.
//
// A record holds one pending control. A new one replaces it unless the one
// pending ranks higher: cancel > finish > pause > interrupt, so a later
// pause cannot undo a cancel, while a second interrupt replaces the first.
// Resume never becomes pending; it only withdraws a pause. In FINALIZING
// (an exit under way) cancel, kill and finish complete the exit as
// theirs, and the other kinds change nothing.
//
// A terminal record returns a *TransitionError matching ErrTerminal and a
// malformed request ErrInvalidControl; r is then unchanged. ts are the
// transitions made, for the event log. inDoubt are the tool calls the agent
// was given and had not answered when the run ended here: Finalize drops
// them from Pending, and the caller audits them, since they may have run.
func (r *Record) RequestControl(c Control, now time.Time) (ts []Transition, inDoubt []PendingCall, err error) {
	if !validKind(c.Kind) {
		return nil, nil, fmt.Errorf("%w: unknown kind %q", ErrInvalidControl, c.Kind)
	}
	if c.Kind == ControlInterrupt && c.Message == "" {
		return nil, nil, fmt.Errorf("%w: an interrupt needs a message", ErrInvalidControl)
	}
	if r.State.Terminal() {
		return nil, nil, &TransitionError{ID: r.ID, From: r.State, To: controlTarget(c.Kind)}
	}
	if r.State == Finalizing && c.Kind != ControlCancel && c.Kind != ControlKill && c.Kind != ControlFinish {
		return nil, nil, nil
	}
	switch c.Kind {
	case ControlPause:
		switch r.State {
		case Ready:
			t, err := r.Transition(Paused, string(c.Kind), now)
			if err != nil {
				return nil, nil, err
			}
			return []Transition{t}, nil, nil
		case Paused:
			return nil, nil, nil
		}
		r.setPending(c, now)
		return nil, nil, nil
	case ControlResume:
		// A resume gives the loop watchdog's counters a fresh start,
		// whether or not the thread was paused.
		r.Watch.Reset()
		if p := r.Pending.Control; p != nil && p.Kind == ControlPause {
			r.Pending.Control = nil
			r.UpdatedAt = now
		}
		if r.State != Paused {
			return nil, nil, nil
		}
		t, err := r.Transition(Ready, string(c.Kind), now)
		if err != nil {
			return nil, nil, err
		}
		return []Transition{t}, nil, nil
	case ControlInterrupt:
		r.setPending(c, now)
		return nil, nil, nil
	case ControlCancel, ControlFinish:
		if r.State == CallingModel {
			r.setPending(c, now)
			return nil, nil, nil
		}
	}
	exit, reason := controlExit(c.Kind)
	inDoubt = r.delivered()
	ts, err = r.Finalize(exit, reason, now)
	if err != nil {
		return nil, nil, err
	}
	return ts, inDoubt, nil
}

// TakeControl returns the pending control and clears it: the proxy calls
// it at a turn boundary, in the same store update that applies the
// control, so that it is applied once.
func (r *Record) TakeControl() *Control {
	c := r.Pending.Control
	r.Pending.Control = nil
	return c
}

// rank orders the kinds that can be pending; a pending control gives way
// only to one of equal or higher rank. Kill and resume are never pending.
func rank(k ControlKind) int {
	switch k {
	case ControlInterrupt:
		return 1
	case ControlPause:
		return 2
	case ControlFinish:
		return 3
	case ControlCancel:
		return 4
	}
	return 0
}

func validKind(k ControlKind) bool {
	switch k {
	case ControlPause, ControlResume, ControlCancel, ControlKill, ControlFinish, ControlInterrupt:
		return true
	}
	return false
}

func (r *Record) setPending(c Control, now time.Time) {
	if p := r.Pending.Control; p != nil && rank(p.Kind) > rank(c.Kind) {
		return
	}
	if c.At.IsZero() {
		c.At = now
	}
	r.Pending.Control = &c
	r.UpdatedAt = now
}

// delivered lists the tool calls the agent holds and owes results for:
// those of WAITING_TOOL. Calls held for approval never reached it.
func (r *Record) delivered() []PendingCall {
	if r.State != WaitingTool || len(r.Pending.ToolCalls) == 0 {
		return nil
	}
	return slices.Clone(r.Pending.ToolCalls)
}

// controlExit is the terminal state and exit reason a kind ends a run with.
func controlExit(k ControlKind) (State, string) {
	switch k {
	case ControlKill:
		return Failed, ExitKilled
	case ControlFinish:
		return Completed, ExitFinished
	}
	return Canceled, ExitCanceled
}

// controlTarget is the state a kind refused on a terminal record would have
// led to, for the error.
func controlTarget(k ControlKind) State {
	switch k {
	case ControlPause:
		return Paused
	case ControlResume, ControlInterrupt:
		return Ready
	}
	s, _ := controlExit(k)
	return s
}
