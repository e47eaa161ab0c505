package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gatekeeper/config"
	"gatekeeper/internal/clock"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/ceiling"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/spendlimit"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// A tenant's ceilings (tenants[].limits) bound all its runs together: a
// call reserves its worst case against the tenant's ledger before its run
// admits it, and is clamped, or refused, by what the tenant has left, as
// by a run's budget. The ledger's keys are not the run's, so the two are
// separate atomic steps of one admission: the tenant's first, released
// again should the run refuse the call.

// tenantReserveAttempts bounds the reservations tried when other calls of
// the tenant take its room between reading it and reserving.
const tenantReserveAttempts = 8

// Ceilings reserves calls against their tenants' ceilings, and a
// signed-in person's calls against their spend limits too, and settles
// them on the tenants' ledger (a person's spend in a book of their own,
// spendlimit.Book).
type Ceilings struct {
	// Ledger keeps the tenants' spend; nil when no tenant has limits.
	Ledger tenant.Ledger
	// MinOutput is budget_min_output_tokens: less room than that for a
	// reply refuses the call.
	MinOutput int64
	// Settles retries a charge the ledger could not take.
	Settles *settle.Retrier
	// People are the spend limits on people; nil when none can bind.
	People *PersonLimits
	// Log takes what a reservation given back could not write.
	Log *slog.Logger
}

// Hold is what a call reserved against its tenant's ceilings and its
// person's limits.
type Hold struct {
	Call string // the ledger's id of the tenant's reservation; "" when none
	// Person is the person's book on the ledger when the call reserved
	// against their limits, under PersonCall; "" when it did not.
	Person, PersonCall string
	// MaxOut, when positive, is the output limit the ceilings clamped the
	// call to, and Clamp the budget_clamp event's data saying so.
	MaxOut int64
	Clamp  map[string]any
	// Passed: the reservation was handed to the call's settle (or given
	// back); nothing is left to release.
	Passed bool
}

// Call is a call as admission weighs it.
type Call struct {
	ID    string      // the call's id, the settle's idempotency key
	Worst meter.Worst // its worst case (Worst)
	// MaxOut is its output limit so far; 0 when it has none.
	MaxOut int64
	// AgentSet: the agent set the output limit itself.
	AgentSet bool
	// Person is who signed in to make it; nil for a virtual key.
	Person *trajectory.Person
}

// Spends reports whether tn has ceilings a call's spend counts against.
func (c *Ceilings) Spends(tn *config.Tenant) bool {
	return c.Ledger != nil && ceiling.Limits(tn).Spends()
}

// book is one set of ceilings a call reserves against: a tenant's or a
// person's.
type book struct {
	name    string // on the ledger
	who     string // "tenant x", "person y", for messages and events
	lim     tenant.Limits
	ttl     time.Duration
	levels  func(tenant.Usage) []meter.Level
	limit   func(meter.Fit) string // the name of the ceiling a fit binds on
	refusal func(tenant.Usage, meter.Fit, meter.Reservation) string
}

