package proxy

import (
	"context"
	"time"

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
