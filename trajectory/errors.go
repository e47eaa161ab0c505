package trajectory

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Stores return ErrNotFound, ErrExists, ErrInvalidRecord,
// ErrClosed, *ChildrenFullError (CreateChild) and, when what they keep
// records in cannot be reached, ErrUnavailable (wrapped or not); the state machine returns
// *TransitionError, which matches ErrIllegalTransition and, when the record
// was already finished, ErrTerminal; RequestControl refuses a malformed
// request with ErrInvalidControl.
var (
	ErrNotFound          = errors.New("trajectory: not found")
	ErrExists            = errors.New("trajectory: already exists")
	ErrIllegalTransition = errors.New("trajectory: illegal transition")
	ErrTerminal          = errors.New("trajectory: record is in a terminal state")
	ErrInvalidRecord     = errors.New("trajectory: invalid record")
	ErrClosed            = errors.New("trajectory: store closed")
	ErrUnavailable       = errors.New("trajectory: store unavailable")
	// ErrInvalidControl is a control request RequestControl cannot act on:
	// an unknown kind, or an interrupt without a message.
	ErrInvalidControl = errors.New("trajectory: invalid control request")
)

// ChildrenFullError is CreateChild's refusal of a child whose parent
// already has Max children: nothing was saved. Last is the parent's last
// child, which a thread that found no room may share.
type ChildrenFullError struct {
	Parent, Last string
	Max          int
}

func (e *ChildrenFullError) Error() string {
	return fmt.Sprintf("trajectory %q has %d children, its limit", e.Parent, e.Max)
}

// TransitionError reports a state change the LEGAL table does not allow.
// The record it was asked of is left untouched.
type TransitionError struct {
	ID       string
	From, To State
}

func (e *TransitionError) Error() string {
	if e.From.Terminal() {
		return fmt.Sprintf("trajectory %q: illegal transition %s -> %s: %s is terminal", e.ID, e.From, e.To, e.From)
	}
	return fmt.Sprintf("trajectory %q: illegal transition %s -> %s", e.ID, e.From, e.To)
}

// Unwrap makes errors.Is(err, ErrIllegalTransition) hold.
func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }

// Is makes errors.Is(err, ErrTerminal) hold when the record had already
// finished, so callers can tell "too late" from "wrong order".
func (e *TransitionError) Is(target error) bool {
	return target == ErrTerminal && e.From.Terminal()
}

// Event is the illegal_transition entry auditing e.
func (e *TransitionError) Event(now time.Time) Event {
	return Event{At: now, Trajectory: e.ID, Type: EventIllegalTransition, From: e.From, To: e.To}
}
