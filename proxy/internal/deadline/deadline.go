package deadline

import (
	"context"
	"time"

	"gatekeeper/ratelimit"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// inProcess is a store whose calls wait on nothing outside the process:
// the memory stores, whose only wait is their own lock, and a wrapper
// that says of the store it wraps. They read their context once, so a
// deadline could fail a call only after its wait, never spare the wait;
// it would arm and stop a timer on every call for nothing. A store that
// does not say so (Redis, any other wrapper) is bounded.
type inProcess interface{ InProcess() bool }

// unbounded reports whether v is a store a deadline cannot help.
func unbounded(v any) bool {
	ip, ok := v.(inProcess)
	return ok && ip.InProcess()
}

// within runs call under a deadline d from now, or sooner when ctx's
// budget (WithBudget) ends sooner: the one shape of every bounded call
// below. A budget past its deadline fails the call at once.
func within[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	if b := budgetOf(ctx); b != nil {
		d = min(d, b.remaining())
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return call(ctx)
}

// do is within for a call that returns only an error.
func do(ctx context.Context, d time.Duration, call func(context.Context) error) error {
	_, err := within(ctx, d, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
	return err
}

// store bounds every call to the trajectory store it wraps.
type store struct {
	trajectory.Store
	d time.Duration
}

var (
	_ trajectory.Store = store{}
	_ ChainsUpdater    = store{}
)

// Store wraps st so that each call waits at most d; a d of zero or less,
// or a store in the process, leaves it as it is.
func Store(st trajectory.Store, d time.Duration) trajectory.Store {
	if d <= 0 || unbounded(st) {
		return st
	}
	return store{Store: st, d: d}
}

func (s store) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	return do(ctx, s.d, func(ctx context.Context) error { return s.Store.Create(ctx, rec, evs...) })
}

func (s store) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	return do(ctx, s.d, func(ctx context.Context) error { return s.Store.CreateChild(ctx, rec, max, evs...) })
}

func (s store) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	return within(ctx, s.d, func(ctx context.Context) (*trajectory.Record, error) { return s.Store.Get(ctx, id) })
}

func (s store) Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error) {
	return within(ctx, s.d, func(ctx context.Context) (*trajectory.Record, error) { return s.Store.Update(ctx, id, fn) })
}

func (s store) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	return within(ctx, s.d, func(ctx context.Context) ([]*trajectory.Record, error) { return s.Store.UpdateChain(ctx, id, fn) })
}

// UpdateChains bounds a flush's updates, all sent at once, by one
// deadline.
func (s store) UpdateChains(ctx context.Context, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) []error {
	errs, _ := within(ctx, s.d, func(ctx context.Context) ([]error, error) { return UpdateChains(ctx, s.Store, ids, fns), nil })
	return errs
}

func (s store) List(ctx context.Context, f trajectory.Filter) ([]*trajectory.Record, error) {
	return within(ctx, s.d, func(ctx context.Context) ([]*trajectory.Record, error) { return s.Store.List(ctx, f) })
}

func (s store) AppendEvents(ctx context.Context, id string, evs ...trajectory.Event) error {
	return do(ctx, s.d, func(ctx context.Context) error { return s.Store.AppendEvents(ctx, id, evs...) })
}

func (s store) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]trajectory.Event, error) {
	return within(ctx, s.d, func(ctx context.Context) ([]trajectory.Event, error) { return s.Store.Events(ctx, id, afterSeq, limit) })
}

func (s store) Ping(ctx context.Context) error {
	return do(ctx, s.d, s.Store.Ping)
}

// ChainsUpdater is a store that saves the updates of several records in
// one step (the Redis store: one pipeline).
type ChainsUpdater interface {
	UpdateChains(ctx context.Context, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) []error
}

// UpdateChains is UpdateChain of each ids[i] with fns[i], in one step when
// st can, one after the other otherwise; errs[i] is ids[i]'s outcome.
func UpdateChains(ctx context.Context, st trajectory.Store, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) []error {
	if cu, ok := st.(ChainsUpdater); ok {
		return cu.UpdateChains(ctx, ids, fns)
	}
	errs := make([]error, len(ids))
	for i, id := range ids {
		_, errs[i] = st.UpdateChain(ctx, id, fns[i])
	}
	return errs
}

// buckets bounds each call to shared rate-limit buckets, which live in
// the same Redis as the records.
type buckets struct {
	ratelimit.Buckets
	d time.Duration
}

var (
	_ ratelimit.Buckets      = buckets{}
	_ ratelimit.BatchSettler = buckets{}
	_ ratelimit.BatchTaker   = buckets{}
)

// Buckets wraps b so that each call waits at most d; a d of zero or less
// leaves it as it is.
func Buckets(b ratelimit.Buckets, d time.Duration) ratelimit.Buckets {
	if d <= 0 {
		return b
	}
	return buckets{Buckets: b, d: d}
}

// Unwrap is the buckets b bounds: a take riding in the store's pipeline
// (ratelimit.Ride) goes to them directly, under the store's deadline.
func (b buckets) Unwrap() ratelimit.Buckets { return b.Buckets }

// taken is what Take answers.
type taken struct {
	ok    bool
	retry time.Duration
}

func (b buckets) Take(ctx context.Context, k ratelimit.Key, c ratelimit.Cost) (bool, time.Duration, error) {
	t, err := within(ctx, b.d, func(ctx context.Context) (taken, error) {
		ok, retry, err := b.Buckets.Take(ctx, k, c)
		return taken{ok, retry}, err
	})
	return t.ok, t.retry, err
}

