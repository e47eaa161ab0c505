package chainrule

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// Exit reasons of runs these rules end (docs/guide/budgets.md, docs/guide/watchdog.md).
const (
	ExitBudgetExceeded = "BUDGET_EXCEEDED"
	ExitTruncationLoop = "TRUNCATION_LOOP"
	ExitLoop           = "LOOP"
)

// Event is an event of record id at now, with data as its JSON payload.
func Event(id string, now time.Time, typ trajectory.EventType, data any) trajectory.Event {
	raw, _ := json.Marshal(data) // maps of strings and slices always marshal
	return trajectory.Event{At: now, Trajectory: id, Type: typ, Data: raw}
}

// Levels reads a chain as the meter sees it at now: spend, wall clock
// and, when inFlight is set, the reservations of calls in flight.
func Levels(chain []*trajectory.Record, now time.Time, inFlight bool) []meter.Level {
	out := make([]meter.Level, len(chain))
	for i, rec := range chain {
		u := meter.UsedOf(rec.Spend)
		u.WallClock = meter.Elapsed(rec.StartedAt, now, rec.Waited(now))
		out[i] = meter.Level{ID: rec.ID, Budget: rec.Budget, Used: u}
		if inFlight {
			out[i].Reserved = meter.Reservation{Turns: rec.Reserved.Calls, Tokens: rec.Reserved.Tokens, Micros: rec.Reserved.Micros}
		}
	}
	return out
}

// SetStage records a budget reading on rec, with an event when its stage
// changes.
func SetStage(rec *trajectory.Record, rho float64, dim meter.Dimension, stage meter.Stage, now time.Time) []trajectory.Event {
	if math.IsNaN(rho) || math.IsInf(rho, 0) {
		rho = 1
	}
	rec.BudgetUsed, rec.BindingDimension = rho, string(dim)
	if rec.Stage == string(stage) {
		return nil
	}
	from := rec.Stage
	rec.Stage = string(stage)
	return []trajectory.Event{Event(rec.ID, now, trajectory.EventStage, map[string]any{
		"from": from, "to": stage, "budget_used": rho, "binding_dimension": dim})}
}

// StageChange reads the stages a stage event of SetStage's moved between.
func StageChange(ev trajectory.Event) (from, to string) {
	var d struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	_ = json.Unmarshal(ev.Data, &d) // SetStage's data: always an object
	return d.From, d.To
}

// ReadStages records on every record of a chain its budget reading from
// ls, the chain's levels at now: the thread record (chain[0]) gets d, the
// tightest reading of its chain, which is the one applied to its calls;
// each ancestor its own, staged by th.
func ReadStages(chain []*trajectory.Record, ls []meter.Level, d meter.Decision, th meter.Thresholds, now time.Time) []trajectory.Event {
	var evs []trajectory.Event
	for i, rec := range chain {
		rho, dim, stage := d.Rho, d.Binding, d.Stage
		if i > 0 {
			rho, dim = meter.Rho(rec.Budget, ls[i].Used.Add(ls[i].Reserved))
			stage = th.Stage(rho)
		}
		evs = append(evs, SetStage(rec, rho, dim, stage, now)...)
	}
	return evs
}

// Exhaust applies a refusal for an exhausted budget to the thread record
// (chain[0]) and the record whose budget binds, by the binding record's
// on_exhaust: fail finalizes them FAILED (BUDGET_EXCEEDED); pause moves
// those READY to PAUSED with reason BUDGET, and the call waits as for an
// operator's pause. paused says which applied.
func Exhaust(chain []*trajectory.Record, d meter.Decision, now time.Time) (evs []trajectory.Event, paused bool, err error) {
	policy := trajectory.OnExhaustFail
	for _, rec := range chain {
		if rec.ID == d.BindingID && rec.Budget.OnExhaust != "" {
			policy = rec.Budget.OnExhaust
		}
	}
	for _, rec := range chain {
		if rec != chain[0] && rec.ID != d.BindingID || rec.State.Terminal() {
			continue
		}
		rec.BindingDimension = string(d.Binding)
		if policy == trajectory.OnExhaustPause {
			if rec.State != trajectory.Ready {
				// Busy with a call of its own: its next call pauses it.
				continue
			}
			tr, err := rec.Transition(trajectory.Paused, "budget exhausted", now)
			if err != nil {
				return nil, false, err
			}
			rec.PauseReason = trajectory.PauseBudget
			evs = append(evs, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...)
			continue
		}
		ts, err := rec.Finalize(trajectory.Failed, ExitBudgetExceeded, now)
		if err != nil {
			return nil, false, err
		}
		evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	}
	return evs, policy == trajectory.OnExhaustPause, nil
}

