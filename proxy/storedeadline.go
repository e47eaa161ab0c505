package proxy

import (
	"context"
	"time"

	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/ratelimit"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// deadlineStore bounds every call to the store it wraps: a turn waits at
// most store.timeout for one answer, then fails closed (storeErr: 503
// with Retry-After) instead of hanging while the store stalls.
type deadlineStore struct {
	trajectory.Store
	d time.Duration
}

var _ trajectory.Store = deadlineStore{}

// withDeadline wraps st; a d of zero or less leaves it as it is.
func withDeadline(st trajectory.Store, d time.Duration) trajectory.Store {
	if d <= 0 {
		return st
	}
	return deadlineStore{Store: st, d: d}
}

func (s deadlineStore) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.Create(ctx, rec, evs...)
}

func (s deadlineStore) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.Get(ctx, id)
}

func (s deadlineStore) Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.Update(ctx, id, fn)
}

func (s deadlineStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.UpdateChain(ctx, id, fn)
}

var _ deadline.ChainsUpdater = deadlineStore{}

// UpdateChains bounds a flush's updates, all sent at once, by one
// deadline.
func (s deadlineStore) UpdateChains(ctx context.Context, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) []error {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return deadline.UpdateChains(ctx, s.Store, ids, fns)
}

func (s deadlineStore) List(ctx context.Context, f trajectory.Filter) ([]*trajectory.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.List(ctx, f)
}

func (s deadlineStore) AppendEvents(ctx context.Context, id string, evs ...trajectory.Event) error {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.AppendEvents(ctx, id, evs...)
}

func (s deadlineStore) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]trajectory.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.Events(ctx, id, afterSeq, limit)
}

func (s deadlineStore) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	return s.Store.Ping(ctx)
}

// deadlineBuckets bounds each call to shared rate-limit buckets by
// store.timeout, as deadlineStore does the record store's: they live in
// the same Redis.
type deadlineBuckets struct {
	ratelimit.Buckets
	d time.Duration
}

var _ ratelimit.Buckets = deadlineBuckets{}

// bucketsWithDeadline wraps b; a d of zero or less leaves it as it is.
func bucketsWithDeadline(b ratelimit.Buckets, d time.Duration) ratelimit.Buckets {
	if d <= 0 {
		return b
	}
	return deadlineBuckets{Buckets: b, d: d}
}

// Unwrap is the buckets b bounds: a take riding in the store's pipeline
// (ratelimit.Ride) goes to them directly, under the store's deadline.
func (b deadlineBuckets) Unwrap() ratelimit.Buckets { return b.Buckets }

func (b deadlineBuckets) Take(ctx context.Context, k ratelimit.Key, c ratelimit.Cost) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Buckets.Take(ctx, k, c)
}

func (b deadlineBuckets) Headroom(ctx context.Context, k ratelimit.Key) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Buckets.Headroom(ctx, k)
}

func (b deadlineBuckets) Cool(ctx context.Context, k ratelimit.Key, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Buckets.Cool(ctx, k, d)
}

func (b deadlineBuckets) Settle(ctx context.Context, k ratelimit.Key, delta ratelimit.Cost, r ratelimit.Remaining) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Buckets.Settle(ctx, k, delta, r)
}

var _ ratelimit.BatchSettler = deadlineBuckets{}

// SettleBatch settles the keys together when the buckets can (Redis: one
// round trip), one by one otherwise, all within one deadline.
func (b deadlineBuckets) SettleBatch(ctx context.Context, keys []ratelimit.Key, deltas []ratelimit.Cost, rs []ratelimit.Remaining) []error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	if bs, ok := b.Buckets.(ratelimit.BatchSettler); ok {
		return bs.SettleBatch(ctx, keys, deltas, rs)
	}
	errs := make([]error, len(keys))
	for i, k := range keys {
		errs[i] = b.Buckets.Settle(ctx, k, deltas[i], rs[i])
	}
	return errs
}

// deadlineLedger bounds each call to the tenants' ledger by store.timeout,
// as deadlineStore does the record store's: it lives in the same store.
type deadlineLedger struct {
	tenant.Ledger
	d time.Duration
}

var _ tenant.Ledger = deadlineLedger{}

// ledgerWithDeadline wraps l; a nil l, or a d of zero or less, leaves it
// as it is.
func ledgerWithDeadline(l tenant.Ledger, d time.Duration) tenant.Ledger {
	if l == nil || d <= 0 {
		return l
	}
	return deadlineLedger{Ledger: l, d: d}
}

func (l deadlineLedger) Usage(ctx context.Context, name string) (tenant.Usage, error) {
	ctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	return l.Ledger.Usage(ctx, name)
}

func (l deadlineLedger) Reserve(ctx context.Context, name, call string, r tenant.Amount, lim tenant.Limits, ttl time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	return l.Ledger.Reserve(ctx, name, call, r, lim, ttl)
}

func (l deadlineLedger) Settle(ctx context.Context, name, call string, used tenant.Amount) error {
	ctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	return l.Ledger.Settle(ctx, name, call, used)
}

func (l deadlineLedger) StartRun(ctx context.Context, name, id string, lim tenant.Limits) (tenant.Start, error) {
	ctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	return l.Ledger.StartRun(ctx, name, id, lim)
}

func (l deadlineLedger) LiveRuns(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	return l.Ledger.LiveRuns(ctx, name)
}

func (l deadlineLedger) EndRuns(ctx context.Context, name string, ids ...string) error {
	ctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	return l.Ledger.EndRuns(ctx, name, ids...)
}
