package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"gatekeeper/spendlimit"
)

// RunSpendLimits runs the contract suite of spendlimit.Store. newStore
// must return an empty store that no other test shares.
func RunSpendLimits(t *testing.T, newStore func(t *testing.T) spendlimit.Store) {
	ctx := context.Background()
	s := newStore(t)
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	scope := spendlimit.Scope{Type: spendlimit.ScopeGroup, GroupID: "eng"}
	l := spendlimit.Limit{ID: spendlimit.IDFor("", scope, "daily"), Scope: scope, Micros: 5_000_000, Period: "daily", Created: t0, Updated: t0}
	got, err := s.PutSpendLimit(ctx, l)
	if err != nil || !got.Created.Equal(t0) {
		t.Fatalf("Put = %+v, %v", got, err)
	}
	// Setting it again replaces the amount and keeps when it was created.
	l.Micros, l.Created, l.Updated = 7_000_000, t0.Add(time.Hour), t0.Add(time.Hour)
	if got, err = s.PutSpendLimit(ctx, l); err != nil || !got.Created.Equal(t0) || !got.Updated.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Put again = %+v, %v", got, err)
	}
	other := spendlimit.Limit{ID: spendlimit.IDFor("team-a", spendlimit.Scope{Type: spendlimit.ScopeUser, UserID: "ada"}, "weekly"), Tenant: "team-a",
		Scope: spendlimit.Scope{Type: spendlimit.ScopeUser, UserID: "ada"}, Micros: 1, Period: "weekly", Created: t0, Updated: t0}
	if _, err := s.PutSpendLimit(ctx, other); err != nil {
		t.Fatal(err)
	}
	all, err := s.SpendLimits(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("SpendLimits = %+v, %v", all, err)
	}
	for _, a := range all {
		want := other
		if a.ID == l.ID {
			want = l
			want.Created = t0
		}
		if a.ID != want.ID || a.Tenant != want.Tenant || a.Scope != want.Scope || a.Micros != want.Micros || a.Period != want.Period ||
			!a.Created.Equal(want.Created) || !a.Updated.Equal(want.Updated) {
			t.Errorf("listed %+v, want %+v", a, want)
		}
	}
	if err := s.DeleteSpendLimit(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSpendLimit(ctx, l.ID); !errors.Is(err, spendlimit.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	if all, _ := s.SpendLimits(ctx); len(all) != 1 || all[0].ID != other.ID {
		t.Fatalf("after delete: %+v", all)
	}
}
