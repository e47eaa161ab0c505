package deadline_test

import (
	"context"
	"testing"
	"time"

	"gatekeeper/feed"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/ratelimit"
	"gatekeeper/store/memory"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// seen records the deadline of the context each call reached the wrapped
// store with.
type seen struct{ at map[string]time.Time }

func (s *seen) mark(name string, ctx context.Context) {
	d, _ := ctx.Deadline()
	s.at[name] = d
}

type spyStore struct {
	trajectory.Store
	*seen
}

func (s spyStore) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	s.mark("Create", ctx)
	return s.Store.Create(ctx, rec, evs...)
}

func (s spyStore) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	s.mark("CreateChild", ctx)
	return s.Store.CreateChild(ctx, rec, max, evs...)
}

func (s spyStore) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	s.mark("Get", ctx)
	return s.Store.Get(ctx, id)
}

func (s spyStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	s.mark("UpdateChain", ctx)
	return s.Store.UpdateChain(ctx, id, fn)
}

func (s spyStore) Ping(ctx context.Context) error {
	s.mark("Ping", ctx)
	return s.Store.Ping(ctx)
}

type spyLedger struct {
	tenant.Ledger
	*seen
}

func (l spyLedger) Usage(ctx context.Context, name string) (tenant.Usage, error) {
	l.mark("Usage", ctx)
	return l.Ledger.Usage(ctx, name)
}

type spyBuckets struct {
	ratelimit.Buckets
	*seen
}

func (b spyBuckets) Take(ctx context.Context, k ratelimit.Key, c ratelimit.Cost) (bool, time.Duration, error) {
	b.mark("Take", ctx)
	return b.Buckets.Take(ctx, k, c)
}

func (b spyBuckets) TakeBatch(ctx context.Context, k ratelimit.Key, cs []ratelimit.Cost) (int, time.Duration, float64, error) {
	b.mark("TakeBatch", ctx)
	return b.Buckets.(ratelimit.BatchTaker).TakeBatch(ctx, k, cs)
}

func (b spyBuckets) Settle(ctx context.Context, k ratelimit.Key, delta ratelimit.Cost, r ratelimit.Remaining) error {
	b.mark("Settle", ctx)
	return b.Buckets.Settle(ctx, k, delta, r)
}

// TestBounded checks that every wrapped call reaches its store under a
// deadline at most d away, that the wrapped store's answers come through,
// and that a non-positive d leaves the store unwrapped.
func TestBounded(t *testing.T) {
	const d = time.Minute
	ctx := context.Background()
	sn := &seen{at: map[string]time.Time{}}
	mem := memory.New(memory.Options{})
	st := deadline.Store(spyStore{Store: mem, seen: sn}, d)
	l := deadline.Ledger(spyLedger{Ledger: memory.NewLedger(time.Now), seen: sn}, d)
	b := deadline.Buckets(spyBuckets{Buckets: ratelimit.NewMemory(time.Now), seen: sn}, d)

	start := time.Now()
	now := start.UTC()
	rec := &trajectory.Record{ID: "run", State: trajectory.Ready, CreatedAt: now, UpdatedAt: now}
	if err := st.Create(ctx, rec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	kid := &trajectory.Record{ID: "run/1", ParentID: "run", State: trajectory.Ready, CreatedAt: now, UpdatedAt: now}
	if err := st.CreateChild(ctx, kid, 1); err != nil {
		t.Fatalf("CreateChild: %v", err)
	}
	got, err := st.Get(ctx, "run")
	if err != nil || got.ID != "run" {
		t.Fatalf("Get = %v, %v; want the record", got, err)
	}
	fn := func(chain []*trajectory.Record) ([]trajectory.Event, error) { chain[0].Turns++; return nil, nil }
	errs := deadline.UpdateChains(ctx, st, []string{"run"}, []func([]*trajectory.Record) ([]trajectory.Event, error){fn})
	if len(errs) != 1 || errs[0] != nil {
		t.Fatalf("UpdateChains = %v", errs)
	}
	if got, _ := mem.Get(ctx, "run"); got.Turns != 1 {
		t.Fatalf("after UpdateChains Turns = %d, want 1", got.Turns)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := l.Usage(ctx, "acme"); err != nil {
		t.Fatalf("Usage: %v", err)
	}
	k := ratelimit.Key{ID: "k", Limits: ratelimit.Limits{RPM: 60}}
	if _, _, err := b.Take(ctx, k, ratelimit.Cost{Requests: 1}); err != nil {
		t.Fatalf("Take: %v", err)
	}
	// A burst of 1: the second of two requests waits.
	n, wait, h, err := b.(ratelimit.BatchTaker).TakeBatch(ctx, ratelimit.Key{ID: "kb", Limits: ratelimit.Limits{RPM: 60}},
		[]ratelimit.Cost{{Requests: 1}, {Requests: 1}})
	if err != nil || n != 1 || wait < 900*time.Millisecond || h != 0 {
		t.Fatalf("TakeBatch = %d, %s, %v, %v; want 1 taken, about 1s to wait, headroom 0", n, wait, h, err)
	}
	if errs := b.(ratelimit.BatchSettler).SettleBatch(ctx, []ratelimit.Key{k}, []ratelimit.Cost{{}}, []ratelimit.Remaining{{}}); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("SettleBatch = %v", errs)
	}
	end := time.Now()

	for _, name := range []string{"Create", "CreateChild", "Get", "UpdateChain", "Ping", "Usage", "Take", "TakeBatch", "Settle"} {
		at, ok := sn.at[name]
		switch {
		case !ok:
			t.Errorf("%s did not reach the wrapped store", name)
		case at.IsZero():
			t.Errorf("%s reached the wrapped store without a deadline", name)
		case at.Before(start.Add(d)) || at.After(end.Add(d)):
			t.Errorf("%s deadline %v, want within %v of the call", name, at, d)
		}
	}

	if deadline.Store(mem, 0) != trajectory.Store(mem) {
		t.Error("Store with d = 0 wrapped the store")
	}
	if deadline.Ledger(nil, d) != nil {
		t.Error("Ledger of nil is not nil")
	}
}

// TestInProcessUnbounded: the memory stores, alone or under the event
// stream's decorator, are used as they are (their calls wait only on
// their lock); a wrapper that does not say what it wraps is bounded.
func TestInProcessUnbounded(t *testing.T) {
	const d = time.Minute
	mem := memory.New(memory.Options{})
	f, err := feed.New(context.Background(), feed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	rec := feed.NewRecords(mem, f)
	led := memory.NewLedger(time.Now)
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"memory store", deadline.Store(mem, d), trajectory.Store(mem)},
		{"memory store under the event stream", deadline.Store(rec, d), trajectory.Store(rec)},
		{"memory links", deadline.Links(mem, d), trajectory.Links(mem)},
		{"memory ledger", deadline.Ledger(led, d), tenant.Ledger(led)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: wrapped (%T)", tc.name, tc.got)
		}
	}
	if st := deadline.Store(spyStore{Store: mem, seen: &seen{}}, d); func() bool { _, ok := st.(spyStore); return ok }() {
		t.Error("a wrapper of the memory store was left unbounded")
	}
}
