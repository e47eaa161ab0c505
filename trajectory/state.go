package trajectory

import "fmt"

// State is where a record stands in its state machine. The set is closed:
// see Valid.
type State string

// The states. READY through PAUSED are live; FINALIZING is the cleanup
// barrier every exit passes through; COMPLETED, FAILED and CANCELED are
// terminal and absorbing.
const (
	Ready            State = "READY"
	CallingModel     State = "CALLING_MODEL"
	WaitingTool      State = "WAITING_TOOL"
	AwaitingApproval State = "AWAITING_APPROVAL"
	Paused           State = "PAUSED"
	Finalizing       State = "FINALIZING"
	Completed        State = "COMPLETED"
	Failed           State = "FAILED"
	Canceled         State = "CANCELED"
)

// States lists every state in lifecycle order.
func States() []State {
	return []State{Ready, CallingModel, WaitingTool, AwaitingApproval, Paused, Finalizing, Completed, Failed, Canceled}
}

// Valid reports whether s is one of the nine states.
func (s State) Valid() bool {
	switch s {
	case Ready, CallingModel, WaitingTool, AwaitingApproval, Paused, Finalizing, Completed, Failed, Canceled:
		return true
	}
	return false
}

// Terminal reports whether s is a final state, which no transition leaves.
func (s State) Terminal() bool {
	return s == Completed || s == Failed || s == Canceled
}

// ParseState reads a state name as it appears in JSON and query strings.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("trajectory: unknown state %q", s)
	}
	return st, nil
}

// CanTransition is the LEGAL table: the only place that says which state
// may follow which. Everything not listed here is refused, including
// staying in the same state.
func CanTransition(from, to State) bool {
	switch from {
	case Ready:
		return to == CallingModel || to == Paused || to == Finalizing
	case CallingModel:
		return to == WaitingTool || to == AwaitingApproval || to == Ready || to == Finalizing
	case WaitingTool:
		// Results are accepted (READY) before the next call: never straight
		// to CALLING_MODEL, so unanswered calls are always accounted for.
		return to == Ready || to == Finalizing
	case AwaitingApproval:
		return to == WaitingTool || to == Ready || to == Finalizing
	case Paused:
		return to == Ready || to == Finalizing
	case Finalizing:
		return to.Terminal()
	}
	return false
}
