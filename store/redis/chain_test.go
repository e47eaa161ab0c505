package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

// counted opens a Store whose round trips to Redis are counted, past the
// ones Open and the first use of the connection pool take.
func counted(t testing.TB, url string, opts Options) (*Store, *counter) {
	t.Helper()
	var c counter
	rdb := client(t, url)
	rdb.AddHook(&c)
	opts.Client = rdb
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// A new connection sends HELLO and CLIENT SETINFO through the hooks,
	// and the command after the pool's first pipeline dials one: warm the
	// pool so that the counts hold only what the Store sends.
	pipe := rdb.Pipeline()
	pipe.Ping(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	return s, &c
}

// createTree creates each id under the parent its id names.
func createTree(t testing.TB, s *Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		create(t, s, child(id, parentOf(id)), turnEvent("created"))
	}
}

func mustGet(t testing.TB, s *Store, id string) *trajectory.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return r
}

// TestUpdateChainRoundTrips pins the round trips of UpdateChain: one when
// no other writer saved the chain since this process last saw it, two
// when one did.
func TestUpdateChainRoundTrips(t *testing.T) {
	url := redistest.Start(t)
	s, c := counted(t, url, Options{})
	other := open(t, url, Options{}) // another replica
	ctx := context.Background()
	createTree(t, s, "r", "r/a", "r/a/b")

	otherSaves := 0 // chain turns the other replica charged to the root
	steps := []struct {
		name   string
		before func() error // not counted
		id     string
		want   int64
	}{
		{"first, after creating the chain here", nil, "r/a/b", 1},
		{"second", nil, "r/a/b", 1},
		{"a shorter chain of the tree", nil, "r/a", 1},
		{"after another replica saved the root", func() error {
			_, err := other.Update(ctx, "r", unfinished)
			return err
		}, "r/a/b", 2},
		{"after that", nil, "r/a/b", 1},
		{"after another replica's chain saved the middle record", func() error {
			otherSaves++
			_, err := other.UpdateChain(ctx, "r/a", chainTurn)
			return err
		}, "r/a/b", 2},
		{"after another replica gave the root a child", func() error { return other.Create(ctx, child("r/c", "r")) }, "r/a/b", 2},
		{"after this process gave the root a child", func() error { return s.Create(ctx, child("r/d", "r")) }, "r/a/b", 1},
		{"after this process read what another replica saved", func() error {
			if _, err := other.Update(ctx, "r", unfinished); err != nil {
				return err
			}
			_, err := s.Get(ctx, "r")
			return err
		}, "r/a/b", 1},
		{"after another replica's save that changed nothing", func() error {
			_, err := other.Update(ctx, "r", func(*trajectory.Record) ([]trajectory.Event, error) { return nil, nil })
			return err
		}, "r/a/b", 1},
	}
	calls := 0
	for _, st := range steps {
		if st.before != nil {
			if err := st.before(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		n := c.Load()
		if _, err := s.UpdateChain(ctx, st.id, chainTurn); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		calls++
		if got := c.Load() - n; got != st.want {
			t.Errorf("%s: %d round trips, want %d", st.name, got, st.want)
		}
	}
	if r := mustGet(t, s, "r"); r.Spend.Turns != int64(calls+otherSaves) {
		t.Errorf("root charged %d turns, want %d", r.Spend.Turns, calls+otherSaves)
	}

	// A replica that never saw the chain reads it with the first call.
	fresh, fc := counted(t, url, Options{})
	for i, want := range []int64{2, 1} {
		n := fc.Load()
		if _, err := fresh.UpdateChain(ctx, "r/a/b", chainTurn); err != nil {
			t.Fatal(err)
		}
		if got := fc.Load() - n; got != want {
			t.Errorf("call %d on a replica that never saw the chain: %d round trips, want %d", i+1, got, want)
		}
	}
}

// TestUpdateChainQueuesInProcess runs the threads of one run at once in
// one process: they queue on the tree instead of racing for the root, so
// every call takes one round trip.
func TestUpdateChainQueuesInProcess(t *testing.T) {
	const threads, calls = 20, 10
	url := redistest.Start(t)
	s, c := counted(t, url, Options{})
	ids := []string{"r"}
	for i := range threads {
		ids = append(ids, fmt.Sprintf("r/t%d", i))
	}
	createTree(t, s, ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	before := c.Load()
	var wg sync.WaitGroup
	errs := make(chan error, threads*calls)
	for i := range threads {
		wg.Go(func() {
			for range calls {
				_, err := s.UpdateChain(ctx, ids[i+1], chainTurn)
				errs <- err
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
	if got := c.Load() - before; got != threads*calls {
		t.Errorf("%d calls took %d round trips, want one each", threads*calls, got)
	}
	if r := mustGet(t, s, "r"); r.Spend.Turns != threads*calls {
		t.Errorf("root charged %d turns, want %d", r.Spend.Turns, threads*calls)
	}
	if n := s.locks.len(); n != 0 {
		t.Errorf("%d tree locks left", n)
	}
}

// TestUpdateChainAcrossReplicas charges one root from children on two
// replicas at once: no increment may be lost.
func TestUpdateChainAcrossReplicas(t *testing.T) {
	const perReplica, calls = 4, 15
	url := redistest.Start(t)
	replicas := []*Store{open(t, url, Options{}), open(t, url, Options{})}
	ids := []string{"r"}
	for i := range len(replicas) * perReplica {
		ids = append(ids, fmt.Sprintf("r/%d", i))
	}
	createTree(t, replicas[0], ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	var runs atomic.Int64
	errs := make(chan error, len(ids)*calls)
	for ri, s := range replicas {
		for g := range perReplica {
			id := ids[1+ri*perReplica+g]
			wg.Go(func() {
				for i := range calls {
					_, err := s.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
						runs.Add(1)
						root := chain[len(chain)-1]
						root.Turns++
						chain[0].Turns++
						reason := fmt.Sprintf("%s-%d", id, i)
						return []trajectory.Event{turnEvent(reason), {At: t0, Trajectory: root.ID, Type: trajectory.EventTurn, Reason: reason}}, nil
					})
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	const total = 2 * perReplica * calls
	for _, s := range replicas {
		if r := mustGet(t, s, "r"); r.Turns != total {
			t.Errorf("root turns %d, want %d", r.Turns, total)
		}
	}
	evs, err := replicas[1].Events(ctx, "r", 1, trajectory.MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	checkDistinctLog(t, evs, 2, total)
	for _, id := range ids[1:] {
		if r := mustGet(t, replicas[0], id); r.Turns != calls {
			t.Errorf("%s turns %d, want %d", id, r.Turns, calls)
		}
	}
	t.Logf("%d chain updates ran fn %d times", total, runs.Load())
}

func TestUpdateChainConflict(t *testing.T) {
	tests := []struct {
		name      string
		attempts  int
		wantErr   error
		wantRuns  int
		wantTurns int64
		wantCalls []string
	}{
		{"gives up after its attempts", 1, ErrConflict, 1, 1, nil},
		{"runs fn again on the fresh chain", 2, nil, 2, 2, []string{"call-2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := redistest.Start(t)
			a := open(t, url, Options{MaxUpdateAttempts: tc.attempts})
			b := open(t, url, Options{})
			ctx := context.Background()
			createTree(t, a, "r", "r/a")
			runs := 0
			_, err := a.UpdateChain(ctx, "r/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
				runs++
				if runs == 1 {
					// Another replica saves the root after this one's copy
					// was taken.
					if _, err := b.Update(ctx, "r", func(r *trajectory.Record) ([]trajectory.Event, error) {
						r.Turns++
						return []trajectory.Event{turnEvent("b")}, nil
					}); err != nil {
						t.Fatal(err)
					}
				}
				chain[1].Turns++
				chain[0].Pending.ToolCalls = append(chain[0].Pending.ToolCalls, trajectory.PendingCall{ID: fmt.Sprint("call-", runs), Name: "Bash"})
				return []trajectory.Event{turnEvent("a"), {At: t0, Trajectory: "r", Type: trajectory.EventTurn, Reason: "a"}}, nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("UpdateChain: %v, want %v", err, tc.wantErr)
			}
			if runs != tc.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tc.wantRuns)
			}
			if r := mustGet(t, b, "r"); r.Turns != tc.wantTurns {
				t.Errorf("root turns %d, want %d", r.Turns, tc.wantTurns)
			}
			var ids []string
			for _, c := range mustGet(t, b, "r/a").Pending.ToolCalls {
				ids = append(ids, c.ID)
			}
			if !slices.Equal(ids, tc.wantCalls) {
				t.Errorf("pending calls %v, want %v: a lost attempt's changes leaked", ids, tc.wantCalls)
			}
			for id, want := range map[string]int{"r": 1 + int(tc.wantTurns), "r/a": int(tc.wantTurns)} {
				evs, err := b.Events(ctx, id, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != want {
					t.Errorf("%s has %d events, want %d", id, len(evs), want)
				}
			}
		})
	}
}

// TestUpdateChainNewGeneration makes a record anew under the id of one
// that expired, and brings it to the version this process last saw of the
// old one: the update must still see the new record.
func TestUpdateChainNewGeneration(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	s, b := open(t, url, Options{}), open(t, url, Options{})
	ctx := context.Background()
	stop := func(reason string) func(*trajectory.Record) ([]trajectory.Event, error) {
		return func(r *trajectory.Record) ([]trajectory.Event, error) {
			r.LastStopReason = reason
			return nil, nil
		}
	}
	create(t, s, trajectory.New("run-1", "team-a", t0))
	if _, err := s.Update(ctx, "run-1", stop("old")); err != nil {
		t.Fatal(err)
	}
	// Redis expires the record; another replica makes it anew and saves
	// it once: same id, same version.
	if err := rdb.Del(ctx, recKey("run-1"), evKey("run-1")).Err(); err != nil {
		t.Fatal(err)
	}
	create(t, b, trajectory.New("run-1", "team-b", t0))
	if _, err := b.Update(ctx, "run-1", stop("new")); err != nil {
		t.Fatal(err)
	}

	var seen []string
	out, err := s.UpdateChain(ctx, "run-1", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		seen = append(seen, chain[0].LastStopReason)
		chain[0].Turns++
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"old", "new"}) {
		t.Errorf("fn saw %v, want the stale copy refused, then the new record", seen)
	}
	if got := mustGet(t, b, "run-1"); got.Tenant != "team-b" || got.LastStopReason != "new" || got.Turns != 1 {
		t.Errorf("saved %+v", got)
	}
	if out[0].Tenant != "team-b" || out[0].Turns != 1 {
		t.Errorf("returned %+v", out[0])
	}
}

// TestUpdateChainRecordWithoutGen updates a record saved before records
// had a gen.
func TestUpdateChainRecordWithoutGen(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	s := open(t, url, Options{})
	ctx := context.Background()
	createTree(t, s, "r", "r/a")
	if err := rdb.HDel(ctx, recKey("r"), "gen").Err(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, open(t, url, Options{})} {
		for range 2 {
			if _, err := st.UpdateChain(ctx, "r/a", chainTurn); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r := mustGet(t, s, "r"); r.Spend.Turns != 4 {
		t.Errorf("root charged %d turns, want 4", r.Spend.Turns)
	}
}

// TestUpdateChainFollowsParents updates a record whose parent is not the
// longest prefix of its id: the chain is its parents', and the record its
// id skips is left alone.
func TestUpdateChainFollowsParents(t *testing.T) {
	url := redistest.Start(t)
	s := open(t, url, Options{})
	create(t, s, trajectory.New("a", "team-a", t0))
	create(t, s, child("a/x", "a"))
	create(t, s, child("a/x/y", "a"))
	for _, st := range []*Store{s, open(t, url, Options{})} {
		out, err := st.UpdateChain(context.Background(), "a/x/y", chainTurn)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range out {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, []string{"a/x/y", "a"}) {
			t.Errorf("chain %v, want a/x/y then a", ids)
		}
	}
	if r := mustGet(t, s, "a/x"); r.Spend.Turns != 0 {
		t.Errorf("a/x charged %d turns, want 0", r.Spend.Turns)
	}
	if r := mustGet(t, s, "a"); r.Spend.Turns != 2 {
		t.Errorf("a charged %d turns, want 2", r.Spend.Turns)
	}
}

// TestUpdateChainRecordGone removes records this process still holds, as
// Redis's expiry does: the update names what is missing, at its first
// attempt, or follows the chain made anew.
func TestUpdateChainRecordGone(t *testing.T) {
	tests := []struct {
		name      string
		deleted   []string
		remade    *trajectory.Record // created again by another replica
		wantErr   string             // the missing id; "" for success
		wantChain []string
	}{
		{"ancestor", []string{"r/a"}, nil, "r/a", nil},
		{"root", []string{"r"}, nil, "r", nil},
		{"the record itself", []string{"r/a/b"}, nil, "r/a/b", nil},
		{"made anew under another parent", []string{"r/a/b", "r/a"}, child("r/a/b", "r"), "", []string{"r/a/b", "r"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := redistest.Start(t)
			rdb := client(t, url)
			s := open(t, url, Options{MaxUpdateAttempts: 1})
			if tc.remade != nil {
				s = open(t, url, Options{})
			}
			ctx := context.Background()
			createTree(t, s, "r", "r/a", "r/a/b")
			for _, id := range tc.deleted {
				if err := rdb.Del(ctx, recKey(id), evKey(id)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.remade != nil {
				create(t, open(t, url, Options{}), tc.remade)
			}
			out, err := s.UpdateChain(ctx, "r/a/b", chainTurn)
			if tc.wantErr != "" {
				if !errors.Is(err, trajectory.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.wantErr)) {
					t.Fatalf("UpdateChain: %v, want ErrNotFound naming %q", err, tc.wantErr)
				}
				for _, id := range []string{"r", "r/a", "r/a/b"} {
					if r, err := s.Get(ctx, id); err == nil && r.Spend.Turns+r.Turns != 0 {
						t.Errorf("%s was saved: %+v", id, r)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range out {
				ids = append(ids, r.ID)
			}
			if !slices.Equal(ids, tc.wantChain) {
				t.Errorf("chain %v, want %v", ids, tc.wantChain)
			}
		})
	}
}

// TestUpdateChainSmallCache runs chains longer than the cache: each call
// reads, and the cache keeps its bound.
func TestUpdateChainSmallCache(t *testing.T) {
	url := redistest.Start(t)
	s, c := counted(t, url, Options{CacheEntries: 2})
	createTree(t, s, "r", "r/a", "r/a/b")
	for i := range 3 {
		n := c.Load()
		if _, err := s.UpdateChain(context.Background(), "r/a/b", chainTurn); err != nil {
			t.Fatal(err)
		}
		if got := c.Load() - n; got != 2 {
			t.Errorf("call %d: %d round trips, want 2 (a read, then the save)", i+1, got)
		}
		if n := s.cache.len(); n > 2 {
			t.Errorf("cache holds %d entries, bound 2", n)
		}
	}
	if r := mustGet(t, s, "r"); r.Spend.Turns != 3 {
		t.Errorf("root charged %d turns, want 3", r.Spend.Turns)
	}
}

// BenchmarkUpdateChain is the proxy's cost per model call and per chain
// update: one thread's turn charged to every ancestor.
func BenchmarkUpdateChain(b *testing.B) {
	for _, depth := range []int{1, 3} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			s, c := counted(b, redistest.Start(b), Options{})
			ids := benchTree(b, s, depth, 1)
			ctx := context.Background()
			before := c.Load()
			for b.Loop() {
				if _, err := s.UpdateChain(ctx, ids[0], chainTurn); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.Load()-before)/float64(b.N), "rtt/op")
		})
	}
	// Twenty threads of one run, each its own leaf under one root.
	b.Run("depth=3/threads=20", func(b *testing.B) {
		const threads = 20
		s, c := counted(b, redistest.Start(b), Options{})
		leaves := benchTree(b, s, 3, threads)
		ctx := context.Background()
		var next atomic.Int64
		before := c.Load()
		b.SetParallelism((threads + 1) / 2)
		b.RunParallel(func(pb *testing.PB) {
			id := leaves[int(next.Add(1)-1)%len(leaves)]
			for pb.Next() {
				if _, err := s.UpdateChain(ctx, id, chainTurn); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(c.Load()-before)/float64(b.N), "rtt/op")
	})
}

// benchTree creates a chain depth records deep whose last level is
// leaves sibling leaves (roots, at depth 1), and returns the leaves.
func benchTree(b *testing.B, s *Store, depth, leaves int) []string {
	b.Helper()
	parent := ""
	for range depth - 1 {
		id := "run-1"
		if parent != "" {
			id = parent + "/t"
		}
		r := child(id, parent)
		r.Budget = trajectory.Budget{Turns: 200, Tokens: 5_000_000, WallClockS: 7200, Dollars: 20}
		create(b, s, r)
		parent = id
	}
	out := make([]string, leaves)
	for i := range out {
		id := fmt.Sprint("leaf-", i)
		if parent != "" {
			id = parent + "/" + id
		}
		r := child(id, parent)
		r.Budget = trajectory.Budget{Turns: 200, Tokens: 5_000_000, WallClockS: 7200, Dollars: 20}
		r.Thread, r.Provider, r.Model = "agent-1", "anthropic", "claude-sonnet-4-5"
		create(b, s, r)
		out[i] = id
	}
	return out
}

func parentOf(id string) string {
	if i := strings.LastIndexByte(id, '/'); i > 0 {
		return id[:i]
	}
	return ""
}
