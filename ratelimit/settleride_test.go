package ratelimit

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// TestSettleRide checks that a flush's key settles ride in another
// operation's pipeline (no round trip of their own) and leave the keys as
// SettleAll does; that those not queued, or whose script the server lost,
// are sent by Finish; and that a grant's estimate is corrected once.
func TestSettleRide(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	rt := &redistest.RoundTrips{}
	c.AddHook(rt)
	lim := minute(Limits{RPM: 60, InputTPM: 60})
	// 50 input tokens taken, 20 used: 30 given back.
	settle := func(t *testing.T, s *Scheduler, id string) Settlement {
		t.Helper()
		g, err := s.Acquire(ctx, Interactive, []Key{{ID: id, Limits: lim}}, Cost{Requests: 1, Input: 50})
		if err != nil {
			t.Fatal(err)
		}
		return Settlement{Grant: g, Actual: Cost{Requests: 1, Input: 20}}
	}
	// left is how many takes of 10 input tokens the key holds now.
	left := func(t *testing.T, b Buckets, id string) int {
		t.Helper()
		return takeAll(t, b, Key{ID: id, Limits: lim}, Cost{Input: 10}, 6)
	}
	tests := []struct {
		name      string
		queue     bool // handed to a pipeline
		flush     bool // the server's scripts lost before it runs
		wantQueue bool
		wantRTT   int64 // round trips of the carrier and Finish
	}{
		{"Rides", true, false, true, 1},
		{"NotQueued", false, false, false, 2},
		// The carrier; then the first key's EVALSHA (NOSCRIPT) and EVAL,
		// which loads the script, and the second key's EVALSHA.
		{"ScriptLost", true, true, true, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewRedis(c, tc.name+":")
			s := New(Options{Buckets: b})
			defer s.Close()
			ss := []Settlement{settle(t, s, "p/a"), settle(t, s, "p/b"), {}}
			if tc.flush {
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				// Loaded, as once per server.
				if err := b.Settle(ctx, Key{ID: "p/warm", Limits: lim}, Cost{Input: 1}, Unreported()); err != nil {
					t.Fatal(err)
				}
			}
			sr := RideSettles(ss)
			if sr == nil {
				t.Fatal("RideSettles of two grants is nil")
			}
			base := rt.Load()
			p := c.Pipeline()
			p.Ping(ctx) // the carrier's own command
			if tc.queue {
				if got := sr.Queue(ctx, c, p); got != tc.wantQueue {
					t.Fatalf("Queue = %t, want %t", got, tc.wantQueue)
				}
				if sr.Queue(ctx, c, p) {
					t.Fatal("a second Queue added the settles again")
				}
			}
			_, _ = p.Exec(ctx)
			sr.Finish(ctx)
			if got := rt.Load() - base; got != tc.wantRTT {
				t.Fatalf("%d round trips, want %d", got, tc.wantRTT)
			}
			for _, id := range []string{"p/a", "p/b"} {
				if n := left(t, b, id); n != 4 {
					t.Fatalf("key %s holds %d takes of 10 input tokens after its settle, want 4 (60 - 20 used)", id, n)
				}
			}
			// Settled once: a second settlement of the same grants has
			// no correction left to send, and no headers.
			if again := RideSettles(ss); again != nil {
				t.Fatalf("a second RideSettles of settled grants has %d groups", len(again.groups))
			}
		})
	}
}

// TestSettleRideOtherClient checks that a SettleRide does not ride in a
// pipeline of another Redis client than its buckets', and that Finish
// then sends it.
func TestSettleRideOtherClient(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	other := goredis.NewClient(c.Options())
	defer other.Close()
	b := NewRedis(c, "")
	s := New(Options{Buckets: b})
	defer s.Close()
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 60})}
	g, err := s.Acquire(ctx, Interactive, []Key{k}, Cost{Requests: 30})
	if err != nil {
		t.Fatal(err)
	}
	sr := RideSettles([]Settlement{{Grant: g, Actual: Cost{Requests: 1}}})
	if sr.Queue(ctx, other, other.Pipeline()) {
		t.Fatal("queued in another client's pipeline")
	}
	sr.Finish(ctx)
	if n := takeAll(t, b, k, Cost{Requests: 10}, 6); n != 5 {
		t.Fatalf("after the settle, %d takes of 10 requests fit, want 5 (60 - 1 used)", n)
	}
}