// Reserve reserves the call's worst case against its tenant's ceilings,
// then against its person's limits, lowering its output limit to what
// both have left. It refuses the call (Exhausted, naming the ceiling and
// when room frees up) only when not even the input and a minimal reply
// fit. A call whose room is held by calls in flight waits for them, as
// for a run's budget. The reservations are under the call's own id: a
// sweeper that reclaims the call charges the tenant under it, and the
// ledger's settle is idempotent by call.
func (c *Ceilings) Reserve(ctx context.Context, tn *config.Tenant, call Call) (Hold, error) {
	if c.Ledger == nil {
		return Hold{}, nil
	}
	var h Hold
	if lim := ceiling.Limits(tn); lim.Spends() {
		var err error
		h, err = c.reserve(ctx, &book{name: tn.Name, who: "tenant " + tn.Name, lim: lim, ttl: StaleAfter(tn),
			levels: func(u tenant.Usage) []meter.Level { return ceiling.Levels(tn, u) }, limit: ceiling.Name,
			refusal: func(u tenant.Usage, f meter.Fit, need meter.Reservation) string {
				return ceiling.Refusal(tn, u, f, need)
			},
		}, call)
		if err != nil {
			return Hold{}, err
		}
	}
	if call.Person == nil || c.People == nil {
		return h, nil
	}
	caps, err := c.People.Caps(ctx, tn.Name, call.Person)
	if err != nil {
		c.Release(context.WithoutCancel(ctx), c.Log, tn.Name, &h)
		return Hold{}, unavailable(err)
	}
	if !caps.Any() {
		return h, nil
	}
	pc := call
	if h.MaxOut > 0 {
		pc.MaxOut = h.MaxOut
	}
	who := "person " + call.Person.Label()
	ph, err := c.reserve(ctx, &book{name: spendlimit.Book(call.Person), who: who, lim: caps.Limits(), ttl: StaleAfter(tn),
		levels: func(u tenant.Usage) []meter.Level { return ceiling.PersonLevels(caps, u) },
		limit: func(f meter.Fit) string {
			l := ceiling.PersonBinding(caps, f)
			return l.Scope.Type + " " + l.Period
		},
		refusal: func(u tenant.Usage, f meter.Fit, need meter.Reservation) string {
			return ceiling.PersonRefusal(who, caps, u, f, need)
		},
	}, pc)
	if err != nil {
		c.Release(context.WithoutCancel(ctx), c.Log, tn.Name, &h)
		return Hold{}, err
	}
	h.Person, h.PersonCall = spendlimit.Book(call.Person), call.ID
	if ph.MaxOut > 0 {
		if from, ok := h.Clamp["from"]; ok {
			ph.Clamp["from"] = from
		}
		h.MaxOut, h.Clamp = ph.MaxOut, ph.Clamp
	}
	return h, nil
}

// reserve is Reserve against one book.
func (c *Ceilings) reserve(ctx context.Context, b *book, call Call) (Hold, error) {
	w := call.Worst
	asked := call.MaxOut
	if asked <= 0 {
		asked = DefaultMaxOutput
	}
	need := min(asked, max(c.MinOutput, 1))
	// Most calls fit whole: reserving the asked-for worst case straight
	// away costs one ledger call instead of two. The ledger takes it only
	// if every ceiling has room for it, which is when the fit below would
	// leave the output limit as asked; when it has not, the usage is read
	// to clamp the call or say which ceiling refuses it.
	ok, err := c.Ledger.Reserve(ctx, b.name, call.ID, amount(w.Reservation(asked)), b.lim, b.ttl)
	if err != nil {
		return Hold{}, unavailable(err)
	}
	if ok {
		return Hold{Call: call.ID}, nil
	}
	var since time.Time
	wait := 5 * time.Millisecond
	for attempt := 0; attempt < tenantReserveAttempts; {
		u, err := c.Ledger.Usage(ctx, b.name)
		if err != nil {
			return Hold{}, unavailable(err)
		}
		ls := b.levels(u)
		f := meter.FitCall(ls, w, false)
		if f.MaxOutput < need {
			if meter.FitCall(ls, w, true).MaxOutput < need {
				return Hold{}, &Refusal{Kind: Exhausted, Msg: b.refusal(u, f, w.Reservation(need))}
			}
			// The calls in flight hold the rest: they may give some back
			// when they settle.
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) > WaitMax || clock.Sleep(ctx, wait) != nil {
				return Hold{}, &Refusal{Kind: Contended, RetryAfter: 5 * time.Second,
					Msg: fmt.Sprintf("the calls %s has in flight hold the rest of its %s limit; retry when they finish", b.who, b.limit(f))}
			}
			wait = min(wait*2, WaitStep)
			deadline.Refill(ctx)
			continue
		}
		out := min(asked, f.MaxOutput)
		r := w.Reservation(out)
		ok, err := c.Ledger.Reserve(ctx, b.name, call.ID, amount(r), b.lim, b.ttl)
		if err != nil {
			return Hold{}, unavailable(err)
		}
		if !ok {
			// Another call took the room between the reading and the
			// reservation: read again.
			attempt++
			continue
		}
		h := Hold{Call: call.ID}
		if out < asked {
			h.MaxOut = out
			h.Clamp = map[string]any{"to": out, "binding": b.who, "binding_dimension": f.Binding,
				"limit": b.limit(f), "reserved_dollars": meter.ToDollars(r.Micros)}
			if asked != DefaultMaxOutput || call.AgentSet {
				h.Clamp["from"] = asked
			}
		}
		return h, nil
	}
	return Hold{}, &Refusal{Kind: Contended, RetryAfter: time.Second,
		Msg: fmt.Sprintf("%s's calls contend for the rest of its limits; retry shortly", b.who)}
}

