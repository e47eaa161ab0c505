package memory

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"gatekeeper/spendlimit"
	"gatekeeper/store/storetest"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) trajectory.Store { return New(Options{}) })
}

func TestEventCap(t *testing.T) {
	tests := []struct {
		name     string
		max      int
		appended int
		wantSeqs []int64
	}{
		{"under the cap", 5, 3, []int64{1, 2, 3}},
		{"at the cap", 5, 5, []int64{1, 2, 3, 4, 5}},
		{"oldest dropped", 5, 12, []int64{8, 9, 10, 11, 12}},
		{"cap of one", 1, 4, []int64{4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := New(Options{MaxEventsPerTrajectory: tc.max})
			if err := s.Create(ctx, trajectory.New("run-1", "team-a", t0)); err != nil {
				t.Fatal(err)
			}
			for i := range tc.appended {
				if err := s.AppendEvents(ctx, "run-1", trajectory.Event{At: t0, Type: trajectory.EventTurn, Reason: fmt.Sprint(i + 1)}); err != nil {
					t.Fatal(err)
				}
			}
			evs, err := s.Events(ctx, "run-1", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, e := range evs {
				got = append(got, e.Seq)
				if e.Reason != fmt.Sprint(e.Seq) {
					t.Errorf("event %d carries %q", e.Seq, e.Reason)
				}
			}
			if !slices.Equal(got, tc.wantSeqs) {
				t.Errorf("seqs %v, want %v", got, tc.wantSeqs)
			}
		})
	}
}

func TestEventCapDefault(t *testing.T) {
	ctx := context.Background()
	s := New(Options{})
	if err := s.Create(ctx, trajectory.New("run-1", "team-a", t0)); err != nil {
		t.Fatal(err)
	}
	evs := make([]trajectory.Event, DefaultMaxEvents+1)
	for i := range evs {
		evs[i] = trajectory.Event{At: t0, Type: trajectory.EventTurn}
	}
	if err := s.AppendEvents(ctx, "run-1", evs...); err != nil {
		t.Fatal(err)
	}
	first, err := s.Events(ctx, "run-1", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || first[0].Seq != 2 {
		t.Errorf("first kept event %+v, want seq 2", first)
	}
}

// TestIdleRecordHeap keeps the embedded store cheap for many idle runs: a
// record with its created event must stay well under 2 KiB of heap.
func TestIdleRecordHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const n = 10000
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%08d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Options{})
	for i, id := range ids {
		r := trajectory.New(id, "team-a", t0.Add(time.Duration(i)))
		r.Budget = trajectory.Budget{Turns: 200, Tokens: 5000000, WallClockS: 7200, Dollars: 20}
		if err := s.Create(ctx, r, trajectory.Event{At: t0, Type: trajectory.EventCreated, Reason: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	runtime.KeepAlive(s)
	t.Logf("heap per idle record: %.0f bytes", per)
	if per >= 2048 {
		t.Errorf("heap per idle record %.0f bytes, want < 2048", per)
	}
	if per <= 0 {
		t.Errorf("heap per idle record %.0f bytes: the measurement saw no records", per)
	}
}

// TestConcurrentUse runs every operation at once on shared records; run
// with -race it checks the store's locking.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s := New(Options{MaxEventsPerTrajectory: 50})
	if err := s.Create(ctx, trajectory.New("root", "team-a", t0)); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*6)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				id := fmt.Sprintf("root/%d-%d", w, i)
				r := trajectory.New(id, "team-a", t0.Add(time.Duration(i)*time.Second))
				r.ParentID = "root"
				errs <- s.Create(ctx, r, trajectory.Event{At: t0, Type: trajectory.EventCreated})
				_, err := s.Update(ctx, "root", func(r *trajectory.Record) ([]trajectory.Event, error) {
					r.Spend.Turns++
					r.AddSpend(trajectory.Usage{OutputTokens: 1}, 0.01, false)
					return []trajectory.Event{{At: t0, Type: trajectory.EventTurn}}, nil
				})
				errs <- err
				_, err = s.Get(ctx, "root")
				errs <- err
				_, err = s.List(ctx, trajectory.Filter{Tenant: "team-a", Limit: 5})
				errs <- err
				_, err = s.Events(ctx, "root", int64(i), 10)
				errs <- err
				errs <- s.AppendEvents(ctx, id, trajectory.Event{At: t0, Type: trajectory.EventControl})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	root, err := s.Get(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	if root.Spend.Turns != workers*rounds || root.Spend.OutputTokens != workers*rounds || len(root.Children) != workers*rounds {
		t.Errorf("root after concurrent use: spend %+v, %d children; want %d of each", root.Spend, len(root.Children), workers*rounds)
	}
	evs, err := s.Events(ctx, "root", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 50 || evs[len(evs)-1].Seq != workers*rounds {
		t.Errorf("root log: %d events ending at seq %d, want 50 ending at %d", len(evs), evs[len(evs)-1].Seq, workers*rounds)
	}
}

func BenchmarkUpdate(b *testing.B) {
	ctx := context.Background()
	s := New(Options{})
	if err := s.Create(ctx, trajectory.New("run-1", "team-a", t0)); err != nil {
		b.Fatal(err)
	}
	now := t0
	for b.Loop() {
		_, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
			now = now.Add(time.Second)
			ts, err := r.BeginTurn(now)
			if err != nil {
				return nil, err
			}
			end, err := r.EndTurn(trajectory.TurnOutcome{StopReason: "end_turn", Usage: trajectory.Usage{OutputTokens: 10}}, now)
			return trajectory.EventsFor(r.ID, append(ts, end...)), err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	s := New(Options{})
	r := trajectory.New("run-1", "team-a", t0)
	if err := s.Create(ctx, r); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "run-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateChain is one thread's model call charged to every
// ancestor, as the proxy does it, on chains of 1 and 3 records.
func BenchmarkUpdateChain(b *testing.B) {
	for _, depth := range []int{1, 3} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			ctx := context.Background()
			s := New(Options{})
			id, parent := "", ""
			for i := range depth {
				id = "run-1"
				if i > 0 {
					id = parent + "/t"
				}
				r := trajectory.New(id, "team-a", t0)
				r.ParentID = parent
				r.Budget = trajectory.Budget{Turns: 200, Tokens: 5_000_000, WallClockS: 7200, Dollars: 20}
				if err := s.Create(ctx, r); err != nil {
					b.Fatal(err)
				}
				parent = id
			}
			u := trajectory.Usage{InputTokens: 1200, CachedInputTokens: 30000, OutputTokens: 400}
			for b.Loop() {
				_, err := s.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
					chain[0].Turns++
					for _, r := range chain {
						r.Spend.Turns++
						r.AddSpend(u, 0.0213, false)
					}
					return []trajectory.Event{{At: t0, Type: trajectory.EventTurn, Reason: "tool_use"}}, nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestLedgerContract(t *testing.T) {
	storetest.RunLedger(t, func(t *testing.T) tenant.Ledger { return NewLedger(nil) })
}

func TestIdleRetention(t *testing.T) {
	storetest.RunIdle(t, 200*time.Millisecond, func(t *testing.T) trajectory.Store {
		return New(Options{IdleRetention: 200 * time.Millisecond, SweepEvery: 10 * time.Millisecond})
	})
}

func TestSpendLimitsContract(t *testing.T) {
	storetest.RunSpendLimits(t, func(t *testing.T) spendlimit.Store { return NewSpendLimits() })
}
