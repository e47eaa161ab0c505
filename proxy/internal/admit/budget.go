package admit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tidwall/gjson"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// DefaultMaxOutput is the output a call without an output limit is
// reserved for: Chat and Responses requests may leave it to the model.
const DefaultMaxOutput = 16384

// ErrWait: the calls in flight hold what is left of the budget; the call
// waits for them to settle (at most WaitMax, looking again at most every
// WaitStep).
var ErrWait = errors.New("admit: calls in flight hold the rest of the budget")

// Bounds of a wait for room: past it the agent is asked to retry.
const (
	WaitMax  = 20 * time.Second
	WaitStep = 250 * time.Millisecond
)

// ErrNotHeld: the record no longer holds the call an abandoned admission
// reserved; there is nothing to give back.
var ErrNotHeld = errors.New("admit: the record does not hold the call")

// Budget admits calls against every budget of their chain.
type Budget struct {
	Stages meter.Thresholds
	// MinOutput is budget_min_output_tokens.
	MinOutput int64
	// Owner is what this process writes as its calls' owner, for a sweep
	// should it fall silent.
	Owner string
}

// Admission is what admitting a call decided: its stage and what it holds
// against its chain's budgets until it settles.
type Admission struct {
	Decision meter.Decision
	Call     string // the call's id, the settle's idempotency key
	Reserved trajectory.Reservation
	Levels   []meter.Level // the chain as checked, nearest first
	Paused   bool          // an operator's pause, the budget's or the loop watchdog's took effect: the request waits
	Ended    bool          // the loop watchdog ended the run: the request is refused
	// MaxOut, when positive, is the output limit the budget clamped the
	// call to.
	MaxOut int64
	Fit    meter.Fit // what the chain had left for the call's output
}

// Reserve admits the call against every budget of its chain
// (meter.Admit): its stage comes from measured spend and the other calls
// in flight, and its output limit is clamped to what the chain has left.
// Unless it is refused, it reserves its worst case on each record, and
// chain[0] records the call (input is its input in estimated tokens). It
// runs inside the store's atomic update, so calls of parallel threads see
// each other's reservations. A call refused because its budget is
// exhausted ends the run (on_exhaust: fail) or pauses it (on_exhaust:
// pause). ErrWait: what was measured leaves room, but the calls in flight
// hold it.
func (b *Budget) Reserve(chain []*trajectory.Record, call Call, input int64, now time.Time) (Admission, []trajectory.Event, error) {
	ls := chainrule.Levels(chain, now, true)
	v := meter.Admit(ls, meter.Call{Worst: call.Worst, MaxOutput: call.MaxOut,
		DefaultOutput: DefaultMaxOutput, MinOutput: b.MinOutput}, b.Stages)
	if v.Wait {
		// What was measured leaves room for this call: the calls in
		// flight hold the rest and may give some back.
		return Admission{}, nil, ErrWait
	}
	adm := Admission{Decision: v.Decision, Call: call.ID, Levels: ls, Fit: v.Fit}
	evs := chainrule.ReadStages(chain, ls, v.Decision, b.Stages, now)
	if v.Stage == meter.Halt {
		xevs, paused, err := chainrule.Exhaust(chain, v.Decision, now)
		adm.Paused = paused
		return adm, append(evs, xevs...), err
	}
	adm.Reserved = trajectory.Reservation{Calls: 1, Tokens: v.Reservation.Tokens, Micros: v.Reservation.Micros}
	if v.Clamped {
		adm.MaxOut = v.MaxOutput
		data := map[string]any{"from": nil, "to": v.MaxOutput, "binding": v.Fit.BindingID,
			"binding_dimension": v.Fit.Binding, "reserved_dollars": meter.ToDollars(v.Reservation.Micros)}
		if call.MaxOut > 0 {
			data["from"] = call.MaxOut
		}
		for _, l := range ls {
			if l.ID == v.Fit.BindingID {
				data["left"] = notice.Remaining(l, v.Fit.Binding)
			}
		}
		evs = append(evs, chainrule.Event(chain[0].ID, now, trajectory.EventBudgetClamp, data))
	}
	for _, rec := range chain {
		rec.Reserved = rec.Reserved.Add(adm.Reserved)
		if rec.StartedAt.IsZero() {
			// An ancestor's wall clock starts with the first call anywhere
			// in its tree.
			rec.StartedAt = now
		}
	}
	chain[0].Call, chain[0].CallReserved = adm.Call, adm.Reserved
	// What a sweep needs should this replica fall silent.
	chain[0].CallOwner, chain[0].CallBeat = b.Owner, now
	chain[0].CallInput, chain[0].CallOutput = input, 0
	return adm, evs, nil
}

// Own is what admitting call decided, when an earlier attempt whose
// answer was lost (a timeout, a broken connection) was saved after all:
// chain[0] holds the call. It is the attempt, of those tried, that
// reserved what the record holds; the store changes nothing this time.
func Own(chain []*trajectory.Record, call string, tried []Admission, now time.Time) (Admission, bool) {
	rec := chain[0]
	if call == "" || rec.Call != call || rec.State != trajectory.CallingModel {
		return Admission{}, false
	}
	for i := len(tried) - 1; i >= 0; i-- {
		if tried[i].Reserved == rec.CallReserved {
			return tried[i], true
		}
	}
	// Not reachable while every saved attempt is in tried; the record's
	// own figures are the reservation in any case.
	return Admission{Call: call, Reserved: rec.CallReserved, Levels: chainrule.Levels(chain, now, true)}, true
}

// Abandon gives back, on its chain, the reservation of call, whose
// admission failed with the store's answer lost: the update may have been
// saved. It is idempotent: a record that does not hold the call is left
// alone (ErrNotHeld).
func Abandon(chain []*trajectory.Record, call string, now time.Time) ([]trajectory.Event, error) {
	if chain[0].Call != call || chain[0].State != trajectory.CallingModel {
		return nil, ErrNotHeld
	}
	return chainrule.Reclaim(chain, now, "admission abandoned: the store's answer was lost and the call was never sent")
}

// Halted is the refusal of a call its budget refused (adm's stage is
// halt), on its thread record rec.
func Halted(rec *trajectory.Record, adm Admission) error {
	d := adm.Decision
	whose := "its"
	if d.BindingID != rec.ID {
		whose = "the " + trajectory.Unscoped(d.BindingID, rec.Tenant) + " run's"
	}
	left := ""
	if r := notice.Left(adm.Levels, d); r != "" {
		left = ", " + r + " left"
	}
	return &Refusal{Kind: Exhausted,
		Msg: fmt.Sprintf("trajectory %s has exhausted %s %s budget (%.0f%% used%s, not enough for this call's input and a minimal reply); the call was not forwarded and the run is stopped; an operator can start a new trajectory with a larger budget",
			trajectory.Unscoped(rec.ID, rec.Tenant), whose, d.Binding, d.Rho*100, left)}
}

// Worst is a call's worst case (meter.Worst, in the service tier its body
// asks for): the tenant's ceilings and every attempt at admitting the
// call against its budgets weigh the same call. A body whose input the
// provider reads from elsewhere (HiddenInput) is weighed as hidden input
// tokens at least, whatever its size.
func Worst(prices *meter.Table, api streaming.API, model string, body []byte, hidden int64) meter.Worst {
	size := int64(len(body))
	if hidden > 0 && HiddenInput(api, body) {
		size = max(size, 4*hidden) // meter.ApproxTokens: 4 bytes a token
	}
	return prices.Worst(model, size).InTier(prices, model, gjson.GetBytes(body, "service_tier").String())
}

// NewCallID is a new random call id.
func NewCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}
