package approvals

import (
	"context"
	"time"
)

// bounded bounds every call to the Store it wraps, as the record store's
// calls are bounded (store.timeout): a store that stops answering costs a
// turn that much and no more.
type bounded struct {
	Store
	d time.Duration
}

var _ Store = bounded{}

// Bounded wraps st so that each call waits at most d; a d of zero or less
// leaves it as it is.
func Bounded(st Store, d time.Duration) Store {
	if d <= 0 || st == nil {
		return st
	}
	return bounded{Store: st, d: d}
}

// within runs call under a deadline d from now.
func within[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return call(ctx)
}

func (b bounded) CreateHold(ctx context.Context, h *Hold, reqs []*Request) (*Hold, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Hold, error) { return b.Store.CreateHold(ctx, h, reqs) })
}

func (b bounded) GetHold(ctx context.Context, id string) (*Hold, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Hold, error) { return b.Store.GetHold(ctx, id) })
}

func (b bounded) FindHold(ctx context.Context, trajectory, key string) (*Hold, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Hold, error) { return b.Store.FindHold(ctx, trajectory, key) })
}

func (b bounded) UpdateHold(ctx context.Context, id string, fn func(*Hold) error) (*Hold, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Hold, error) { return b.Store.UpdateHold(ctx, id, fn) })
}

func (b bounded) Get(ctx context.Context, id string) (*Request, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Request, error) { return b.Store.Get(ctx, id) })
}

func (b bounded) List(ctx context.Context, f Filter) ([]*Request, error) {
	return within(ctx, b.d, func(ctx context.Context) ([]*Request, error) { return b.Store.List(ctx, f) })
}

func (b bounded) Update(ctx context.Context, id string, fn func(*Request) error) (*Request, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Request, error) { return b.Store.Update(ctx, id, fn) })
}

func (b bounded) Due(ctx context.Context, t time.Time, limit int) ([]*Request, error) {
	return within(ctx, b.d, func(ctx context.Context) ([]*Request, error) { return b.Store.Due(ctx, t, limit) })
}

func (b bounded) Recent(ctx context.Context, trajectory, digest string) (*Request, error) {
	return within(ctx, b.d, func(ctx context.Context) (*Request, error) { return b.Store.Recent(ctx, trajectory, digest) })
}

func (b bounded) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return within(ctx, b.d, func(ctx context.Context) (bool, error) { return b.Store.Claim(ctx, key, ttl) })
}
