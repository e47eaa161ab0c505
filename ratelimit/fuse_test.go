package ratelimit

import (
	"context"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
)

// TestFuse checks that a turn's take and the settle of the turn before it
// on the same key go to Redis as one script call, the settle first (the
// take finds the capacity it gave back), each read as it would be alone;
// that settles on other keys ride as they would; and that a fused call
// whose script the server lost is answered by the separate scripts, with
// the fused one loaded again for the next turn.
func TestFuse(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	rt := &redistest.RoundTrips{}
	c.AddHook(rt)
	lim := minute(Limits{RPM: 60, InputTPM: 60})
	tests := []struct {
		name      string
		settleOn  string // the earlier turn's key; the take is on "p/k"
		flush     bool   // the server's scripts lost before the pipeline
		wantCmds  int    // in the pipeline, with the carrier's own
		wantRTT   int64  // round trips of the pipeline, Finish and Grant
		wantInput int    // takes of 10 input tokens "p/k" holds after
	}{
		// 50 taken and 20 used on p/k: 30 back, then 40 taken: 0 left.
		// The first fused call of a process loads its script ahead of it.
		{"SameKey", "p/k", false, 3, 1, 0},
		// p/k holds 60 - 40; the settle on p/o rides alone.
		{"OtherKey", "p/o", false, 3, 1, 2},
		// NOSCRIPT: the settle by its text (EVALSHA, NOSCRIPT again, EVAL)
		// and a SCRIPT LOAD of the fused script; the take by Acquire
		// (EVALSHA, NOSCRIPT, EVAL).
		{"ScriptLost", "p/k", true, 2, 6, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewRedis(c, tc.name+":")
			s := New(Options{Buckets: b, MaxWait: 50 * time.Millisecond})
			defer s.Close()
			k := Key{ID: "p/k", Limits: lim}
			earlier := Key{ID: tc.settleOn, Limits: lim}
			g, err := s.Acquire(ctx, Interactive, []Key{earlier}, Cost{Requests: 1, Input: 50})
			if err != nil {
				t.Fatal(err)
			}
			sr := RideSettles([]Settlement{{Grant: g, Actual: Cost{Requests: 1, Input: 20}}})
			rd := s.Ride(Interactive, []Key{k}, Cost{Requests: 1, Input: 40})
			if sr == nil || rd == nil {
				t.Fatalf("RideSettles = %v, Ride = %v: want both", sr, rd)
			}
			if tc.flush {
				// Loaded once by this process, then lost by the server.
				b.fusedSent.Store(true)
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				// Loaded, as once per server.
				for _, sc := range []*script{takeScript, settleScript} {
					if err := c.ScriptLoad(ctx, sc.src).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			base := rt.Load()
			p := c.Pipeline()
			p.Ping(ctx) // the carrier's own command
			f := Fuse(rd, sr)
			if !f.Queue(ctx, c, p) {
				t.Fatal("nothing queued")
			}
			if f.Queue(ctx, c, p) {
				t.Fatal("a second Queue added again")
			}
			if got := p.Len(); got != tc.wantCmds {
				t.Fatalf("%d commands in the pipeline, want %d", got, tc.wantCmds)
			}
			_, _ = p.Exec(ctx)
			sr.Finish(ctx)
			grant, err := rd.Grant(ctx)
			if err != nil || grant == nil || grant.Key.ID != k.ID {
				t.Fatalf("Grant = %v, %v; want a grant on %s", grant, err, k.ID)
			}
			if got := rt.Load() - base; got != tc.wantRTT {
				t.Fatalf("%d round trips, want %d", got, tc.wantRTT)
			}
			if n := takeAll(t, b, k, Cost{Input: 10}, 6); n != tc.wantInput {
				t.Fatalf("p/k holds %d takes of 10 input tokens, want %d", n, tc.wantInput)
			}
			if tc.settleOn != k.ID {
				if n := takeAll(t, b, earlier, Cost{Input: 10}, 6); n != 4 {
					t.Fatalf("%s holds %d takes of 10 input tokens after its settle, want 4", tc.settleOn, n)
				}
			}
			if tc.flush {
				// The next turn's fused call finds its script.
				g2, err := s.Acquire(ctx, Interactive, []Key{{ID: "p/n", Limits: lim}}, Cost{Requests: 1})
				if err != nil {
					t.Fatal(err)
				}
				sr2 := RideSettles([]Settlement{{Grant: g2, Actual: Cost{Requests: 1, Input: 5}}})
				rd2 := s.Ride(Interactive, []Key{{ID: "p/n", Limits: lim}}, Cost{Requests: 1})
				p := c.Pipeline()
				Fuse(rd2, sr2).Queue(ctx, c, p)
				cmds, _ := p.Exec(ctx)
				if len(cmds) != 1 || cmds[0].Err() != nil || !b.fusedSent.Load() {
					t.Fatalf("the next fused call: %v", cmds)
				}
				sr2.Finish(ctx)
			}
		})
	}
}
