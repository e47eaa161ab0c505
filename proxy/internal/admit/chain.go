package admit

import (
	"errors"
	"fmt"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/sweep"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// What admission on a thread record answers when the call is not admitted
// there yet: the request goes to another record, or waits.
var (
	// ErrBusy: the record has a call in flight; the request forks a
	// sibling (Records.Fork).
	ErrBusy = errors.New("admit: thread has a call in flight")
	// ErrOtherThread: the record serves another conversation.
	ErrOtherThread = errors.New("admit: record serves another conversation")
	// ErrPaused: the record, or its run, is paused; the request waits
	// (Waiter).
	ErrPaused = errors.New("admit: trajectory paused")
	// ErrAwaiting: the record holds a reply for approval (or is just past
	// one); the request may be a retry of that turn.
	ErrAwaiting = errors.New("admit: thread record holds a reply for approval")
	// ErrHoldOpening: the record is calling the model; the call may have
	// stored its hold already (a hold is stored before its turn is
	// recorded), and the request may be a retry of that turn.
	ErrHoldOpening = fmt.Errorf("%w, or is opening one", ErrAwaiting)
)

// Sweep tells a call in flight whose replica fell silent: a request on
// its record takes it for lost, and charges it as the sweep would.
type Sweep interface {
	Silent(rec *trajectory.Record, now time.Time) bool
	Reclaim(chain []*trajectory.Record, now time.Time) ([]trajectory.Event, sweep.Lost, error)
}

// Turn is what admission on a chain weighs of the request asking, and the
// request's state that admission changes: Chain leaves it updated, even
// when it fails.
type Turn struct {
	Tenant string
	Thread string   // the thread key
	IDs    []string // the ids of the tool results the request hands in
	// Results are the tool results the loop watchdog reads (a
	// continuation's, whose ids it does not hand in).
	Results  []streaming.ToolResult
	Call     Call
	Input    int64 // the call's input, in estimated tokens
	Provider string
	Model    string
	Ceil     *Hold // what the call holds against its tenant's ceilings
	// Gated: some gate applies to the tenant; HoldChecked: admission
	// looked for a hold of this turn and found none.
	Gated, HoldChecked bool
	// OperatorsOnly: the tenant's runs are started by operators only
	// (tenants[].trajectories: operators); a run an agent started takes no
	// more turns.
	OperatorsOnly bool
	Shared        bool // the thread shares a last child: its parent has MaxChildren
	MaxChildren   int  // limits.max_children, for the children_full event
	Watchdog      config.Watchdog
	ReadOnly      []string // the tenant's read-only tools, for the watchdog's notice
	Sweep         Sweep
	// Reclaimed is the silent call admission took for lost and charged,
	// for its tenant's ledger once the update is saved.
	Reclaimed sweep.Lost

	// Tried is what each attempt at admitting the call reserved; an
	// attempt that reserves adds to it.
	Tried []Admission
	// SharedNew: the thread learned in this request that it shares a
	// last child; the children_full event is due, once.
	SharedNew bool
	// BusyElsewhere: the record is busy with a call another replica
	// admitted (ErrBusy).
	BusyElsewhere bool
	Interrupt     string        // an operator's message for this request
	Truncated     int64         // the thread's last replies cut at their output limit, in a row
	Loop          watchdog.Step // the loop watchdog's step for this request
}

// Chain is admission on a thread record (chain[0]) and its ancestors, run
// inside the store's atomic update: the record must be the tenant's, free
// of a call in flight (a silent one is reclaimed), not paused and not
// held for approval; it accepts the request's tool results, applies a
// pending pause or operator's message, runs the loop watchdog, admits the
// call against every budget of the chain (Reserve) and begins the turn.
func (b *Budget) Chain(chain []*trajectory.Record, t *Turn, now time.Time) (Admission, []trajectory.Event, error) {
	rec, root := chain[0], chain[len(chain)-1]
	t.BusyElsewhere = false
	if root.Tenant != t.Tenant {
		// Names are the tenant's own: another tenant's record is not
		// there for this one.
		return Admission{}, nil, trajectory.ErrNotFound
	}
	if adm, ok := Own(chain, t.Call.ID, t.Tried, now); ok {
		// An earlier attempt was saved though its answer was lost: the
		// call is admitted, once.
		return adm, nil, nil
	}
	for _, r := range chain {
		if r.State.Terminal() {
			return Admission{}, nil, Ended(r)
		}
	}
	if t.OperatorsOnly && root.CreatedBy.Kind == trajectory.CreatorAgent {
		// The tenant was switched to operators' runs after an agent
		// started this one: the switch reaches runs already going, at
		// their next turn, checked in the update that admits it.
		return Admission{}, nil, AgentRun(root)
	}
	for _, r := range chain[1:] {
		if r.State == trajectory.Paused {
			// A thread started under a paused run waits with it.
			return Admission{}, nil, ErrPaused
		}
	}
	results := len(t.IDs) > 0
	switch {
	case rec.Thread != "" && rec.Thread != t.Thread && !t.Shared:
		return Admission{}, nil, ErrOtherThread
	case rec.State == trajectory.CallingModel && !results && t.Gated && !t.HoldChecked && !t.Sweep.Silent(rec, now):
		// The call in flight may be holding its reply: a retry of that
		// turn re-attaches rather than fork a sibling that asks again.
		return Admission{}, nil, ErrHoldOpening
	case rec.State == trajectory.CallingModel && !t.Sweep.Silent(rec, now):
		t.BusyElsewhere = rec.CallOwner != b.Owner
		return Admission{}, nil, ErrBusy
	case rec.State == trajectory.Paused:
		return Admission{}, nil, ErrPaused
	case rec.State == trajectory.AwaitingApproval && t.Gated && !t.HoldChecked,
		rec.State == trajectory.WaitingTool && !results && t.Gated && !t.HoldChecked:
		// A retry of a held turn carries no tool results.
		return Admission{}, nil, ErrAwaiting
	case rec.State == trajectory.AwaitingApproval || rec.State == trajectory.Finalizing:
		return Admission{}, nil, ErrBusy
	}
	var evs []trajectory.Event
	if rec.Thread == "" {
		rec.Thread = t.Thread
	} else if rec.Thread != t.Thread && t.SharedNew && len(chain) > 1 {
		t.SharedNew = false
		evs = append(evs, chainrule.Event(chain[1].ID, now, trajectory.EventChildrenFull, map[string]any{
			"thread": t.Thread, "shares": rec.ID, "max_children": t.MaxChildren}))
	}
	t.Reclaimed = sweep.Lost{}
	if rec.State == trajectory.CallingModel {
		// The call in flight outlived its replica's beats: the replica
		// serving it is gone. It is charged as the sweep would (its
		// input estimate and the output of its last beat), its
		// reservation given back, and its id kept: should its reply
		// still arrive, the reply's charge replaces the estimate.
		tev, lost, err := t.Sweep.Reclaim(chain, now)
		if err != nil {
			return Admission{}, nil, err
		}
		t.Reclaimed = lost
		evs = append(evs, tev...)
	}
	check, ts, err := rec.AcceptToolResults(t.IDs, now)
	if err != nil {
		return Admission{}, nil, err
	}
	evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	if len(check.Accepted) > 0 || len(check.Unanswered) > 0 {
		evs = append(evs, chainrule.Event(rec.ID, now, trajectory.EventToolResults,
			toolResults{Accepted: check.Accepted, Unanswered: check.Unanswered}))
	}
	if len(check.Unknown) > 0 {
		// Results for calls that are not pending: late, repeated or forged.
		// They are dropped from accounting and kept for audit.
		evs = append(evs, chainrule.Event(rec.ID, now, trajectory.EventToolResultUnknown, unknownResults{IDs: check.Unknown}))
	}
	if c := rec.Pending.Control; c != nil && rec.State == trajectory.Ready {
		// The request is a turn boundary: a pause or an operator's
		// message waiting for it applies now.
		switch c.Kind {
		case trajectory.ControlPause:
			pevs, err := chainrule.ApplyPause(rec, c, now)
			if err != nil {
				return Admission{}, nil, err
			}
			return Admission{Paused: true}, append(evs, pevs...), nil
		case trajectory.ControlInterrupt:
			rec.TakeControl()
			t.Interrupt = c.Message
			evs = append(evs, chainrule.ControlApplied(rec.ID, c, now))
		}
	}
	if rec.TruncationsInRow > 0 {
		t.Truncated = rec.TruncationsInRow
	}
	var wevs []trajectory.Event
	t.Loop, wevs, err = watchdog.Request(t.Watchdog, rec, t.Results, check.Accepted, t.ReadOnly, now)
	if err != nil {
		return Admission{}, nil, err
	}
	evs = append(evs, wevs...)
	switch {
	case rec.State == trajectory.Paused:
		return Admission{Paused: true}, evs, nil
	case rec.State.Terminal():
		return Admission{Ended: true}, evs, nil
	}
	adm, bevs, err := b.Reserve(chain, t.Call, t.Input, now)
	if err != nil {
		return Admission{}, nil, err
	}
	if adm.Decision.Stage != meter.Halt {
		t.Tried = append(t.Tried, adm)
	}
	evs = append(evs, bevs...)
	if adm.Decision.Stage == meter.Halt {
		return adm, evs, nil
	}
	evs = append(evs, t.Ceil.ClampEvent(rec.ID, now)...)
	ts, err = rec.BeginTurn(now)
	if err != nil {
		return Admission{}, nil, err
	}
	rec.Provider = t.Provider
	rec.Model = t.Model
	return adm, append(evs, trajectory.EventsFor(rec.ID, ts)...), nil
}

// Ended is the refusal of a call of a run that has finished: as
// exhausted when its budget stopped it, so the agent learns why.
func Ended(rec *trajectory.Record) error {
	if rec.ExitReason == chainrule.ExitBudgetExceeded {
		return &Refusal{Kind: Exhausted,
			Msg: fmt.Sprintf("trajectory %s was stopped by its %s budget; an operator can start a new trajectory", trajectory.Unscoped(rec.ID, rec.Tenant), rec.BindingDimension)}
	}
	return &Refusal{Kind: RunEnded,
		Msg: fmt.Sprintf("trajectory %s has ended (%s %s); start a new trajectory to continue", trajectory.Unscoped(rec.ID, rec.Tenant), rec.State, rec.ExitReason)}
}

// AgentRun is the refusal of a turn of run root, which an agent started,
// once its tenant's runs are started by operators only.
func AgentRun(root *trajectory.Record) error {
	return &Refusal{Kind: OperatorsOnly,
		Msg: fmt.Sprintf("tenant %s's runs are now started by operators only (tenants[].trajectories: operators), and trajectory %s was started by an agent, so it takes no more turns; ask an operator to create a trajectory through the admin API and send its id in X-Gatekeeper-Trajectory",
			root.Tenant, trajectory.Unscoped(root.ID, root.Tenant))}
}

// toolResults is a tool_results event's data, and unknownResults a
// tool_result_unknown event's: structs, whose fields encoding/json writes
// in the order a map's sorted keys would take, without sorting a map on
// every turn that carries results.
type toolResults struct {
	Accepted   []string `json:"accepted"`
	Unanswered []string `json:"unanswered"`
}

type unknownResults struct {
	IDs []string `json:"ids"`
}