// amount is a reservation as the tenant's ledger holds it.
func amount(r meter.Reservation) tenant.Amount {
	return tenant.Amount{Micros: r.Micros, Tokens: r.Tokens}
}

// ClampEvent is the budget_clamp event of a call its tenant's ceilings
// clamped, on the thread record id; nil when they did not.
func (h *Hold) ClampEvent(id string, now time.Time) []trajectory.Event {
	if h.Clamp == nil {
		return nil
	}
	return []trajectory.Event{chainrule.Event(id, now, trajectory.EventBudgetClamp, h.Clamp)}
}

// Release gives back the reservations of a call that was not sent, once.
func (c *Ceilings) Release(ctx context.Context, log *slog.Logger, name string, h *Hold) {
	if h.Passed {
		return
	}
	h.Passed = true
	if h.Call != "" {
		c.Charge(ctx, log, name, h.Call, tenant.Amount{})
	}
	if h.Person != "" {
		c.Charge(ctx, log, h.Person, h.PersonCall, tenant.Amount{})
	}
}

// Settle charges a call's spend, used, to its tenant's ledger and
// releases its reservation. A call of a tenant without spend ceilings
// charges nothing: the ledger keeps only what the ceilings need.
func (c *Ceilings) Settle(ctx context.Context, log *slog.Logger, tn *config.Tenant, h *Hold, used tenant.Amount) {
	if h.Person != "" {
		// A person's limits count dollars only.
		c.Charge(ctx, log, h.Person, h.PersonCall, tenant.Amount{Micros: used.Micros})
	}
	h.Passed = true
	if !c.Spends(tn) {
		return
	}
	c.Charge(ctx, log, tn.Name, h.Call, used)
}

// Amount is what a call that spent micros and used usage charges its
// tenant.
func Amount(micros int64, usage trajectory.Usage) tenant.Amount {
	return tenant.Amount{Micros: micros, Tokens: trajectory.Spend{InputTokens: usage.InputTokens,
		CachedInputTokens: usage.CachedInputTokens, CacheWriteTokens: usage.CacheWriteTokens, OutputTokens: usage.OutputTokens}.Tokens()}
}

// Charge settles call on its tenant's ledger: its reservation is
// released and used charged. A ledger that is out is retried in the
// background; any other failure is logged with the figures.
func (c *Ceilings) Charge(ctx context.Context, log *slog.Logger, name, call string, used tenant.Amount) {
	write := func(ctx context.Context) error { return c.Ledger.Settle(ctx, name, call, used) }
	err := write(ctx)
	if err == nil {
		return
	}
	attrs := []slog.Attr{slog.String("tenant", name), slog.String("call", call),
		slog.Int64("micros", used.Micros), slog.Int64("tokens", used.Tokens)}
	if errors.Is(err, trajectory.ErrUnavailable) {
		c.Settles.Retry(log, settle.WriteTenant, write, attrs)
		return
	}
	log.LogAttrs(ctx, slog.LevelError, "tenant charge not recorded", append(attrs, slog.String("error", err.Error()))...)
}

// StaleAfter is how long a call may stay in flight before its thread
// takes it for lost: past the tenant's call deadline, or an hour without
// one.
func StaleAfter(tn *config.Tenant) time.Duration {
	if d := tn.CallLimits.CallDeadline.Std(); d > 0 {
		return d + time.Minute
	}
	return time.Hour
}
