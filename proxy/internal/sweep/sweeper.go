package sweep

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/ceiling"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Call is one of this replica's calls in flight, as its beat tells the
// store of it.
type Call struct {
	Record string // the thread record it runs on
	ID     string // the call's id on the record
	Output int64  // the output tokens streamed so far
}

// Options are the sweeper's dependencies.
type Options struct {
	Store  trajectory.Store
	Config *config.Config // store.heartbeat, limits.idle_finish, tenants
	Clock  func() time.Time
	Logger *slog.Logger
	Prices *meter.Table
	Stages meter.Thresholds
	// Replica names this process among the replicas; Owner is what this
	// run writes as its calls' owner (replica#incarnation).
	Replica, Owner string
	// Calls lists this replica's calls in flight, for their beats.
	Calls func() []Call
	// StaleCall is how long a call of tenant that wrote no beat may stay
	// in flight before a request on its record takes it for lost.
	StaleCall func(tenant *config.Tenant) time.Duration
	// Charge charges a reclaimed call to its tenant's ledger; nil when no
	// tenant keeps one.
	Charge func(ctx context.Context, tenant, call string, used tenant.Amount)
	// ChargePerson charges a reclaimed call's dollars to the spend limits
	// of the person who made it; nil when no limits on people are kept.
	ChargePerson func(ctx context.Context, p *trajectory.Person, call string, micros int64)
	// Swept hears how many calls a sweep reclaimed and charged; nil: no one.
	Swept func(n int)
}

// Sweeper beats for this replica's calls and sweeps the store's lost
// calls and idle runs.
type Sweeper struct {
	o     Options
	rules atomic.Pointer[rules] // the config's current part: Options' until Use
	swept chan struct{}         // closed once the start's sweep of this replica's calls is done

	mu sync.Mutex
	// down says this sweeper's last store operation found the store
	// unreachable; backAt is when the store last answered it again after
	// that. While the store is down no replica can beat either, so the
	// sweep counts a call's silence from backAt at the earliest.
	down   bool
	backAt time.Time
}

// New builds a sweeper; WatchCalls and FinishIdle run it.
func New(o Options) *Sweeper {
	s := &Sweeper{o: o, swept: make(chan struct{})}
	s.Use(o.Config, o.Prices, o.Stages)
	return s
}

// rules are what a reloaded config changes of the sweeps.
type rules struct {
	cfg    *config.Config // limits.idle_finish, tenants
	prices *meter.Table
	stages meter.Thresholds
}

// Use makes cfg's limits and tenants, prices and stages those of the
// sweeps from now on (a config reload); store.heartbeat stays Options'.
func (s *Sweeper) Use(cfg *config.Config, prices *meter.Table, stages meter.Thresholds) {
	s.rules.Store(&rules{cfg: cfg, prices: prices, stages: stages})
}

// Swept is closed once the start's sweep of this replica's own calls is
// done.
func (s *Sweeper) Swept() <-chan struct{} { return s.swept }

// errNotLost aborts a sweep of a call that settled, or beat, meanwhile.
var errNotLost = errors.New("sweep: call not lost")

// beatEvery is store.heartbeat; lostAfter how long a call may go without a
// beat before it is taken for lost.
func (s *Sweeper) beatEvery() time.Duration {
	if d := s.o.Config.Store.Heartbeat.Std(); d > 0 {
		return d
	}
	return config.DefaultHeartbeat
}

func (s *Sweeper) lostAfter() time.Duration { return config.LostBeats * s.beatEvery() }

// Silent reports, for a request on rec, a call in flight on rec whose
// replica stopped beating (silent, with a request's bound).
func (s *Sweeper) Silent(rec *trajectory.Record, now time.Time) bool {
	return s.silent(rec, now, false)
}

// silent reports a call in flight on rec whose replica stopped beating:
// its last beat is older than lostAfter. sweeping says the sweeper asks,
// not a request on the record. A request waits one heartbeat more: both
// charge the call as estimated (Reclaim), but a sweep logs it and
// reaches calls no request comes for, so the sweeps, which every replica
// runs each beat, come first even on a loaded host.
//
// A sweep also counts silence only from when the store last answered
// this sweeper again after it could not reach it (and finds nothing
// silent while it cannot): during an outage no replica could beat, so a
// beat older than the bound says nothing of the call, and charging it
// would charge live calls, and admissions whose release is still being
// sent again, as lost. A request keeps the plain bound: a live call it
// charges as estimated has its estimate replaced by its reply's charge,
// late and once, while counting from backAt would keep such a thread
// busy for LostBeats+1 more beats after the outage.
func (s *Sweeper) silent(rec *trajectory.Record, now time.Time, sweeping bool) bool {
	if rec.State != trajectory.CallingModel || rec.Call == "" {
		return false
	}
	if rec.CallBeat.IsZero() {
		// A call of a version that wrote no beat: taken for lost past the
		// stale-call bound, by the next request on its record only (it
		// has no estimate to charge).
		return !sweeping && now.Sub(rec.UpdatedAt) >= s.o.StaleCall(s.tenant(rec.Tenant))
	}
	if !sweeping {
		return now.Sub(rec.CallBeat) >= s.lostAfter()+s.beatEvery()
	}
	from := rec.CallBeat
	s.mu.Lock()
	down, back := s.down, s.backAt
	s.mu.Unlock()
	if down {
		return false
	}
	if back.After(from) {
		from = back
	}
	return now.Sub(from) >= s.lostAfter()
}

