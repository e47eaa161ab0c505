package outcome

import (
	"errors"
	"slices"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/trajectory"
)

// Settles that change nothing: ErrSettled, the record took this call's
// settle already (an attempt whose answer was lost); ErrCallGone, the
// record holds neither the call nor a trace of its settle (its data was
// lost, or an operator reset it), so the charge has nowhere to go.
var (
	ErrSettled  = errors.New("proxy: call already settled")
	ErrCallGone = errors.New("proxy: the call is no longer on its record; its charge is not recorded")
)

// Settle is what the settle of one call reads besides its chain and its
// outcome: the call, its tenant's rules and what an operator did to it.
type Settle struct {
	Call           string // the call's id
	ToolDeadline   time.Duration
	MaxTruncations int // the tenant's replies cut at their output limit in a row before the run fails
	Watchdog       config.Watchdog
	Stages         meter.Thresholds
	// Canceled: an operator's cancel stopped the call while it was out.
	Canceled bool
}

// Chain ends the call's turn on its thread record (chain[0]) and moves the
// call's reservation to spend on every record of the chain, inside one
// store update; data is what the turn's event says, a copy of which the
// rules finish, so that rules run again (a retried update) write the same
// event. The call id makes it idempotent: a settle retried after a lost
// reply finds the call gone and changes nothing (ErrSettled).
func (s Settle) Chain(chain []*trajectory.Record, o Turn, charge meter.Charge, data TurnData, now time.Time) ([]trajectory.Event, error) {
	rec := chain[0]
	if rec.Call == "" || rec.Call != s.Call {
		if i := slices.IndexFunc(rec.SweptCalls, func(c trajectory.SweptCall) bool { return c.Call == s.Call }); i >= 0 {
			return s.swept(chain, i, o, charge, data, now), nil
		}
		if i := slices.Index(rec.LostCalls, s.Call); i >= 0 {
			return s.lost(chain, i, o, charge, data, now), nil
		}
		if rec.SettledCall == s.Call {
			return nil, ErrSettled
		}
		return nil, ErrCallGone
	}
	rec.SettledCall = s.Call
	dollars := charge.Dollars()
	evs := []trajectory.Event{o.event(rec.ID, now, &data)}
	switch {
	case rec.State != trajectory.CallingModel:
		// The run was stopped while the call was out (a sibling's call
		// halted it, or an operator): charged, with no state change.
		if !o.Upstream {
			rec.CountTurn(trajectory.TurnOutcome{StopReason: o.Stop, Usage: o.Usage, Dollars: dollars, Estimated: o.Estimated})
		}
	case o.Upstream:
		// No reply from the model: the call is not a turn of the run.
		tr, err := rec.Transition(trajectory.Ready, "upstream_error", now)
		if err != nil {
			return nil, err
		}
		rec.LastStopReason = o.Stop
		evs = append(evs, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...)
	default:
		ts, err := rec.EndTurn(trajectory.TurnOutcome{StopReason: o.Stop, ToolCalls: o.Calls, Usage: o.Usage,
			Dollars: dollars, Estimated: o.Estimated, ToolDeadline: s.ToolDeadline, ApprovalID: o.ApprovalID}, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	}
	if !o.Upstream {
		tevs, err := chainrule.CountTruncation(rec, o.Stop, s.MaxTruncations, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, tevs...)
		wevs, err := watchdog.Reply(s.Watchdog, rec, o.Reply, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, wevs...)
	}
	// What an operator asked while the call was out takes effect now.
	cevs, err := chainrule.AfterTurn(rec, s.Canceled, now)
	if err != nil {
		return nil, err
	}
	evs = append(evs, cevs...)
	released := rec.CallReserved
	chainrule.ClearCall(rec)
	for i, l := range chain {
		l.Reserved = l.Reserved.Release(released)
		if i > 0 && !o.Upstream {
			// A descendant's model call is a turn of the whole run.
			l.AddSpend(o.Usage, dollars, o.Estimated)
			l.Spend.Turns++
		}
		if !o.Upstream && !charge.Priced {
			l.FallbackPriced = true
		}
		l.ChargeWallClock(now)
	}
	return append(evs, s.stages(chain, now)...), nil
}

// lost charges the late reply of a call its thread took for lost
// (chain[0].LostCalls[i]): the reservation went back when it was
// reclaimed, so only the spend is added, on every record of the chain,
// with no state change. Taking the id off the list makes it idempotent.
func (s Settle) lost(chain []*trajectory.Record, i int, o Turn, charge meter.Charge, data TurnData, now time.Time) []trajectory.Event {
	rec := chain[0]
	rec.LostCalls = slices.Delete(rec.LostCalls, i, i+1)
	rec.SettledCall = s.Call
	data.markLate()
	evs := []trajectory.Event{o.event(rec.ID, now, &data)}
	if o.Upstream {
		return evs
	}
	dollars := charge.Dollars()
	rec.Turns++
	for _, l := range chain {
		l.AddSpend(o.Usage, dollars, o.Estimated)
		l.Spend.Turns++
		if !charge.Priced {
			l.FallbackPriced = true
		}
	}
	return append(evs, s.stages(chain, now)...)
}

// swept charges the late reply of a call taken for lost and charged as
// estimated (chain[0].SweptCalls[i]): the reply's real charge replaces
// the estimate, so every record of the chain gets the difference (less
// when the estimate was more), and no second turn. A reply that never
// came from the model (an upstream error) takes the estimate and its
// turn back. Taking the call off the list makes it idempotent.
func (s Settle) swept(chain []*trajectory.Record, i int, o Turn, charge meter.Charge, data TurnData, now time.Time) []trajectory.Event {
	rec := chain[0]
	est := rec.SweptCalls[i]
	rec.SweptCalls = slices.Delete(rec.SweptCalls, i, i+1)
	rec.SettledCall = s.Call
	data.markSwept(est)
	evs := []trajectory.Event{o.event(rec.ID, now, &data)}
	diff := trajectory.Usage{InputTokens: -est.InputTokens, OutputTokens: -est.OutputTokens}
	dollars := -est.Dollars
	turns := int64(-1)
	if !o.Upstream {
		diff.InputTokens += o.Usage.InputTokens
		diff.CachedInputTokens, diff.CacheWriteTokens = o.Usage.CachedInputTokens, o.Usage.CacheWriteTokens
		diff.OutputTokens += o.Usage.OutputTokens
		dollars += charge.Dollars()
		turns = 0
	}
	rec.Turns += turns
	for _, l := range chain {
		l.AddSpend(diff, dollars, o.Estimated)
		l.Spend.Turns += turns
		if !o.Upstream && !charge.Priced {
			l.FallbackPriced = true
		}
	}
	return append(evs, s.stages(chain, now)...)
}

// stages reads every record's stage again after the chain's spend moved.
func (s Settle) stages(chain []*trajectory.Record, now time.Time) []trajectory.Event {
	ls := chainrule.Levels(chain, now, true)
	return chainrule.ReadStages(chain, ls, meter.Check(ls, s.Stages), s.Stages, now)
}

// event is the turn's event on record id, data its data. Data encoding/json
// would refuse (dollars not a number) leaves it without, as json.Marshal's
// nil would.
func (o Turn) event(id string, now time.Time, data *TurnData) trajectory.Event {
	raw, err := data.MarshalJSON()
	if err != nil {
		raw = nil
	}
	return trajectory.Event{At: now, Trajectory: id, Type: o.eventType(), Data: raw}
}

func (o Turn) eventType() trajectory.EventType {
	if o.Upstream {
		return trajectory.EventUpstreamError
	}
	return trajectory.EventTurn
}
