package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// sendRide queues rd in a pipeline of c carrying another command, as the
// store's update carries it, and runs the pipeline.
func sendRide(t *testing.T, c *goredis.Client, rd *Ride) {
	t.Helper()
	ctx := context.Background()
	pipe := c.Pipeline()
	ping := pipe.Ping(ctx)
	if !rd.Queue(ctx, c, pipe) {
		t.Fatal("the ride was not queued on its own client")
	}
	if rd.Queue(ctx, c, pipe) {
		t.Fatal("the ride was queued twice")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if ping.Err() != nil {
		t.Fatal(ping.Err())
	}
}

func headroomOf(t *testing.T, b Buckets, k Key) float64 {
	t.Helper()
	h, err := b.Headroom(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A take riding in another pipeline admits the turn with no round trip
// of its own; one given back (Undo) leaves the key as it was; one finding
// no room leaves the turn to Acquire, which waits in its queue.
func TestRide(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	rt := &redistest.RoundTrips{}
	c.AddHook(rt)
	r := NewRedis(c, "ride:")
	s := New(Options{Buckets: r, MaxWait: 50 * time.Millisecond})
	t.Cleanup(s.Close)
	one := Cost{Requests: 1}

	t.Run("granted", func(t *testing.T) {
		k := Key{ID: "p/granted", Limits: minute(Limits{RPM: 60})}
		mustTake(t, r, k, one) // loads the take script, as any first take does
		rd := s.Ride(Standard, []Key{k}, one)
		if rd == nil {
			t.Fatal("no ride on Redis buckets")
		}
		sendRide(t, c, rd)
		before := rt.Load()
		g, err := rd.Grant(ctx)
		if err != nil || g == nil || g.Key.ID != k.ID {
			t.Fatalf("Grant = %v, %v; want a grant on %s", g, err, k.ID)
		}
		if got := rt.Load() - before; got != 0 {
			t.Errorf("the grant cost %d round trips after the pipeline, want 0", got)
		}
		if h := headroomOf(t, r, k); h > 58.5/60 {
			t.Errorf("headroom %.4f after two takes of 60, want about 58/60", h)
		}
		g.Done(ctx, one)
	})
	t.Run("undone", func(t *testing.T) {
		k := Key{ID: "p/undone", Limits: minute(Limits{RPM: 60})}
		mustTake(t, r, k, Cost{})
		rd := s.Ride(Standard, []Key{k}, one)
		sendRide(t, c, rd)
		if h := headroomOf(t, r, k); h > 59.5/60 {
			t.Fatalf("headroom %.4f after the ride, want about 59/60: the take did not ride", h)
		}
		rd.Undo(ctx)
		if h := headroomOf(t, r, k); h < 0.999 {
			t.Errorf("headroom %.4f after Undo, want the key full again", h)
		}
		rd.Undo(ctx) // a second Undo gives nothing back twice
		if _, err := rd.Grant(ctx); err != nil {
			t.Fatal(err) // an undone ride acquires as any turn
		}
	})
	t.Run("no room", func(t *testing.T) {
		k := Key{ID: "p/full", Limits: Limits{RPM: 60, RPMBurst: 1}}
		mustTake(t, r, k, one)
		rd := s.Ride(Standard, []Key{k}, one)
		sendRide(t, c, rd)
		_, err := rd.Grant(ctx)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("Grant on a full key = %v, want the queue's WaitError", err)
		}
	})
	t.Run("another client", func(t *testing.T) {
		k := Key{ID: "p/other", Limits: minute(Limits{RPM: 60})}
		other := newRedisClient(t)
		rd := s.Ride(Standard, []Key{k}, one)
		if rd.Queue(ctx, other, other.Pipeline()) || rd.Sent() {
			t.Fatal("a ride was queued on another Redis than its buckets'")
		}
		g, err := rd.Grant(ctx)
		if err != nil || g == nil {
			t.Fatalf("Grant of an unsent ride = %v, %v; want Acquire's grant", g, err)
		}
	})
	t.Run("pool", func(t *testing.T) {
		a := Key{ID: "p/pool-a", Limits: minute(Limits{RPM: 60})}
		b := Key{ID: "p/pool-b", Limits: minute(Limits{RPM: 60})}
		g, err := s.Acquire(ctx, Standard, []Key{a, b}, one) // on a, the first of equals
		if err != nil || g.Key.ID != a.ID {
			t.Fatalf("Acquire = %v, %v; want a grant on %s", g, err, a.ID)
		}
		defer g.Done(ctx, one)
		rd := s.Ride(Standard, []Key{a, b}, one)
		sendRide(t, c, rd)
		g2, err := rd.Grant(ctx)
		if err != nil || g2.Key.ID != b.ID {
			t.Fatalf("ride's grant = %v, %v; want %s, the key last seen with the most headroom", g2, err, b.ID)
		}
		g2.Done(ctx, one)
	})
	t.Run("memory", func(t *testing.T) {
		m := New(Options{Buckets: NewMemory(nil)})
		defer m.Close()
		if m.Ride(Standard, []Key{{ID: "p/m", Limits: Limits{RPM: 60}}}, one) != nil {
			t.Fatal("a ride on in-process buckets")
		}
	})
}
