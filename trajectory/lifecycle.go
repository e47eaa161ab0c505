package trajectory

import (
	"slices"
	"time"
)

// Transition is one state change, as the event log records it.
type Transition struct {
	From, To State
	Reason   string
	At       time.Time
}

// Transition is the one function that changes a record's state. A change
// the LEGAL table (CanTransition) does not list returns a *TransitionError
// and leaves r untouched; the caller audits it. Entering or leaving a hold
// (PAUSED, AWAITING_APPROVAL) is timed here, so no path around it can
// charge a hold to the wall clock.
func (r *Record) Transition(to State, reason string, now time.Time) (Transition, error) {
	if !CanTransition(r.State, to) {
		return Transition{}, &TransitionError{ID: r.ID, From: r.State, To: to}
	}
	t := Transition{From: r.State, To: to, Reason: reason, At: now}
	if r.State.holds() {
		r.WaitedS += r.currentHold(now).Seconds()
		r.HeldSince = time.Time{}
	}
	if r.State == Paused {
		r.PauseReason = ""
	}
	r.State = to
	if to.holds() {
		r.HeldSince = now
	}
	r.UpdatedAt = now
	return t, nil
}

// holds reports whether a record in s waits on a person (an operator's
// pause, an approver's decision) rather than on the agent or the model.
func (s State) holds() bool { return s == Paused || s == AwaitingApproval }

// Waited is the time r has been held since its first turn started, the
// hold it is in at now included: what the wall-clock budget does not
// count.
func (r *Record) Waited(now time.Time) time.Duration {
	return time.Duration(r.WaitedS*float64(time.Second)) + r.currentHold(now)
}