// batchTaken is what TakeBatch answers.
type batchTaken struct {
	n        int
	retry    time.Duration
	headroom float64
}

// TakeBatch takes the costs together when the buckets can (Redis: one
// round trip, with the headroom), one by one otherwise, all within one
// deadline.
func (b buckets) TakeBatch(ctx context.Context, k ratelimit.Key, cs []ratelimit.Cost) (int, time.Duration, float64, error) {
	t, err := within(ctx, b.d, func(ctx context.Context) (batchTaken, error) {
		if bt, ok := b.Buckets.(ratelimit.BatchTaker); ok {
			n, retry, h, err := bt.TakeBatch(ctx, k, cs)
			return batchTaken{n, retry, h}, err
		}
		var t batchTaken
		for _, c := range cs {
			ok, retry, err := b.Buckets.Take(ctx, k, c)
			if err != nil {
				return t, err
			}
			if !ok {
				t.retry = retry
				break
			}
			t.n++
		}
		// The takes stand whatever Headroom answers: one it could not
		// read is reported as none.
		t.headroom, _ = b.Buckets.Headroom(ctx, k)
		return t, nil
	})
	return t.n, t.retry, t.headroom, err
}

func (b buckets) Headroom(ctx context.Context, k ratelimit.Key) (float64, error) {
	return within(ctx, b.d, func(ctx context.Context) (float64, error) { return b.Buckets.Headroom(ctx, k) })
}

func (b buckets) Cool(ctx context.Context, k ratelimit.Key, d time.Duration) error {
	return do(ctx, b.d, func(ctx context.Context) error { return b.Buckets.Cool(ctx, k, d) })
}

func (b buckets) Settle(ctx context.Context, k ratelimit.Key, delta ratelimit.Cost, r ratelimit.Remaining) error {
	return do(ctx, b.d, func(ctx context.Context) error { return b.Buckets.Settle(ctx, k, delta, r) })
}

// SettleBatch settles the keys together when the buckets can (Redis: one
// round trip), one by one otherwise, all within one deadline.
func (b buckets) SettleBatch(ctx context.Context, keys []ratelimit.Key, deltas []ratelimit.Cost, rs []ratelimit.Remaining) []error {
	errs, _ := within(ctx, b.d, func(ctx context.Context) ([]error, error) {
		if bs, ok := b.Buckets.(ratelimit.BatchSettler); ok {
			return bs.SettleBatch(ctx, keys, deltas, rs), nil
		}
		errs := make([]error, len(keys))
		for i, k := range keys {
			errs[i] = b.Buckets.Settle(ctx, k, deltas[i], rs[i])
		}
		return errs, nil
	})
	return errs
}

// ledger bounds each call to the tenants' ledger, which lives in the same
// store as the records.
type ledger struct {
	tenant.Ledger
	d time.Duration
}

var _ tenant.Ledger = ledger{}

// Ledger wraps l so that each call waits at most d; a nil l, a d of zero
// or less, or a ledger in the process, leaves it as it is.
func Ledger(l tenant.Ledger, d time.Duration) tenant.Ledger {
	if l == nil || d <= 0 || unbounded(l) {
		return l
	}
	return ledger{Ledger: l, d: d}
}

func (l ledger) Usage(ctx context.Context, name string) (tenant.Usage, error) {
	return within(ctx, l.d, func(ctx context.Context) (tenant.Usage, error) { return l.Ledger.Usage(ctx, name) })
}

func (l ledger) Reserve(ctx context.Context, name, call string, r tenant.Amount, lim tenant.Limits, ttl time.Duration) (bool, error) {
	return within(ctx, l.d, func(ctx context.Context) (bool, error) { return l.Ledger.Reserve(ctx, name, call, r, lim, ttl) })
}

func (l ledger) Settle(ctx context.Context, name, call string, used tenant.Amount) error {
	return do(ctx, l.d, func(ctx context.Context) error { return l.Ledger.Settle(ctx, name, call, used) })
}

func (l ledger) StartRun(ctx context.Context, name, id string, lim tenant.Limits) (tenant.Start, error) {
	return within(ctx, l.d, func(ctx context.Context) (tenant.Start, error) { return l.Ledger.StartRun(ctx, name, id, lim) })
}

func (l ledger) LiveRuns(ctx context.Context, name string) ([]string, error) {
	return within(ctx, l.d, func(ctx context.Context) ([]string, error) { return l.Ledger.LiveRuns(ctx, name) })
}

func (l ledger) EndRuns(ctx context.Context, name string, ids ...string) error {
	return do(ctx, l.d, func(ctx context.Context) error { return l.Ledger.EndRuns(ctx, name, ids...) })
}

// links bounds every call to the links it wraps.
type links struct {
	trajectory.Links
	d time.Duration
}

// Links wraps l so that each call waits at most d; a d of zero or less,
// a nil l, or links in the process, leaves it as it is.
func Links(l trajectory.Links, d time.Duration) trajectory.Links {
	if d <= 0 || l == nil || unbounded(l) {
		return l
	}
	return links{Links: l, d: d}
}

func (l links) Link(ctx context.Context, key, id string, ttl time.Duration) error {
	return do(ctx, l.d, func(ctx context.Context) error { return l.Links.Link(ctx, key, id, ttl) })
}

func (l links) Linked(ctx context.Context, key string) (string, error) {
	return within(ctx, l.d, func(ctx context.Context) (string, error) { return l.Links.Linked(ctx, key) })
}
