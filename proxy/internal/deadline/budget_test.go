package deadline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// stalling answers Get only when its context ends, as a store that
// stopped answering, and says whether each call's context had already
// ended when the call reached it.
type stalling struct {
	trajectory.Store
	doneOnArrival []bool
}

func (s *stalling) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	s.doneOnArrival = append(s.doneOnArrival, ctx.Err() != nil)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestBudgetSharedByCalls: under one budget, the store calls a turn makes
// end by one deadline: once a stalled call has waited for it, the next
// reaches the store already past it (it waits nothing), however long each
// call's own bound; a refill, after a wait that was not the store's, gives
// the next call the whole budget again. Without a budget each call has its
// own bound.
func TestBudgetSharedByCalls(t *testing.T) {
	s := &stalling{Store: memory.New(memory.Options{})}
	st := deadline.Store(s, time.Hour)
	ctx := deadline.WithBudget(context.Background(), 30*time.Millisecond)
	for range 2 {
		if _, err := st.Get(ctx, "t"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a stalled call: %v", err)
		}
	}
	deadline.Refill(ctx)
	_, _ = st.Get(ctx, "t")
	if want := []bool{false, true, false}; len(s.doneOnArrival) != 3 || s.doneOnArrival[0] != want[0] || s.doneOnArrival[1] != want[1] || s.doneOnArrival[2] != want[2] {
		t.Errorf("calls' contexts done on arrival %v, want %v: the second spent nothing, the refill gave the third its time", s.doneOnArrival, want)
	}

	// Spend: a wait on the store outside the wrapped calls spends the
	// same budget.
	ctx = deadline.WithBudget(context.Background(), 30*time.Millisecond)
	_, err := deadline.Spend(ctx, func(ctx context.Context) (struct{}, error) { <-ctx.Done(); return struct{}{}, ctx.Err() })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Spend under a budget: %v", err)
	}
	s.doneOnArrival = nil
	_, _ = st.Get(ctx, "t")
	if len(s.doneOnArrival) != 1 || !s.doneOnArrival[0] {
		t.Errorf("a call after Spend used the budget up: done on arrival %v, want [true]", s.doneOnArrival)
	}

	// No budget: the call's own bound, and Spend bounds nothing.
	bounded := deadline.Store(s, 30*time.Millisecond)
	s.doneOnArrival = nil
	for range 2 {
		_, _ = bounded.Get(context.Background(), "t")
	}
	if len(s.doneOnArrival) != 2 || s.doneOnArrival[0] || s.doneOnArrival[1] {
		t.Errorf("without a budget: done on arrival %v, want [false false]", s.doneOnArrival)
	}
	if bound, _ := deadline.Spend(context.Background(), func(ctx context.Context) (bool, error) {
		_, ok := ctx.Deadline()
		return ok, nil
	}); bound {
		t.Error("Spend without a budget put a deadline on the call")
	}
}
