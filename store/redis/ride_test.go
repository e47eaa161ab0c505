package redis

import (
	"context"
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
	"gatekeeper/internal/ride"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// incr is a rider that counts, in Redis, the pipelines it went in.
type incr struct {
	key string
	cmd *goredis.IntCmd
}

func (r *incr) Queue(ctx context.Context, _ any, p goredis.Pipeliner) bool {
	r.cmd = p.Incr(ctx, r.key)
	return true
}

// A rider goes in the update's own round trip, once however many attempts
// the update makes, and not at all when fn refuses before anything is
// sent.
func TestUpdateRider(t *testing.T) {
	url := redistest.Start(t)
	var c counter
	rdb := client(t, url)
	rdb.AddHook(&c)
	ctx := context.Background()
	s, err := Open(ctx, Options{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := open(t, url, Options{})
	create(t, s, trajectory.New("ride-1", "team-a", t0))
	// Loads what a first update loads, outside the counts.
	if _, err := s.Update(ride.With(ctx, &incr{key: "rider:warm"}), "ride-1", unfinished); err != nil {
		t.Fatal(err)
	}
	count := func(key string) int64 {
		n, err := rdb.Get(ctx, key).Int64()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatal(err)
		}
		return n
	}

	tests := []struct {
		name      string
		before    func() // not counted
		fn        func(*trajectory.Record) ([]trajectory.Event, error)
		wantErr   bool
		wantTrips int64
		wantSent  int64
	}{
		{"alone", nil, unfinished, false, 1, 1},
		{"after another replica saved (a conflict, then the retry)", func() {
			if _, err := other.Update(ctx, "ride-1", unfinished); err != nil {
				t.Fatal(err)
			}
		}, unfinished, false, 2, 1},
		{"fn refuses", nil, func(*trajectory.Record) ([]trajectory.Event, error) {
			return nil, errors.New("refused")
		}, true, 0, 0},
	}
	for _, tc := range tests {
		if tc.before != nil {
			tc.before()
		}
		r := &incr{key: "rider:" + tc.name}
		before := c.Load()
		_, err := s.Update(ride.With(ctx, r), "ride-1", tc.fn)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: err %v", tc.name, err)
		}
		if got := c.Load() - before; got != tc.wantTrips {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.wantTrips)
		}
		if got := count(r.key); got != tc.wantSent {
			t.Errorf("%s: the rider went in %d pipelines, want %d", tc.name, got, tc.wantSent)
		}
		if tc.wantSent > 0 && (r.cmd == nil || r.cmd.Val() != tc.wantSent) {
			t.Errorf("%s: the rider's own result is not readable after the update", tc.name)
		}
	}
}