// currentHold is how long the hold r is in has lasted at now, counted from
// StartedAt at the earliest: before the first turn no clock runs, so there
// is nothing to excuse.
func (r *Record) currentHold(now time.Time) time.Duration {
	if r.HeldSince.IsZero() || r.StartedAt.IsZero() {
		return 0
	}
	return max(now.Sub(later(r.HeldSince, r.StartedAt)), 0)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// The turn helpers below make their transitions through Transition only and
// check legality before touching anything else, so a refused call leaves the
// record as it was. Each returns the transitions it made, for the event log.

// BeginTurn admits a model call: READY -> CALLING_MODEL.
func (r *Record) BeginTurn(now time.Time) ([]Transition, error) {
	t, err := r.Transition(CallingModel, "turn admitted", now)
	if err != nil {
		return nil, err
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = now
	}
	return []Transition{t}, nil
}

// TurnOutcome is what a finished model call left behind.
type TurnOutcome struct {
	StopReason string
	// ToolCalls are the calls the reply made that the agent must answer.
	ToolCalls []PendingCall
	Usage     Usage
	Dollars   float64
	// Estimated marks usage counted from what was seen, because the stream
	// ended before the provider reported it.
	Estimated bool
	// ToolDeadline is how long the agent has to answer each call; zero
	// means no deadline.
	ToolDeadline time.Duration
	// ApprovalID, when set, means the reply's tool calls are held in escrow
	// under that approval: the turn ends in AWAITING_APPROVAL and the calls'
	// deadlines start only when they are released.
	ApprovalID string
}

// EndTurn charges a finished call and moves CALLING_MODEL to
// AWAITING_APPROVAL (calls held), WAITING_TOOL (calls delivered) or READY.
func (r *Record) EndTurn(o TurnOutcome, now time.Time) ([]Transition, error) {
	to := Ready
	switch {
	case o.ApprovalID != "":
		to = AwaitingApproval
	case len(o.ToolCalls) > 0:
		to = WaitingTool
	}
	if err := r.expect(CallingModel, to); err != nil {
		return nil, err
	}
	t, err := r.Transition(to, o.StopReason, now)
	if err != nil {
		return nil, err
	}
	r.CountTurn(o)
	r.chargeWallClock(now)
	switch to {
	case AwaitingApproval:
		r.Pending.ToolCalls = withDeadlines(o.ToolCalls, time.Time{})
		r.Pending.ApprovalID = o.ApprovalID
	case WaitingTool:
		r.Pending.ToolCalls = withDeadlines(o.ToolCalls, deadline(now, o.ToolDeadline))
	}
	return []Transition{t}, nil
}

// CountTurn charges a finished model call to the record: one turn, its
// usage and dollars, its stop reason. EndTurn does it with the state
// change; a record stopped while the call was out (halted, killed) is
// charged with CountTurn alone.
func (r *Record) CountTurn(o TurnOutcome) {
	r.Turns++
	r.Spend.Turns++
	r.AddSpend(o.Usage, o.Dollars, o.Estimated)
	r.LastStopReason = o.StopReason
}

// ResultCheck sorts the tool-result IDs a request carried.
type ResultCheck struct {
	Accepted []string // answered a pending call
	// Unknown are late, repeated or forged results: kept out of accounting
	// and audited by the caller.
	Unknown []string
	// Unanswered are pending calls the request carried no result for.
	Unanswered []string
}

// AcceptToolResults matches the tool results a new request carries against
// the pending calls. In WAITING_TOOL the pending set is settled and the
// record moves to READY; in any other non-terminal state nothing is pending,
// so every ID is Unknown and nothing changes.
func (r *Record) AcceptToolResults(ids []string, now time.Time) (ResultCheck, []Transition, error) {
	if r.State.Terminal() {
		return ResultCheck{}, nil, &TransitionError{ID: r.ID, From: r.State, To: Ready}
	}
	if r.State != WaitingTool {
		return ResultCheck{Unknown: slices.Clone(ids)}, nil, nil
	}
	t, err := r.Transition(Ready, "tool results", now)
	if err != nil {
		return ResultCheck{}, nil, err
	}
	var rc ResultCheck
	answered := make([]bool, len(r.Pending.ToolCalls))
	for _, id := range ids {
		i := slices.IndexFunc(r.Pending.ToolCalls, func(c PendingCall) bool { return c.ID == id })
		if i < 0 || answered[i] {
			rc.Unknown = append(rc.Unknown, id)
			continue
		}
		answered[i] = true
		rc.Accepted = append(rc.Accepted, id)
	}
	for i, c := range r.Pending.ToolCalls {
		if !answered[i] {
			rc.Unanswered = append(rc.Unanswered, c.ID)
		}
	}
	r.Pending.ToolCalls = nil
	return rc, []Transition{t}, nil
}

// ApproveHeld releases calls held for approval: AWAITING_APPROVAL ->
// WAITING_TOOL, with the answer deadlines starting now.
func (r *Record) ApproveHeld(toolDeadline time.Duration, now time.Time) ([]Transition, error) {
	if err := r.expect(AwaitingApproval, WaitingTool); err != nil {
		return nil, err
	}
	t, err := r.Transition(WaitingTool, "approved", now)
	if err != nil {
		return nil, err
	}
	r.Pending.ApprovalID = ""
	r.Pending.ToolCalls = withDeadlines(r.Pending.ToolCalls, deadline(now, toolDeadline))
	return []Transition{t}, nil
}

// RefuseHeld drops calls held for approval (denied, expired or stale):
// AWAITING_APPROVAL -> READY. The agent gets a refusal instead of the calls,
// so nothing is owed.
func (r *Record) RefuseHeld(reason string, now time.Time) ([]Transition, error) {
	if err := r.expect(AwaitingApproval, Ready); err != nil {
		return nil, err
	}
	t, err := r.Transition(Ready, reason, now)
	if err != nil {
		return nil, err
	}
	r.Pending.ApprovalID = ""
	r.Pending.ToolCalls = nil
	return []Transition{t}, nil
}

// Finalize ends the run: through FINALIZING to exit, which must be
// COMPLETED, FAILED or CANCELED. It may be called in FINALIZING to finish
// an exit that was interrupted. Pending work is dropped and exitReason
// recorded.
func (r *Record) Finalize(exit State, exitReason string, now time.Time) ([]Transition, error) {
	if r.State.Terminal() {
		return nil, &TransitionError{ID: r.ID, From: r.State, To: exit}
	}
	if !CanTransition(Finalizing, exit) {
		return nil, &TransitionError{ID: r.ID, From: Finalizing, To: exit}
	}
	var ts []Transition
	if r.State != Finalizing {
		t, err := r.Transition(Finalizing, exitReason, now)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	t, err := r.Transition(exit, exitReason, now)
	if err != nil {
		return nil, err // unreachable: FINALIZING -> exit was checked above
	}
	ts = append(ts, t)
	r.ExitReason = exitReason
	r.Pending = Pending{}
	r.chargeWallClock(now)
	return ts, nil
}

// expect refuses a helper's step from any state but the one it is written
// for: the same target can be legal from elsewhere (CALLING_MODEL -> READY
// and WAITING_TOOL -> READY both exist), yet ending a turn that never began
// must not pass.
func (r *Record) expect(from, to State) error {
	if r.State != from {
		return &TransitionError{ID: r.ID, From: r.State, To: to}
	}
	return nil
}

// ChargeWallClock brings wall-clock spend up to now: the time since the
// first turn started less the holds (see Waited). It only grows: a
// descendant's roll-up or a stale clock never shrinks it.
func (r *Record) ChargeWallClock(now time.Time) { r.chargeWallClock(now) }

func (r *Record) chargeWallClock(now time.Time) {
	if r.StartedAt.IsZero() {
		return
	}
	if s := (now.Sub(r.StartedAt) - r.Waited(now)).Seconds(); s > r.Spend.WallClockS {
		r.Spend.WallClockS = s
	}
}

func deadline(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return now.Add(d)
}

// withDeadlines copies calls, so the record never shares the caller's slice.
func withDeadlines(calls []PendingCall, dl time.Time) []PendingCall {
	out := make([]PendingCall, len(calls))
	for i, c := range calls {
		out[i] = PendingCall{ID: c.ID, Name: c.Name, Deadline: dl}
	}
	return out
}
