package memory

import (
	"context"
	"slices"
	"strings"
	"sync"

	"gatekeeper/spendlimit"
)

// SpendLimits keeps the admin API's spend limits on people in this
// process's memory.
type SpendLimits struct {
	mu     sync.Mutex
	limits map[string]spendlimit.Limit
}

var _ spendlimit.Store = (*SpendLimits)(nil)

// NewSpendLimits returns an empty SpendLimits.
func NewSpendLimits() *SpendLimits { return &SpendLimits{limits: map[string]spendlimit.Limit{}} }

// SpendLimits implements spendlimit.Store, in id order.
func (s *SpendLimits) SpendLimits(ctx context.Context) ([]spendlimit.Limit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]spendlimit.Limit, 0, len(s.limits))
	for _, l := range s.limits {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b spendlimit.Limit) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// PutSpendLimit implements spendlimit.Store.
func (s *SpendLimits) PutSpendLimit(ctx context.Context, l spendlimit.Limit) (spendlimit.Limit, error) {
	if err := ctx.Err(); err != nil {
		return spendlimit.Limit{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.limits[l.ID]
	if !ok && len(s.limits) >= spendlimit.MaxLimits {
		return spendlimit.Limit{}, spendlimit.ErrFull
	}
	if ok {
		l.Created = old.Created
	}
	s.limits[l.ID] = l
	return l, nil
}

// DeleteSpendLimit implements spendlimit.Store.
func (s *SpendLimits) DeleteSpendLimit(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.limits[id]; !ok {
		return spendlimit.ErrNotFound
	}
	delete(s.limits, id)
	return nil
}
