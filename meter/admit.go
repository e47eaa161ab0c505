package meter

import "math"

// Worst is a call's worst case before it starts: its input, estimated from
// the request's size, priced at the highest rate the model charges for
// input (uncached, cache read, 5-minute or 1-hour cache write) at the
// prompt length of the estimate, and its output at that length's output
// rate.
// Whatever the provider then reports for input within the estimate, and
// output within the call's limit, costs no more than Reservation says.
type Worst struct {
	InputTokens int64
	inputPicos  int64 // the input at its highest rate
	outputRate  int64 // pico-dollars per output token, the highest
}

// Worst returns the worst case of a call of model whose request body is
// inputBytes long.
func (t *Table) Worst(model string, inputBytes int64) Worst {
	e, ok := t.find(model)
	if !ok {
		e = t.fallback
	}
	in := ApproxTokens(inputBytes)
	r, _ := e.ratesFor(in)
	inRate, outRate := r.highest()
	return Worst{InputTokens: in, inputPicos: mulSat(in, inRate), outputRate: outRate}
}

// InTier returns w for a call the request asks to be served in tier:
// dearer when the tier's multiplier (Table.Tier) is above one. A cheaper
// tier is not counted on, since the provider may serve the call in
// another.
func (w Worst) InTier(t *Table, model, tier string) Worst {
	if x := t.Tier(model, tier); x > 1000 {
		w.inputPicos = mulSat(w.inputPicos/1000+1, x)
		w.outputRate = mulSat(w.outputRate/1000+1, x)
	}
	return w
}

// Reservation is what the call holds against its budgets with maxOutput
// as its output limit: the worst case, rounded up to a micro-dollar.
func (w Worst) Reservation(maxOutput int64) Reservation {
	out := nonNeg(maxOutput)
	p := addSat(w.inputPicos, mulSat(out, w.outputRate))
	return Reservation{Tokens: addSat(w.InputTokens, out), Micros: picosToMicros(p, true), Turns: 1}
}

// Fit is the largest output limit with which a call's worst case fits what
// every level of its chain has left, and the level and dimension that set
// it.
type Fit struct {
	// MaxOutput is the largest output limit that fits; negative when not
	// even the input does, math.MaxInt64 when no level has a dollars or
	// tokens ceiling (Binding is then "").
	MaxOutput int64
	Binding   Dimension // Dollars or Tokens
	BindingID string
}

// FitCall computes the Fit of a call with worst case w on chain, counting
// each level's calls in flight, or, with settled set, only what was
// measured.
func FitCall(chain []Level, w Worst, settled bool) Fit {
	f := Fit{MaxOutput: math.MaxInt64}
	take := func(out int64, d Dimension, id string) {
		if out < f.MaxOutput {
			f.MaxOutput, f.Binding, f.BindingID = out, d, id
		}
	}
	for _, l := range chain {
		u := l.inFlight()
		if settled {
			u = l.Used
		}
		if c := FromDollars(l.Budget.Dollars); c > 0 {
			// Reservation rounds the picos up: it fits while
			// input + out × rate ≤ left × 1e6 picos.
			room := mulSat(max(c-nonNeg(u.Micros), 0), 1_000_000) - w.inputPicos
			switch {
			case room < 0:
				take(-1, Dollars, l.ID)
			case w.outputRate > 0:
				take(room/w.outputRate, Dollars, l.ID)
			}
		}
		if c := l.Budget.Tokens; c > 0 {
			take(max(c-nonNeg(u.Tokens), 0)-w.InputTokens, Tokens, l.ID)
		}
	}
	return f
}

// Call is a call about to start, as Admit weighs it.
type Call struct {
	Worst Worst
	// MaxOutput is the request's output limit, 0 when it sets none.
	MaxOutput int64
	// DefaultOutput is what a call without a limit is taken to produce at
	// most; MinOutput the least output worth starting a call for.
	DefaultOutput int64
	MinOutput     int64
}

// Admission is Admit's verdict on a call.
type Admission struct {
	// Decision is the stage from measured use and the other calls in
	// flight; Halt when the call is refused, naming what ran out.
	Decision
	// Wait: refused only because the calls in flight hold what is left;
	// they may give some back when they settle.
	Wait bool
	// MaxOutput is the output limit the call goes out with: the request's,
	// or a lower one when Clamped (set when the request had none). Zero
	// when the request had none and needs none.
	MaxOutput int64
	Clamped   bool
	// Fit is what the chain has left for the call's output (before the
	// clamp), and where.
	Fit Fit
	// Reservation is what the call holds against every level until it
	// settles.
	Reservation Reservation
}

// Admit decides a call: its stage (Check), and whether it fits what its
// chain has left, with the calls in flight counted. A call whose worst case
// does not fit is clamped: its output limit is lowered until it does. It is
// refused only when what is left cannot pay for its input and an output of
// MinOutput (or of its own limit, when that is lower), or when the stage is
// Halt. A refused call that would fit what was measured, the calls in
// flight left out, waits for them (Wait) instead of exhausting the run.
//
// So, as long as each call's reported input is within its estimate and its
// output within its limit, the measured spend of every level stays within
// its ceilings, whatever the calls in flight; and a run is never stopped
// while what it has measurably left could pay for a minimal call.
func Admit(chain []Level, c Call, th Thresholds) Admission {
	asked := c.MaxOutput
	if asked <= 0 {
		asked = max(c.DefaultOutput, 0)
	}
	need := min(asked, max(c.MinOutput, 1))
	a := Admission{Decision: Check(chain, th), Fit: FitCall(chain, c.Worst, false)}
	if a.Stage != Halt && a.Fit.MaxOutput >= need {
		out := min(asked, a.Fit.MaxOutput)
		a.Clamped = out < asked
		if a.Clamped || c.MaxOutput > 0 {
			a.MaxOutput = out
		}
		a.Reservation = c.Worst.Reservation(out)
		return a
	}
	settled := make([]Level, len(chain))
	for i, l := range chain {
		settled[i] = Level{ID: l.ID, Budget: l.Budget, Used: l.Used}
	}
	if Check(settled, th).Stage != Halt && FitCall(settled, c.Worst, true).MaxOutput >= need {
		a.Wait = true
		return a
	}
	if a.Stage != Halt {
		// The stage allows the call but what is left cannot pay for it.
		a.Stage, a.Binding, a.BindingID = Halt, a.Fit.Binding, a.Fit.BindingID
	}
	return a
}