// Reclaim ends a lost call on its thread record (chain[0]): its
// reservation is released on the whole chain, uncharged, and the thread
// is READY again. detail says why, in the event.
func Reclaim(chain []*trajectory.Record, now time.Time, detail string) ([]trajectory.Event, error) {
	rec := chain[0]
	tr, err := rec.Transition(trajectory.Ready, "call_lost", now)
	if err != nil {
		return nil, err
	}
	for _, l := range chain {
		l.Reserved = l.Reserved.Release(rec.CallReserved)
	}
	ev := Event(rec.ID, now, trajectory.EventUpstreamError, map[string]any{
		"detail": detail, "call": rec.Call})
	ClearCall(rec)
	return append([]trajectory.Event{ev}, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...), nil
}

// MaxLostCalls bounds the calls taken for lost a record remembers; an
// older one's reply, should it still come, is not charged again and is
// logged.
const MaxLostCalls = 8

// KeepSwept adds a call charged as estimated to a record's swept calls,
// bounded as its lost calls are.
func KeepSwept(swept []trajectory.SweptCall, c trajectory.SweptCall) []trajectory.SweptCall {
	swept = append(swept, c)
	if len(swept) > MaxLostCalls {
		swept = slices.Delete(swept, 0, len(swept)-MaxLostCalls)
	}
	return swept
}

// ClearCall takes the call in flight off rec.
func ClearCall(rec *trajectory.Record) {
	rec.Call, rec.CallReserved = "", trajectory.Reservation{}
	rec.CallOwner, rec.CallBeat, rec.CallInput, rec.CallOutput = "", time.Time{}, 0, 0
}

// ChargeLost ends a lost call on its thread record (chain[0]) charged as
// estimated: usage at charge, with data as its turn event. The
// reservation goes back on the whole chain, the thread is READY again,
// and every record is charged the call (the thread as its turn, each
// ancestor in its spend). The thread remembers the call and its
// estimate among its swept calls: should the call's reply still be
// recorded, its real charge replaces the estimate (outcome.Settle).
func ChargeLost(chain []*trajectory.Record, usage trajectory.Usage, charge meter.Charge, data map[string]any, now time.Time) ([]trajectory.Event, error) {
	rec := chain[0]
	dollars := charge.Dollars()
	rec.SweptCalls = KeepSwept(rec.SweptCalls, trajectory.SweptCall{Call: rec.Call, InputTokens: usage.InputTokens,
		OutputTokens: usage.OutputTokens, Dollars: dollars})
	evs := []trajectory.Event{Event(rec.ID, now, trajectory.EventTurn, data)}
	tr, err := rec.Transition(trajectory.Ready, "call_lost", now)
	if err != nil {
		return nil, err
	}
	evs = append(evs, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...)
	rec.CountTurn(trajectory.TurnOutcome{StopReason: "error", Usage: usage, Dollars: dollars, Estimated: true})
	released := rec.CallReserved
	ClearCall(rec)
	for i, l := range chain {
		l.Reserved = l.Reserved.Release(released)
		if i > 0 {
			l.AddSpend(usage, dollars, true)
			l.Spend.Turns++
		}
		if !charge.Priced {
			l.FallbackPriced = true
		}
		l.ChargeWallClock(now)
	}
	return evs, nil
}
