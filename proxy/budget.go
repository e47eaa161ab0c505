package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/trajectory"
)

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
	ls := chainrule.Levels(chain, now, true)
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
		xevs, paused, err := chainrule.Exhaust(chain, v.Decision, now)
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
				data["left"] = notice.Remaining(l, v.Fit.Binding)
			}
		}
		evs = append(evs, chainrule.Event(chain[0].ID, now, trajectory.EventBudgetClamp, data))
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
	return admission{call: t.call, reserved: rec.CallReserved, levels: chainrule.Levels(chain, t.s.now(), true)}, true
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
			return chainrule.Reclaim(chain, t.s.now(), "admission abandoned: the store's answer was lost and the call was never sent")
		})
		if errors.Is(err, errSettled) {
			return nil
		}
		return err
	}
	attrs := []slog.Attr{slog.String("trajectory", id), slog.String("call", call), slog.String("cause", cause.Error())}
	t.s.settles.Retry(t.s.log, settle.WriteRelease, release, attrs)
}

// readStages records on every record of a chain its budget reading
// (chainrule.ReadStages, staged by the server's thresholds).
func (s *Server) readStages(chain []*trajectory.Record, ls []meter.Level, d meter.Decision, now time.Time) []trajectory.Event {
	return chainrule.ReadStages(chain, ls, d, s.stages, now)
}

// staleCall is how long a call may stay in flight before its thread takes
// it for lost: past the tenant's call deadline, or an hour without one.
func (s *Server) staleCall(tenant *config.Tenant) time.Duration {
	if d := tenant.CallLimits.CallDeadline.Std(); d > 0 {
		return d + time.Minute
	}
	return time.Hour
}

// haltError is the answer to a call its budget refused.
func (s *Server) haltError(rec *trajectory.Record, adm admission) error {
	d := adm.decision
	whose := "its"
	if d.BindingID != rec.ID {
		whose = "the " + trajectory.Unscoped(d.BindingID, rec.Tenant) + " run's"
	}
	left := ""
	if r := notice.Left(adm.levels, d); r != "" {
		left = ", " + r + " left"
	}
	return &HTTPError{Code: http.StatusPaymentRequired, Type: errBudgetExceeded, NoRetry: true,
		Msg: fmt.Sprintf("trajectory %s has exhausted %s %s budget (%.0f%% used%s, not enough for this call's input and a minimal reply); the call was not forwarded and the run is stopped; an operator can start a new trajectory with a larger budget",
			trajectory.Unscoped(rec.ID, rec.Tenant), whose, d.Binding, d.Rho*100, left)}
}

// notice is the budget notice appended to a steered or restricted
// request.
func (t *turn) notice() string {
	return notice.Budget(t.adm.decision, t.adm.levels, t.req.tenant.ReadOnlyTools)
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