// UpdateChains sends the updates of records in different trees in one
// round trip; two of one tree go one after the other, a moved chain is
// updated again alone, and each update's outcome is its own.
func TestUpdateChains(t *testing.T) {
	url := redistest.Start(t)
	var c counter
	rdb := client(t, url)
	rdb.AddHook(&c)
	ctx := context.Background()
	s, err := Open(ctx, Options{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := open(t, url, Options{})
	ids := []string{"batch-1", "batch-2", "batch-3", "batch-4"}
	for _, id := range ids {
		create(t, s, trajectory.New(id, "team-a", t0))
	}
	create(t, s, child("batch-1/a", "batch-1"))
	// Loads what a first update loads, outside the counts.
	if errs := s.UpdateChains(ctx, ids, fnsOf(len(ids), func(c []*trajectory.Record) ([]trajectory.Event, error) { return unfinished(c[0]) })); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	turnsOf := func(id string) int64 {
		r, err := other.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Turns
	}
	refuse := errors.New("refused")

	before := c.Load()
	errs := s.UpdateChains(ctx, ids, fnsOf(len(ids), chainTurn))
	if errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	if got := c.Load() - before; got != 1 {
		t.Errorf("four trees: %d round trips, want 1", got)
	}
	for _, id := range ids {
		if n := turnsOf(id); n != 1 {
			t.Errorf("%s has %d turns, want 1", id, n)
		}
	}

	// batch-2 moved on another replica: it is updated again, alone.
	if _, err := other.Update(ctx, "batch-2", unfinished); err != nil {
		t.Fatal(err)
	}
	two := []string{"batch-1", "batch-1/a", "batch-2", "batch-3", "nope"}
	fns := fnsOf(len(two), chainTurn)
	fns[3] = func([]*trajectory.Record) ([]trajectory.Event, error) { return nil, refuse }
	before = c.Load()
	errs = s.UpdateChains(ctx, two, fns)
	// Round 1: batch-1, batch-2 (moved), batch-3 (refused, not sent),
	// nope (read, missing) -> the read and one pipeline; round 2:
	// batch-1/a; then batch-2 alone.
	if got := c.Load() - before; got != 4 {
		t.Errorf("two of one tree, a moved chain, a refusal, a missing record: %d round trips, want 4", got)
	}
	switch {
	case errs[0] != nil || errs[1] != nil || errs[2] != nil:
		t.Errorf("errs %v, want the first three saved", errs)
	case !errors.Is(errs[3], refuse):
		t.Errorf("refused update: %v, want fn's error", errs[3])
	case !errors.Is(errs[4], trajectory.ErrNotFound):
		t.Errorf("missing record: %v, want ErrNotFound", errs[4])
	}
	for id, want := range map[string]int64{"batch-1": 2, "batch-1/a": 1, "batch-2": 2, "batch-3": 1} {
		if n := turnsOf(id); n != want {
			t.Errorf("%s has %d turns, want %d", id, n, want)
		}
	}
}

func fnsOf(n int, fn func([]*trajectory.Record) ([]trajectory.Event, error)) []func([]*trajectory.Record) ([]trajectory.Event, error) {
	fns := make([]func([]*trajectory.Record) ([]trajectory.Event, error), n)
	for i := range fns {
		fns[i] = fn
	}
	return fns
}

// A rider goes in a tenant's charge, and in a flush's record updates,
// without a round trip of its own, once.
func TestSettleRiders(t *testing.T) {
	url := redistest.Start(t)
	var c counter
	rdb := client(t, url)
	rdb.AddHook(&c)
	ctx := context.Background()
	s, err := Open(ctx, Options{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := s.Ledger()
	ids := []string{"rides-1", "rides-2"}
	for _, id := range ids {
		create(t, s, trajectory.New(id, "team-a", t0))
	}
	// Loads what the first charge and updates load, outside the counts.
	if err := l.Settle(ctx, "team-a", "warm", tenant.Amount{Micros: 1}); err != nil {
		t.Fatal(err)
	}
	if errs := s.UpdateChains(ctx, ids, fnsOf(len(ids), chainTurn)); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	count := func(key string) int64 {
		n, err := rdb.Get(ctx, key).Int64()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		name  string
		trips int64
		run   func(ctx context.Context) error
	}{
		{"a tenant's charge", 2, func(ctx context.Context) error {
			// Twice on one context: the rider goes in the first only.
			if err := l.Settle(ctx, "team-a", "call-1", tenant.Amount{Micros: 5}); err != nil {
				return err
			}
			return l.Settle(ctx, "team-a", "call-2", tenant.Amount{Micros: 5})
		}},
		{"a flush's record updates", 1, func(ctx context.Context) error {
			return errors.Join(s.UpdateChains(ctx, ids, fnsOf(len(ids), chainTurn))...)
		}},
	}
	for _, tc := range tests {
		r := &incr{key: "rider:" + tc.name}
		before := c.Load()
		if err := tc.run(ride.With(ctx, r)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := c.Load() - before; got != tc.trips {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.trips)
		}
		if got := count(r.key); got != 1 {
			t.Errorf("%s: the rider went in %d pipelines, want 1", tc.name, got)
		}
	}
}
