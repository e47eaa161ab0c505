package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// Exit reason of a run stopped by its budget (README.md, Budgets).
const exitBudgetExceeded = "BUDGET_EXCEEDED"

// defaultMaxOutput is the output a call without an output limit is
// reserved for: Chat and Responses requests may leave it to the model.
const defaultMaxOutput = 16384

// errBudgetWait: the calls in flight hold what is left of the budget; the
// call waits for them to settle.
var errBudgetWait = errors.New("proxy: calls in flight hold the rest of the budget")

// Bounds of that wait: past it the agent is asked to retry.
const (
	budgetWaitMax  = 20 * time.Second
	budgetWaitStep = 250 * time.Millisecond
)

// admission is what admitting a call decided: its stage and what it holds
// against its chain's budgets until it settles.
type admission struct {
	decision meter.Decision
	call     string // the call's id, the settle's idempotency key
	reserved trajectory.Reservation
	levels   []meter.Level // the chain as checked, nearest first
	paused   bool          // an operator's pause, the budget's or the loop watchdog's took effect: the request waits
	ended    bool          // the loop watchdog ended the run: the request is refused
	// maxOut, when positive, is the output limit the budget clamped the
	// call to.
	maxOut int64
	fit    meter.Fit // what the chain had left for the call's output
}

// reserve admits the call against every budget of its chain (meter.Admit):
// its stage comes from measured spend and the other calls in flight, and
// its output limit is clamped to what the chain has left. Unless it is
// refused, it reserves its worst case on each record. It runs inside the
// store's atomic update, so calls of parallel threads see each other's
// reservations. A call refused because its budget is exhausted ends the
// run (on_exhaust: fail) or pauses it (on_exhaust: pause).
func (t *turn) reserve(chain []*trajectory.Record, now time.Time) (admission, []trajectory.Event, error) {
	ls := levels(chain, now, true)
	v := meter.Admit(ls, meter.Call{Worst: t.worstCase(), MaxOutput: t.maxOut,
		DefaultOutput: defaultMaxOutput, MinOutput: t.s.minOutput}, t.s.stages)
	if v.Wait {
		// What was measured leaves room for this call: the calls in
		// flight hold the rest and may give some back.
		return admission{}, nil, errBudgetWait
	}
	adm := admission{decision: v.Decision, call: t.callID(), levels: ls, fit: v.Fit}
	evs := t.s.readStages(chain, ls, v.Decision, now)
	if v.Stage == meter.Halt {
		xevs, paused, err := exhaust(chain, v.Decision, now)
		adm.paused = paused
		return adm, append(evs, xevs...), err
	}
	adm.reserved = trajectory.Reservation{Calls: 1, Tokens: v.Reservation.Tokens, Micros: v.Reservation.Micros}
	if v.Clamped {
		adm.maxOut = v.MaxOutput
		data := map[string]any{"from": nil, "to": v.MaxOutput, "binding": v.Fit.BindingID,
			"binding_dimension": v.Fit.Binding, "reserved_dollars": meter.ToDollars(v.Reservation.Micros)}
		if t.maxOut > 0 {
			data["from"] = t.maxOut
		}
		for _, l := range ls {
			if l.ID == v.Fit.BindingID {
				data["left"] = remaining(l, v.Fit.Binding)
			}
		}
		evs = append(evs, eventWith(chain[0].ID, now, trajectory.EventBudgetClamp, data))
	}
	for _, rec := range chain {
		rec.Reserved = rec.Reserved.Add(adm.reserved)
		if rec.StartedAt.IsZero() {
			// An ancestor's wall clock starts with the first call anywhere
			// in its tree.
			rec.StartedAt = now
		}
	}
	chain[0].Call, chain[0].CallReserved = adm.call, adm.reserved
	// What a sweep needs should this replica fall silent (sweeper.go).
	chain[0].CallOwner, chain[0].CallBeat = t.s.owner, now
	chain[0].CallInput, chain[0].CallOutput = estimateTokens(int64(len(t.body))), 0
	t.tried = append(t.tried, adm)
	return adm, evs, nil
}

// worstCase is the call's worst case (meter.Worst, in its service tier),
// read from the request once: the tenant's ceilings and every attempt at
// admitting the call against its budgets weigh the same call.
func (t *turn) worstCase() meter.Worst {
	if t.worst == nil {
		w := t.s.prices.Worst(t.pr.Model, int64(len(t.body))).InTier(t.s.prices, t.pr.Model, gjson.GetBytes(t.body, "service_tier").String())
		t.worst = &w
	}
	return *t.worst
}

// callID is the turn's call id, drawn once: every attempt at admitting the
// turn reserves under the same id, so an attempt that finds it on the
// record knows the reservation is its own.
func (t *turn) callID() string {
	if t.call == "" {
		t.call = newCallID()
	}
	return t.call
}

