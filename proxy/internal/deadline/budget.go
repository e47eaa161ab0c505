package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// A budget is the time a turn may wait on its stores before its call:
// the calls that admit it (its run's link, its record, the admission
// update and its one retry, a held turn's lookup, its tenant's ledger),
// the flush of its thread's settles it waits for and the work between
// them all end by one deadline, store.timeout after the turn reached
// admission. So a store that stopped answering is told to the agent
// within store.timeout however many calls admission makes. A wait that is
// not the store's (a busy thread, a budget held by calls in flight, a
// pause) sets the deadline again, store.timeout after it ends.
type budget struct {
	full time.Duration
	by   atomic.Int64 // the deadline, in Unix nanoseconds
}

type budgetKey struct{}

// WithBudget ends the store calls made under ctx d from now, together; a
// d of zero or less gives ctx as it is.
func WithBudget(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	b := &budget{full: d}
	b.refill()
	return context.WithValue(ctx, budgetKey{}, b)
}

// Budgeted is the budget a turn on st gets: d, or none when st waits on
// nothing outside the process (its calls are not timed, so a budget
// would bound nothing).
func Budgeted(st any, d time.Duration) time.Duration {
	if unbounded(st) {
		return 0
	}
	return d
}

// budgetOf is ctx's budget, nil without one.
func budgetOf(ctx context.Context) *budget {
	b, _ := ctx.Value(budgetKey{}).(*budget)
	return b
}

// Refill sets ctx's deadline store.timeout from now again, after a wait
// that was not the store's: the store calls after it are bounded as if
// the turn had just arrived.
func Refill(ctx context.Context) {
	if b := budgetOf(ctx); b != nil {
		b.refill()
	}
}

// Spend runs call, a wait on the store that is not one of the wrapped
// calls (a flush the caller waits for), by ctx's budget's deadline.
// Without a budget, call runs under ctx.
func Spend[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	b := budgetOf(ctx)
	if b == nil {
		return call(ctx)
	}
	return within(ctx, b.remaining(), call)
}

func (b *budget) refill() { b.by.Store(time.Now().Add(b.full).UnixNano()) }

// remaining is the time to the budget's deadline, zero or less once past.
func (b *budget) remaining() time.Duration { return time.Duration(b.by.Load() - time.Now().UnixNano()) }
