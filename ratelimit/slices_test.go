package ratelimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// cmdCount counts the commands a client sends, alone or in pipelines.
type cmdCount struct{ n atomic.Int64 }

func (c *cmdCount) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *cmdCount) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *cmdCount) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestSliceScript checks sliceTakeScript against the buckets: the slice
// is taken with the turn only while every limited dimension keeps half
// of its burst free, never on a take refused or a cooled key, and the
// headroom answered is what is left after it.
func TestSliceScript(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	// 10 requests a burst, refilled at one a second: a test's time adds
	// at most a fraction of one.
	lim := Limits{RPM: 60, RPMBurst: 10, InputTPM: 6000, InputBurst: 1000}
	tests := []struct {
		name       string
		before     Cost // taken ahead
		cool       bool
		turn, ask  Cost
		ok, sliced bool
		left       int // takes of one request left after
	}{
		{"HalfLeft", Cost{}, false, Cost{Requests: 1}, Cost{Requests: 4}, true, true, 5},
		{"UnderHalf", Cost{}, false, Cost{Requests: 1}, Cost{Requests: 5}, true, false, 9},
		{"TokensUnderHalf", Cost{}, false, Cost{Requests: 1, Input: 100}, Cost{Requests: 2, Input: 401}, true, false, 9},
		{"TokensHalf", Cost{}, false, Cost{Requests: 1, Input: 100}, Cost{Requests: 2, Input: 400}, true, true, 7},
		{"AlreadyUsed", Cost{Requests: 4}, false, Cost{Requests: 1}, Cost{Requests: 1}, true, false, 5},
		{"Refused", Cost{Requests: 10}, false, Cost{Requests: 1}, Cost{Requests: 1}, false, false, 0},
		{"Cooled", Cost{}, true, Cost{Requests: 1}, Cost{Requests: 1}, false, false, 0},
		{"NothingAsked", Cost{}, false, Cost{Requests: 1}, Cost{}, true, false, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewRedis(c, tc.name+":")
			k := Key{ID: "p/k", Limits: lim}
			if !tc.before.zero() {
				if ok, _ := mustTake(t, b, k, tc.before); !ok {
					t.Fatal("the take ahead was refused")
				}
			}
			if tc.cool {
				if err := b.Cool(ctx, k, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			n, a := amounts(tc.turn), amounts(tc.ask)
			keys, args := b.call(k, append(settleArgs(Cost{}, Unreported()), n[0], n[1], n[2], a[0], a[1], a[2])...)
			v, err := c.Eval(ctx, sliceTakeScript.src, keys, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			ok, h, sliced, err := sliceReply(k, v)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok || sliced != tc.sliced {
				t.Fatalf("reply %v: admitted %t, sliced %t; want %t, %t", v, ok, sliced, tc.ok, tc.sliced)
			}
			if want := headroom(t, b, k); h < want-0.02 || h > want+0.02 {
				t.Errorf("answered headroom %.3f, the bucket's is %.3f", h, want)
			}
			if tc.cool {
				return
			}
			if got := takeAll(t, b, k, Cost{Requests: 1}, 10); got != tc.left {
				t.Errorf("%d takes of a request left after, want %d", got, tc.left)
			}
		})
	}
}

// sliceEnv is a scheduler taking slices of key k in Redis, its buckets
// and the commands its client sent.
type sliceEnv struct {
	c    *goredis.Client
	cmds *cmdCount
	b    *Redis
	s    *Scheduler
	k    Key
}

func newSliceEnv(t *testing.T, c *goredis.Client, cmds *cmdCount, prefix string, lim Limits) *sliceEnv {
	t.Helper()
	b := NewRedis(c, prefix)
	s := New(Options{Buckets: b, MaxWait: 20 * time.Millisecond, Slices: true})
	t.Cleanup(s.Close)
	return &sliceEnv{c: c, cmds: cmds, b: b, s: s, k: Key{ID: "p/k", Limits: lim}}
}

// turn is one turn of est: its take riding in a pipeline of its own, as
// an admission's, and its grant; it reports whether the take went to
// Redis (a pipeline was sent).
func (e *sliceEnv) turn(t *testing.T, est Cost) (*Grant, bool) {
	t.Helper()
	ctx := context.Background()
	rd := e.s.Ride(Standard, []Key{e.k}, est)
	if rd == nil {
		t.Fatal("no ride")
	}
	sent := false
	if !rd.Sent() {
		p := e.c.Pipeline()
		if rd.Queue(ctx, e.c, p) {
			sent = true
			_, _ = p.Exec(ctx)
		}
	}
	g, err := rd.Grant(ctx)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	return g, sent
}

// TestSlicesServeTurns checks a slice's life on one replica: a turn asks
// for it with its take; the turns after take from it in memory, send
// nothing, and settle into it; half spent, a turn's pipeline asks for
// more; and what is left goes back to the bucket on Close.
func TestSlicesServeTurns(t *testing.T) {
	c := newRedisClient(t)
	cmds := &cmdCount{}
	c.AddHook(cmds)
	// A burst of 6400 requests: slices of 64 turns (a 16th is 400).
	lim := Limits{RPM: 60, RPMBurst: 6400, OutputTPM: 6000, OutputBurst: 6400 * 100}
	e := newSliceEnv(t, c, cmds, "serve:", lim)
	est := Cost{Requests: 1, Output: 100}
	// The first turn on the key takes alone; the second, soon after,
	// asks for a slice.
	for i := range 2 {
		if _, sent := e.turn(t, est); !sent {
			t.Fatalf("turn %d's take did not go to Redis", i+1)
		}
	}
	// 2 + 64 requests taken of 6400.
	if h := headroom(t, e.b, e.k); h < 0.989 || h > 0.99 {
		t.Fatalf("headroom %.4f after two turns, want 1-66/6400", h)
	}
	before := cmds.n.Load()
	var gs []*Grant
	for i := range 32 {
		g, sent := e.turn(t, est)
		if sent {
			t.Fatalf("turn %d of the slice went to Redis", i+3)
		}
		gs = append(gs, g)
	}
	// Each used 10 of its 100 output tokens: the 90 go back to the slice.
	for _, g := range gs {
		if sr := RideSettles([]Settlement{{Grant: g, Actual: Cost{Requests: 1, Output: 10}}}); sr != nil {
			t.Fatal("a settle on the slice's key has something to send")
		}
	}
	if got := cmds.n.Load() - before; got != 0 {
		t.Fatalf("32 turns from the slice and their settles sent %d commands, want 0", got)
	}
	// 32 of 64 requests spent: the next turn is the slice's, and asks
	// for more in its pipeline.
	if _, sent := e.turn(t, est); !sent {
		t.Fatal("the turn that found the slice half spent asked for nothing")
	}
	if h := headroom(t, e.b, e.k); h < 0.979 || h > 0.98 {
		t.Fatalf("headroom %.4f after the top-up, want 1-130/6400", h)
	}
	// Close gives back what is left: 64+64-33 requests, and the output
	// settles gave back 32×90 of the slice's (within what it was given).
	e.s.Close()
	if h := headroom(t, e.b, e.k); h < 0.9944 || h > 0.9955 {
		t.Fatalf("headroom %.4f after Close, want 1-35/6400 (the turns' own requests)", h)
	}
	if e.s.fromSlice(e.k, Cost{Requests: 1}) {
		t.Fatal("a closed scheduler took from a slice")
	}
}

// TestSliceExpires checks that what is left of a slice goes back to the
// bucket after sliceLife, and that a cooling gives it back at once and
// serves no more turn from it.
func TestSliceExpires(t *testing.T) {
	c := newRedisClient(t)
	lim := Limits{RPM: 60, RPMBurst: 6400}
	est := Cost{Requests: 1}
	t.Run("Life", func(t *testing.T) {
		e := newSliceEnv(t, c, nil, "life:", lim)
		e.turn(t, est)
		e.turn(t, est)
		if h := headroom(t, e.b, e.k); h > 0.99 {
			t.Fatalf("headroom %.4f: no slice taken", h)
		}
		deadline := time.Now().Add(5 * sliceLife)
		for headroom(t, e.b, e.k) < 0.9996 {
			if time.Now().After(deadline) {
				t.Fatalf("headroom %.4f %s after the slice was given, want 1-2/6400", headroom(t, e.b, e.k), 5*sliceLife)
			}
			time.Sleep(sliceLife / 10)
		}
		if _, sent := e.turn(t, est); !sent {
			t.Fatal("a turn took from an expired slice")
		}
	})
	t.Run("Cool", func(t *testing.T) {
		e := newSliceEnv(t, c, nil, "cool:", lim)
		e.turn(t, est)
		g, _ := e.turn(t, est)
		if !e.s.fromSlice(e.k, est) {
			t.Fatal("no slice after two turns")
		}
		if _, err := g.Reject(context.Background(), time.Minute, []Key{e.k}); err != nil {
			t.Fatal(err)
		}
		if e.s.fromSlice(e.k, est) {
			t.Fatal("a cooled key served a turn from its slice")
		}
		// The turn's take and the slice went back; the key is cooled.
		b := NewRedis(c, "cool:")
		if ok, _ := mustTake(t, b, e.k, est); ok {
			t.Fatal("a cooled key admitted a take")
		}
		rd := e.s.Ride(Standard, []Key{e.k}, est)
		if rd == nil || rd.local {
			t.Fatalf("ride %+v on a cooled key: want one that goes to Redis", rd)
		}
		rd.Undo(context.Background())
	})
}

// TestSliceGoesBackWhenLowered checks that a settle whose rate-limit
// headers report less than a burst left ends the key's slice and gives
// what was left of it back in the same settle, and that one reporting
// plenty goes into the slice.
func TestSliceGoesBackWhenLowered(t *testing.T) {
	c := newRedisClient(t)
	e := newSliceEnv(t, c, nil, "lowered:", Limits{RPM: 60, RPMBurst: 6400})
	est := Cost{Requests: 1}
	e.turn(t, est)
	g, _ := e.turn(t, est)
	g2, _ := e.turn(t, est) // from the slice: 63 left
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-remaining", "6400")
	if sr := RideSettles([]Settlement{{Grant: g2, Actual: est, Header: h}}); sr != nil {
		t.Fatal("a settle reporting a burst left has something to send")
	}
	h.Set("anthropic-ratelimit-requests-remaining", "100")
	sr := RideSettles([]Settlement{{Grant: g, Actual: est, Header: h}})
	if sr == nil || len(sr.groups) != 1 || len(sr.groups[0].deltas) != 1 {
		t.Fatalf("a settle reporting less than a burst left: %+v, want one to send", sr)
	}
	if got := sr.groups[0].deltas[0]; got != (Cost{Requests: -63}) {
		t.Fatalf("its correction is %+v, want the slice's 63 requests given back", got)
	}
	if e.s.fromSlice(e.k, est) {
		t.Fatal("the slice still serves turns")
	}
	sr.Finish(context.Background())
	// What the provider reported is what is left: 100 of 6400.
	if h := headroom(t, e.b, e.k); h < 0.015 || h > 0.017 {
		t.Fatalf("headroom %.4f, want 100/6400", h)
	}
}

// TestSlicesNeverOverdraw runs two replicas' turns on one key until both
// are refused: slices move capacity between them but never add to it, so
// all they admitted is at most the bucket's burst and what it refilled.
func TestSlicesNeverOverdraw(t *testing.T) {
	c := newRedisClient(t)
	const burst = 640
	lim := Limits{RPM: 60, RPMBurst: burst}
	a := newSliceEnv(t, c, nil, "two:", lim)
	b := newSliceEnv(t, c, nil, "two:", lim)
	est := Cost{Requests: 1}
	start := time.Now()
	admitted, local := 0, 0
	for i := 0; i < 4*burst; i++ {
		e := a
		if i%3 == 2 {
			e = b
		}
		rd := e.s.Ride(Standard, []Key{e.k}, est)
		if rd == nil {
			t.Fatal("no ride")
		}
		if rd.local {
			local++
		}
		if !rd.Sent() {
			p := c.Pipeline()
			if rd.Queue(context.Background(), c, p) {
				_, _ = p.Exec(context.Background())
			}
		}
		_, err := rd.Grant(context.Background())
		var we *WaitError
		switch {
		case err == nil:
			admitted++
			continue
		case !errors.As(err, &we):
			t.Fatal(err)
		}
		if i > burst && admitted < burst/2 {
			t.Fatalf("refused after %d admitted of a burst of %d", admitted, burst)
		}
		break
	}
	refill := int(time.Since(start).Seconds()) + 1 // one a second
	if admitted > burst+refill {
		t.Fatalf("two replicas admitted %d turns on a burst of %d (+%d refilled)", admitted, burst, refill)
	}
	// Slices of 40: one replica may hold one the other cannot use.
	if admitted < burst-2*(burst/sliceShare) {
		t.Fatalf("two replicas admitted %d turns on a burst of %d", admitted, burst)
	}
	if local < burst/4 {
		t.Fatalf("%d of %d turns came from slices", local, admitted)
	}
}

// TestSlicesOnlyForBusyKeys checks that a replica asks for a slice only
// on a key it takes often: turns further apart than busyGap take alone
// (a slice would mostly go back unspent), and the first turn soon after
// another asks.
func TestSlicesOnlyForBusyKeys(t *testing.T) {
	c := newRedisClient(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	b := NewRedis(c, "busy:")
	s := New(Options{Buckets: b, MaxWait: 20 * time.Millisecond, Slices: true,
		Clock: func() time.Time { return time.Unix(0, now.Load()) }})
	t.Cleanup(s.Close)
	e := &sliceEnv{c: c, b: b, s: s, k: Key{ID: "p/k", Limits: Limits{RPM: 60, RPMBurst: 6400}}}
	est := Cost{Requests: 1}
	for i := range 5 {
		rd := s.Ride(Standard, []Key{e.k}, est)
		if rd == nil || rd.local || !rd.ask.zero() {
			t.Fatalf("turn %d, %s after the one before: ride %+v, want a take alone", i+1, 2*busyGap, rd)
		}
		rd.Undo(context.Background())
		now.Add(int64(2 * busyGap))
	}
	e.turn(t, est)
	now.Add(int64(busyGap / 2))
	rd := s.Ride(Standard, []Key{e.k}, est)
	if rd == nil || rd.ask.zero() {
		t.Fatalf("a turn %s after the one before: ride %+v, want one asking for a slice", busyGap/2, rd)
	}
	rd.Undo(context.Background())
}