// ownAdmission is what admitting the turn decided, when an earlier attempt
// whose answer was lost (a timeout, a broken connection) was saved after
// all: chain[0] holds the turn's call. It is the attempt that reserved what
// the record holds; the store changes nothing this time.
func (t *turn) ownAdmission(chain []*trajectory.Record) (admission, bool) {
	rec := chain[0]
	if t.call == "" || rec.Call != t.call || rec.State != trajectory.CallingModel {
		return admission{}, false
	}
	for i := len(t.tried) - 1; i >= 0; i-- {
		if t.tried[i].reserved == rec.CallReserved {
			return t.tried[i], true
		}
	}
	// Not reachable while every saved attempt is in tried; the record's
	// own figures are the reservation in any case.
	return admission{call: t.call, reserved: rec.CallReserved, levels: levels(chain, t.s.now(), true)}, true
}

// abandon gives back, in the background, a reservation the turn may have
// made though its admission failed: the store's answer was lost, and the
// script may have run. It is idempotent by call id: a record that does not
// hold the call is left alone.
func (t *turn) abandon(id string, cause error) {
	if t.call == "" || len(t.tried) == 0 {
		return
	}
	call := t.call
	release := func(ctx context.Context) error {
		_, err := t.s.store.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			if chain[0].Call != call || chain[0].State != trajectory.CallingModel {
				return nil, errSettled
			}
			return reclaimWith(chain, t.s.now(), "admission abandoned: the store's answer was lost and the call was never sent")
		})
		if errors.Is(err, errSettled) {
			return nil
		}
		return err
	}
	attrs := []slog.Attr{slog.String("trajectory", id), slog.String("call", call), slog.String("cause", cause.Error())}
	t.s.settles.retry(t.s.log, writeRelease, release, attrs)
}

// exhaust applies a refusal for an exhausted budget to the thread record
// (chain[0]) and the record whose budget binds, by the binding record's
// on_exhaust: fail finalizes them FAILED (BUDGET_EXCEEDED); pause moves
// those READY to PAUSED with reason BUDGET, and the call waits as for an
// operator's pause.
func exhaust(chain []*trajectory.Record, d meter.Decision, now time.Time) ([]trajectory.Event, bool, error) {
	policy := trajectory.OnExhaustFail
	for _, rec := range chain {
		if rec.ID == d.BindingID && rec.Budget.OnExhaust != "" {
			policy = rec.Budget.OnExhaust
		}
	}
	var evs []trajectory.Event
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
		ts, err := rec.Finalize(trajectory.Failed, exitBudgetExceeded, now)
		if err != nil {
			return nil, false, err
		}
		evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	}
	return evs, policy == trajectory.OnExhaustPause, nil
}

// readStages records on every record of a chain its budget reading from
// ls, the chain's levels at now: the thread record (chain[0]) gets d, the
// tightest reading of its chain, which is the one applied to its calls;
// each ancestor its own.
func (s *Server) readStages(chain []*trajectory.Record, ls []meter.Level, d meter.Decision, now time.Time) []trajectory.Event {
	var evs []trajectory.Event
	for i, rec := range chain {
		rho, dim, stage := d.Rho, d.Binding, d.Stage
		if i > 0 {
			rho, dim = meter.Rho(rec.Budget, ls[i].Used.Add(ls[i].Reserved))
			stage = s.stages.Stage(rho)
		}
		evs = append(evs, setStage(rec, rho, dim, stage, now)...)
	}
	return evs
}

// staleCall is how long a call may stay in flight before its thread takes
// it for lost: past the tenant's call deadline, or an hour without one.
func (s *Server) staleCall(tenant *config.Tenant) time.Duration {
	if d := tenant.CallLimits.CallDeadline.Std(); d > 0 {
		return d + time.Minute
	}
	return time.Hour
}

// reclaim ends a lost call on its thread record (chain[0]): its
// reservation is released on the whole chain, uncharged, and the thread
// is READY again.
func reclaim(chain []*trajectory.Record, now time.Time) ([]trajectory.Event, error) {
	return reclaimWith(chain, now, "call lost: no reply was recorded")
}

// reclaimWith is reclaim with the event's detail.
func reclaimWith(chain []*trajectory.Record, now time.Time, detail string) ([]trajectory.Event, error) {
	rec := chain[0]
	tr, err := rec.Transition(trajectory.Ready, "call_lost", now)
	if err != nil {
		return nil, err
	}
	for _, l := range chain {
		l.Reserved = l.Reserved.Release(rec.CallReserved)
	}
	ev := eventWith(rec.ID, now, trajectory.EventUpstreamError, map[string]any{
		"detail": detail, "call": rec.Call})
	clearCall(rec)
	return append([]trajectory.Event{ev}, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...), nil
}

