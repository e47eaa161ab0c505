package escrow

import (
	"context"
	"testing"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/store/memory"
)

// A turn held across an upgrade: its holds were stored with their
// generation in their key ("/1", "/2" after the turn key) and the turn
// index naming the first. The latest is still found from the first, and
// a continuation's hold still finds the one it follows.
func TestLegacyHoldChain(t *testing.T) {
	ctx := context.Background()
	st := memory.NewApprovals(memory.ApprovalsOptions{})
	now := time.Now()
	legacy := func(key string, conts int, state approvals.HoldState, delivered bool) *approvals.Hold {
		h := &approvals.Hold{ID: approvals.NewID("hold_"), Trajectory: "run-1", Root: "run-1", Tenant: "team-a", Key: key,
			API: "anthropic", State: state, Delivered: delivered, Continuations: conts, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if _, err := st.CreateHold(ctx, h, nil); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h0 := legacy("turn_k", 0, approvals.Refused, true)
	h1 := legacy("turn_k/1", 1, approvals.Refused, true)
	h2 := legacy("turn_k/2", 2, approvals.Holding, false)

	first, err := st.FindHold(ctx, "run-1", "turn_k")
	if err != nil || first.ID != h0.ID {
		t.Fatalf("the turn index names %+v, %v; want the first hold", first, err)
	}
	if got, err := latestHold(ctx, st, first, 9); err != nil || got.ID != h2.ID {
		t.Fatalf("latestHold = %+v, %v; want %s", got, err, h2.ID)
	}
	for _, c := range []struct{ h, want *approvals.Hold }{{h1, h0}, {h2, h1}} {
		if got, err := previousHold(ctx, st, c.h); err != nil || got.ID != c.want.ID {
			t.Errorf("previousHold(%s) = %+v, %v; want %s", c.h.Key, got, err, c.want.ID)
		}
	}
	if _, err := previousHold(ctx, st, h0); err == nil {
		t.Error("the first hold has a previous one")
	}

	// A hold of the current layout after them takes the turn index; the
	// walk stops at it.
	next := &approvals.Hold{ID: approvals.NewID("hold_"), Trajectory: "run-1", Root: "run-1", Key: "turn_k", Generation: 1,
		Previous: h0.ID, State: approvals.Holding, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, err := st.CreateHold(ctx, next, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := st.FindHold(ctx, "run-1", "turn_k"); err != nil || got.ID != next.ID {
		t.Fatalf("the turn index after a current hold names %+v, %v", got, err)
	}
	if got, err := previousHold(ctx, st, next); err != nil || got.ID != h0.ID {
		t.Errorf("previousHold of a current hold = %+v, %v; want %s", got, err, h0.ID)
	}
}