// answered notes what a store operation of this sweeper said of the
// store: unreachable (trajectory.ErrUnavailable), or answering, the first
// time since it was unreachable setting backAt. Any other error is an
// answer too (the record was missing, the call settled meanwhile), except
// once ctx ended: then the operation says nothing of the store.
func (s *Sweeper) answered(ctx context.Context, err error) {
	unreachable := errors.Is(err, trajectory.ErrUnavailable)
	if !unreachable && err != nil && ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	back := !unreachable && s.down
	switch {
	case unreachable:
		s.down = true
	case back:
		s.down, s.backAt = false, s.o.Clock()
	}
	at := s.backAt
	s.mu.Unlock()
	if back {
		s.o.Logger.LogAttrs(ctx, slog.LevelInfo, "store reachable again: the lost-call sweep counts silence from now",
			slog.Time("back_at", at))
	}
}

// tenant is the config of a tenant by name; an empty one when the config
// no longer has it.
func (s *Sweeper) tenant(name string) *config.Tenant {
	ts := s.rules.Load().cfg.Tenants
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return &config.Tenant{Name: name}
}

// WatchCalls beats for this replica's calls and sweeps lost ones until ctx
// ends. Its first sweep reclaims the calls this replica left unsettled
// when it last stopped: no call of a process that just started is alive.
func (s *Sweeper) WatchCalls(ctx context.Context) {
	s.SweepCalls(ctx, true)
	close(s.swept)
	tick := time.NewTicker(s.beatEvery())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.Beat(ctx)
			s.SweepCalls(ctx, false)
		}
	}
}

// Beat tells the store that this replica's calls in flight are alive, and
// how much output each has streamed: one batch of updates for them all
// (one round trip on Redis, deadline.UpdateChains), each a checkpoint of
// its call's output.
func (s *Sweeper) Beat(ctx context.Context) {
	calls := s.o.Calls()
	if len(calls) == 0 {
		return
	}
	ids := make([]string, len(calls))
	fns := make([]func([]*trajectory.Record) ([]trajectory.Event, error), len(calls))
	for i, c := range calls {
		ids[i] = c.Record
		fns[i] = func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			r := chain[0]
			if r.Call != c.ID || r.State != trajectory.CallingModel {
				return nil, errNotLost
			}
			r.CallBeat, r.CallOutput = s.o.Clock(), c.Output
			return nil, nil
		}
	}
	errs := deadline.UpdateChains(ctx, s.o.Store, ids, fns)
	var failed error
	for i, err := range errs {
		if err != nil && !errors.Is(err, errNotLost) && ctx.Err() == nil {
			failed = err
			s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "heartbeat of a call in flight failed", slog.String("trajectory", calls[i].Record),
				slog.String("call", calls[i].ID), slog.String("error", err.Error()))
		}
	}
	s.answered(ctx, failed)
}

// SweepCalls reclaims the calls in flight whose replica fell silent (and,
// with own, every call this replica owns); it returns how many.
func (s *Sweeper) SweepCalls(ctx context.Context, own bool) int {
	recs, err := s.o.Store.List(ctx, trajectory.Filter{State: trajectory.CallingModel, Limit: trajectory.MaxListLimit})
	s.answered(ctx, err)
	if err != nil {
		if ctx.Err() == nil {
			s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "lost-call sweep: listing records failed", slog.String("error", err.Error()))
		}
		return 0
	}
	n := 0
	for _, rec := range recs {
		mine := own && s.leftBehind(rec)
		if !mine && !s.silent(rec, s.o.Clock(), true) {
			continue
		}
		if s.sweepCall(ctx, rec.ID, rec.Call, mine) {
			n++
		}
	}
	if n > 0 && s.o.Swept != nil {
		s.o.Swept(n)
	}
	return n
}