// levels reads a chain as the meter sees it at now: spend, wall clock
// and, when inFlight is set, the reservations of calls in flight.
func levels(chain []*trajectory.Record, now time.Time, inFlight bool) []meter.Level {
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

// setStage records a budget reading on rec, with an event when its stage
// changes.
func setStage(rec *trajectory.Record, rho float64, dim meter.Dimension, stage meter.Stage, now time.Time) []trajectory.Event {
	if math.IsNaN(rho) || math.IsInf(rho, 0) {
		rho = 1
	}
	rec.BudgetUsed, rec.BindingDimension = rho, string(dim)
	if rec.Stage == string(stage) {
		return nil
	}
	from := rec.Stage
	rec.Stage = string(stage)
	return []trajectory.Event{eventWith(rec.ID, now, trajectory.EventStage, map[string]any{
		"from": from, "to": stage, "budget_used": rho, "binding_dimension": dim})}
}

// haltError is the answer to a call its budget refused.
func (s *Server) haltError(rec *trajectory.Record, adm admission) error {
	d := adm.decision
	whose := "its"
	if d.BindingID != rec.ID {
		whose = "the " + trajectory.Unscoped(d.BindingID, rec.Tenant) + " run's"
	}
	left := ""
	for _, l := range adm.levels {
		if l.ID == d.BindingID {
			if r := remaining(l, d.Binding); r != "" {
				left = ", " + r + " left"
			}
		}
	}
	return &HTTPError{Code: http.StatusPaymentRequired, Type: errBudgetExceeded, NoRetry: true,
		Msg: fmt.Sprintf("trajectory %s has exhausted %s %s budget (%.0f%% used%s, not enough for this call's input and a minimal reply); the call was not forwarded and the run is stopped; an operator can start a new trajectory with a larger budget",
			trajectory.Unscoped(rec.ID, rec.Tenant), whose, d.Binding, d.Rho*100, left)}
}

// notice is the budget notice appended to a steered or restricted
// request: which ceiling presses and what is left of it.
func (t *turn) notice() string {
	d := t.adm.decision
	var left string
	for _, l := range t.adm.levels {
		if l.ID == d.BindingID {
			left = remaining(l, d.Binding)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[gatekeeper budget notice] This run has used %.0f%% of its %s budget", d.Rho*100, d.Binding)
	if left != "" {
		fmt.Fprintf(&b, "; %s remain", left)
	}
	b.WriteString(".")
	if d.Stage == meter.Restrict {
		b.WriteString(" Only read-only tools remain available")
		if ro := t.req.tenant.ReadOnlyTools; len(ro) > 0 {
			b.WriteString(" (" + strings.Join(ro, ", ") + ")")
		}
		b.WriteString(". Give your final answer now.")
	} else {
		b.WriteString(" Plan to finish the task within what remains.")
	}
	return b.String()
}

// remaining says what is left of one dimension of a level's budget, the
// calls in flight counted.
func remaining(l meter.Level, d meter.Dimension) string {
	l.Used = l.Used.Add(l.Reserved)
	switch d {
	case meter.Turns:
		return fmt.Sprintf("%d model calls", max(l.Budget.Turns-l.Used.Turns, 0))
	case meter.Tokens:
		return fmt.Sprintf("about %d tokens", max(l.Budget.Tokens-l.Used.Tokens, 0))
	case meter.WallClock:
		return fmt.Sprintf("about %s", max(time.Duration(l.Budget.WallClockS)*time.Second-l.Used.WallClock, 0).Round(time.Second))
	case meter.Dollars:
		return fmt.Sprintf("about $%.2f", max(l.Budget.Dollars-meter.ToDollars(l.Used.Micros), 0))
	}
	return ""
}

func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// hint is where an earlier call of a thread was admitted.
type hint struct {
	parent, base string
	shared       bool // base is a last child shared by threads past limits.max_children
}

// hints remembers, per trajectory and thread key, the record a thread was
// admitted on, so that a thread's later calls are admitted in one store
// call. A hint is only a guess: admission on it re-checks everything.
type hints struct {
	mu  sync.Mutex
	m   map[string]hint
	max int
}

func newHints(max int) *hints { return &hints{m: make(map[string]hint), max: max} }

func (h *hints) get(k string) (hint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[k]
	return v, ok
}

func (h *hints) put(k string, v hint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) >= h.max {
		// Bounded: forgetting costs each thread one slower admission.
		clear(h.m)
	}
	h.m[k] = v
}

func (h *hints) drop(k string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, k)
}
