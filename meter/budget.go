package meter

import (
	"math"
	"time"

	"gatekeeper/trajectory"
)

// Dimension names one ceiling of a budget, as the record's
// binding_dimension spells it.
type Dimension string

// The budget dimensions, in the order Rho breaks ties.
const (
	Turns     Dimension = "turns"
	Tokens    Dimension = "tokens"
	WallClock Dimension = "wall_clock"
	Dollars   Dimension = "dollars"
)

// Used is what a run has used against its ceilings, reservations of calls
// in flight included.
type Used struct {
	Turns     int64 // model calls started
	Tokens    int64 // every token: uncached, cached, cache-write and output
	WallClock time.Duration
	Micros    int64
}

// Reservation stands for a call in flight: its estimated input plus its
// output limit, and their price (see Table.Estimate).
type Reservation struct {
	Tokens int64
	Micros int64
	Turns  int64
}

// Add returns u with the reservation counted.
func (u Used) Add(r Reservation) Used {
	u.Turns = addSat(u.Turns, nonNeg(r.Turns))
	u.Tokens = addSat(u.Tokens, nonNeg(r.Tokens))
	u.Micros = addSat(u.Micros, nonNeg(r.Micros))
	return u
}

// UsedOf reads a record's spend, descendants included, as Used.
func UsedOf(s trajectory.Spend) Used {
	wall := time.Duration(0)
	switch sec := s.WallClockS; {
	case sec >= float64(math.MaxInt64/int64(time.Second)):
		wall = math.MaxInt64
	case sec > 0:
		wall = time.Duration(sec * float64(time.Second))
	}
	return Used{Turns: s.Turns, Tokens: s.Tokens(), WallClock: wall, Micros: FromDollars(s.Dollars)}
}

// Elapsed is a run's wall-clock spend at now: its age since the first turn
// started, less the time it waited on approvals and pauses, which the agent
// did not spend. A run not yet started has spent none.
func Elapsed(started, now time.Time, waited time.Duration) time.Duration {
	if started.IsZero() {
		return 0
	}
	return max(now.Sub(started)-waited, 0)
}

// Rho is the budget vector's norm: the largest used/ceiling over the
// dimensions that have a ceiling (a zero ceiling has none), and the
// dimension that sets it; on a tie the first in the order turns, tokens,
// wall_clock, dollars binds. With no ceiling at all it is 0 and "".
func Rho(b trajectory.Budget, u Used) (float64, Dimension) {
	rho, binding := -1.0, Dimension("")
	consider := func(d Dimension, used, ceiling float64) {
		if !(ceiling > 0) {
			return
		}
		if r := max(used, 0) / ceiling; r > rho {
			rho, binding = r, d
		}
	}
	consider(Turns, float64(u.Turns), float64(b.Turns))
	consider(Tokens, float64(u.Tokens), float64(b.Tokens))
	consider(WallClock, u.WallClock.Seconds(), float64(b.WallClockS))
	consider(Dollars, float64(u.Micros), b.Dollars*1e6)
	if binding == "" {
		return 0, ""
	}
	return rho, binding
}

// Level is one record of the chain a call is checked against: the thread
// itself or one of its ancestors, whose spend includes its descendants'.
type Level struct {
	ID     string
	Budget trajectory.Budget
	Used   Used // measured: what the providers reported, and the wall clock
	// Reserved is what the calls already in flight in the record's subtree
	// hold: counted by Check and Fit so that parallel calls cannot overshoot
	// together, and given back when they settle.
	Reserved Reservation
}

// inFlight is what the level has used with its calls in flight counted.
func (l Level) inFlight() Used { return l.Used.Add(l.Reserved) }

// Decision is the outcome of Check: the largest ρ over the chain, the
// dimension and the record that set it, and the stage it maps to.
type Decision struct {
	Rho       float64
	Binding   Dimension
	BindingID string
	Stage     Stage
}

// Check decides the stage of a call about to start from what each level of
// its chain has measurably used plus the reservations of the other calls in
// flight. The call's own estimate is not counted: a limit of 32,000 output
// tokens says what a call may cost, not what the run has spent, and Fit
// bounds the call itself. The tightest level binds; on a tie the earlier
// one, so a chain listed from the thread up names the nearest record.
//
// The turns dimension counts calls started: a call is refused once
// Used.Turns plus the calls in flight reach the ceiling, so a ceiling of N
// admits exactly N calls.
func Check(chain []Level, th Thresholds) Decision {
	d := Decision{Stage: Nominal}
	found := false
	for _, l := range chain {
		rho, dim := Rho(l.Budget, l.inFlight())
		if dim == "" {
			continue
		}
		if !found || rho > d.Rho {
			d.Rho, d.Binding, d.BindingID, found = rho, dim, l.ID, true
		}
	}
	d.Stage = th.Stage(d.Rho)
	return d
}