// sweepCall reclaims call on record id, if it is still there and still
// lost, and charges it as estimated (charge). The tenant's ledger, when
// its ceilings keep one, is charged the same under the call's id (a
// settle by the call's own replica, should it come after all, changes
// nothing there).
func (s *Sweeper) sweepCall(ctx context.Context, id, call string, mine bool) bool {
	var lost Lost
	why := "its replica stopped beating"
	if mine {
		why = "its replica restarted"
	}
	_, err := s.o.Store.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		now := s.o.Clock()
		rec := chain[0]
		if rec.Call != call || !(mine && s.leftBehind(rec)) && !s.silent(rec, now, true) {
			return nil, errNotLost
		}
		var evs []trajectory.Event
		var err error
		evs, lost, err = s.charge(chain, now, why)
		return evs, err
	})
	s.answered(ctx, err)
	switch {
	case err == nil:
		s.ChargeLedgers(ctx, lost)
		s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "lost call reclaimed and charged as estimated", slog.String("trajectory", id),
			slog.String("call", call), slog.Any("usage", lost.Usage), slog.Float64("dollars", lost.Dollars), slog.String("owner", lost.Owner))
		return true
	case errors.Is(err, errNotLost):
	case ctx.Err() == nil:
		s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "lost-call sweep: reclaiming a call failed", slog.String("trajectory", id),
			slog.String("call", call), slog.String("error", err.Error()))
	}
	return false
}

// Lost is a call taken for lost and what it was charged.
type Lost struct {
	Tenant, Call string
	Owner        string // the replica that served it
	Usage        trajectory.Usage
	Dollars      float64
	used         tenant.Amount
	person       *trajectory.Person // who made the call; nil for a virtual key
}

// Reclaim takes the call in flight on the thread record (chain[0]) for
// lost, inside the store update of a request that found it silent, and
// charges it as a sweep would; the caller charges the tenant's ledger
// and the person's limits (ChargeLedgers) once its update is saved.
func (s *Sweeper) Reclaim(chain []*trajectory.Record, now time.Time) ([]trajectory.Event, Lost, error) {
	return s.charge(chain, now, "no beat or reply came from its replica before the next request on its thread")
}

// ChargeLedgers charges a call taken for lost to its tenant's ledger,
// when the tenant's ceilings keep one, and its dollars to its person's
// spend limits, when a person made it and limits on people are kept: as
// the call's own settle would have.
func (s *Sweeper) ChargeLedgers(ctx context.Context, l Lost) {
	if l.Call == "" {
		return
	}
	if s.o.Charge != nil && ceiling.Limits(s.tenant(l.Tenant)).Spends() {
		s.o.Charge(ctx, l.Tenant, l.Call, l.used)
	}
	if l.person != nil && s.o.ChargePerson != nil {
		s.o.ChargePerson(ctx, l.person, l.Call, l.used.Micros)
	}
}

// personOf is the person the chain's records name, nearest first; nil
// when none does.
func personOf(chain []*trajectory.Record) *trajectory.Person {
	for _, r := range chain {
		if r.Person != nil {
			return r.Person.Clone()
		}
	}
	return nil
}

// charge ends the call in flight on chain[0] charged as estimated: its
// input estimate and the output its replica last said had streamed. The
// reservation goes back on the whole chain, the record is READY again
// and remembers the call with its estimate, so that a reply recorded
// later replaces the estimate (chainrule.ChargeLost).
func (s *Sweeper) charge(chain []*trajectory.Record, now time.Time, why string) ([]trajectory.Event, Lost, error) {
	rec := chain[0]
	ru := s.rules.Load()
	usage := trajectory.Usage{InputTokens: rec.CallInput, OutputTokens: rec.CallOutput}
	charge := ru.prices.Cost(rec.Model, usage)
	dollars := charge.Dollars()
	lost := Lost{Tenant: rec.Tenant, Call: rec.Call, Owner: rec.CallOwner, Usage: usage, Dollars: dollars,
		used:   tenant.Amount{Micros: charge.Micros, Tokens: trajectory.Spend{InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens}.Tokens()},
		person: personOf(chain)}
	data := map[string]any{"stop": "error", "estimated": true, "usage": usage, "dollars": dollars, "call": rec.Call,
		"model": rec.Model, "provider": rec.Provider, "owner": rec.CallOwner, "swept_by": s.o.Replica,
		"detail": "call lost: " + why + "; charged as estimated from its input and the output streamed by its last heartbeat"}
	evs, err := chainrule.ChargeLost(chain, usage, charge, data, now)
	if err != nil {
		return nil, Lost{}, err
	}
	ls := chainrule.Levels(chain, now, true)
	return append(evs, chainrule.ReadStages(chain, ls, meter.Check(ls, ru.stages), ru.stages, now)...), lost, nil
}

// leftBehind reports a call in flight on rec that an earlier run of this
// replica owned: same replica name, another incarnation. Calls this run
// admitted are alive, even while the start's sweep is still going.
func (s *Sweeper) leftBehind(rec *trajectory.Record) bool {
	name, _, ok := strings.Cut(rec.CallOwner, "#")
	return ok && name == s.o.Replica && rec.CallOwner != s.o.Owner
}
