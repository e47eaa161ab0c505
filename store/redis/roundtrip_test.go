package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

// counter counts round trips: one per command sent alone, one per pipeline.
type counter = redistest.RoundTrips

// TestRoundTrips pins the cost of each call in round trips to Redis.
func TestRoundTrips(t *testing.T) {
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
	create(t, s, trajectory.New("run-0", "team-a", t0))
	// Each pool's first use dials and sends HELLO: keep that out of the counts.
	if _, err := s.Events(ctx, "run-0", 0, 0); err != nil {
		t.Fatal(err)
	}
	// Another replica, with its own connections and cache.
	other := open(t, url, Options{})
	create(t, other, trajectory.New("run-9", "team-a", t0))
	// A root in run-1's slot, whose index this process will have written
	// to by then.
	sameSlot := ""
	for i := 0; i < 1_000_000 && sameSlot == ""; i++ {
		if id := fmt.Sprintf("run-x%d", i); slotOf(id) == slotOf("run-1") {
			sameSlot = id
		}
	}

	tests := []struct {
		name string
		call func() error
		want int64
	}{
		// The first write into a slot's index adds the slot to the
		// directory first.
		{"Create in a slot new to this process", func() error {
			return s.Create(ctx, trajectory.New("run-1", "team-a", t0), turnEvent("created"))
		}, 2},
		{"Create", func() error { return s.Create(ctx, trajectory.New(sameSlot, "team-a", t0), turnEvent("created")) }, 1},
		{"Create child", func() error { return s.Create(ctx, child("run-1/a", "run-1")) }, 1},
		{"Get", func() error { _, err := s.Get(ctx, "run-1"); return err }, 1},
		{"Update", func() error { _, err := s.Update(ctx, "run-1", turn); return err }, 1},
		{"Update again", func() error { _, err := s.Update(ctx, "run-1", unfinished); return err }, 1},
		{"Update after another replica saved", func() error {
			if _, err := other.Update(ctx, "run-1", unfinished); err != nil {
				return err
			}
			_, err := s.Update(ctx, "run-1", unfinished)
			return err
		}, 2},
		{"Update of a record this process never saw", func() error { _, err := s.Update(ctx, "run-9", unfinished); return err }, 2},
		{"Update finishing", func() error {
			_, err := s.Update(ctx, "run-0", func(r *trajectory.Record) ([]trajectory.Event, error) {
				ts, err := r.Finalize(trajectory.Completed, "done", t0)
				return trajectory.EventsFor(r.ID, ts), err
			})
			return err
		}, 1},
		{"UpdateChain", func() error { _, err := s.UpdateChain(ctx, "run-1/a", chainTurn); return err }, 1},
		{"AppendEvents", func() error { return s.AppendEvents(ctx, "run-1", turnEvent("x")) }, 1},
		{"Events", func() error { _, err := s.Events(ctx, "run-1", 1, 10); return err }, 1},
		{"Ping", func() error { return s.Ping(ctx) }, 1},
		{"List", func() error { _, err := s.List(ctx, trajectory.Filter{}); return err }, 4},
	}
	for _, tc := range tests {
		before := c.Load()
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := c.Load() - before; got != tc.want {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.want)
		}
	}
}

// unfinished is an update that leaves the record live.
func unfinished(r *trajectory.Record) ([]trajectory.Event, error) {
	r.UpdatedAt = r.UpdatedAt.Add(time.Second)
	return []trajectory.Event{turnEvent("")}, nil
}

// turn is what one model call does to a record: a turn begins and ends,
// usage is charged, an event is logged.
func turn(r *trajectory.Record) ([]trajectory.Event, error) {
	if r.State != trajectory.Ready {
		return nil, fmt.Errorf("record in %s", r.State)
	}
	r.Turns++
	r.Spend.Turns++
	r.AddSpend(trajectory.Usage{InputTokens: 1200, CachedInputTokens: 30000, OutputTokens: 400}, 0.0213, false)
	r.LastStopReason = "tool_use"
	r.UpdatedAt = r.UpdatedAt.Add(time.Second)
	return []trajectory.Event{{At: r.UpdatedAt, Type: trajectory.EventTurn, Reason: "tool_use",
		Data: json.RawMessage(`{"input_tokens":1200,"cached_input_tokens":30000,"output_tokens":400}`)}}, nil
}

func benchStore(b *testing.B) (*Store, *counter) {
	url := redistest.Start(b)
	var c counter
	rdb := client(b, url)
	rdb.AddHook(&c)
	s, err := Open(context.Background(), Options{Client: rdb})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	r := trajectory.New("run-1", "team-a", t0)
	r.Budget = trajectory.Budget{Turns: 200, Tokens: 5_000_000, WallClockS: 7200, Dollars: 20}
	r.Thread, r.Provider, r.Model = "agent-1", "anthropic", "claude-sonnet-4-5"
	create(b, s, r, turnEvent("created"))
	return s, &c
}

func BenchmarkGet(b *testing.B) {
	s, c := benchStore(b)
	ctx := context.Background()
	before := c.Load()
	for b.Loop() {
		if _, err := s.Get(ctx, "run-1"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.Load()-before)/float64(b.N), "roundtrips/op")
}

func BenchmarkUpdateTurn(b *testing.B) {
	s, c := benchStore(b)
	ctx := context.Background()
	before := c.Load()
	for b.Loop() {
		if _, err := s.Update(ctx, "run-1", turn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.Load()-before)/float64(b.N), "roundtrips/op")
}

// chainTurn is one model call of a thread: the thread takes the turn and
// every ancestor is charged for it, since the thread's spend counts
// against their ceilings too.
func chainTurn(chain []*trajectory.Record) ([]trajectory.Event, error) {
	evs, err := turn(chain[0])
	if err != nil {
		return nil, err
	}
	for _, r := range chain[1:] {
		r.Spend.Turns++
		r.AddSpend(trajectory.Usage{InputTokens: 1200, CachedInputTokens: 30000, OutputTokens: 400}, 0.0213, false)
		r.UpdatedAt = r.UpdatedAt.Add(time.Second)
	}
	return evs, nil
}

// BenchmarkListCalling lists the calls in flight, as the lost-call sweep
// does on every heartbeat, in a store of 10,000 idle records and 10 in
// CALLING_MODEL: through the calling index, and by the scan of every
// record that listing by state did before the index.
func BenchmarkListCalling(b *testing.B) {
	s, c := benchStore(b)
	ctx := context.Background()
	for i := range 10_000 {
		r := trajectory.New(fmt.Sprintf("idle-%d", i), "team-a", t0.Add(time.Duration(i)*time.Second))
		if i%1000 == 0 {
			r.State, r.Call = trajectory.CallingModel, fmt.Sprint("call-", i)
		}
		create(b, s, r)
	}
	f := trajectory.Filter{State: trajectory.CallingModel, Limit: trajectory.MaxListLimit}
	shards, err := s.dir.shards(ctx, s.rdb)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		list func() ([]*trajectory.Record, error)
	}{
		{"index", func() ([]*trajectory.Record, error) { return s.List(ctx, f) }},
		{"scan", func() ([]*trajectory.Record, error) { return s.scan(ctx, shards, f, f.Limit) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			before := c.Load()
			for b.Loop() {
				recs, err := bc.list()
				if err != nil || len(recs) != 10 {
					b.Fatalf("listed %d calls, %v", len(recs), err)
				}
			}
			b.ReportMetric(float64(c.Load()-before)/float64(b.N), "roundtrips/op")
		})
	}
}
