package ratelimit

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// newRedisClient starts a redis-server for t and returns a client of it.
func newRedisClient(t testing.TB) *goredis.Client {
	t.Helper()
	srv := redistest.StartServer(t)
	opt, err := goredis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisContract(t *testing.T) {
	c := newRedisClient(t)
	n := 0
	runContract(t, func(t *testing.T) harness {
		n++
		// One server for the suite; a prefix per subtest keeps them
		// apart.
		return redisHarness(t, c, "t"+strings.Repeat("x", n)+":")
	})
}

// TestRedisClusterContract runs the contract on a three-master Redis
// Cluster: each key's state is one hash in one slot, whichever node holds
// it.
func TestRedisClusterContract(t *testing.T) {
	cl := redistest.StartCluster(t)
	opt, err := goredis.ParseClusterURL(cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClusterClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	n := 0
	runContract(t, func(t *testing.T) harness {
		n++
		return redisHarness(t, c, "c"+strings.Repeat("x", n)+":")
	})
}

// redisHarness is the contract's harness on Redis under prefix: real time
// passes, and a bucket's arrival times are read from its hash, after an
// origin taken from the server's clock now.
func redisHarness(t *testing.T, c goredis.UniversalClient, prefix string) harness {
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	origin := now.UnixMicro()
	r := NewRedis(c, prefix)
	tat := func(t *testing.T, k Key, d int) float64 {
		t.Helper()
		v, err := c.HGet(ctx, r.hashKey(k), "t"+strconv.Itoa(d+1)).Result()
		if err != nil {
			t.Fatalf("key %s, dimension %d: %v", k.ID, d, err)
		}
		whole, frac, ok := strings.Cut(v, ".")
		us, err := strconv.ParseInt(whole, 10, 64)
		f := 0.0
		if err == nil && ok {
			f, err = strconv.ParseFloat("0."+frac, 64)
		}
		if err != nil {
			t.Fatalf("key %s, dimension %d: arrival time %q: %v", k.ID, d, v, err)
		}
		return float64(us-origin)*1000 + f*1000
	}
	return harness{b: r, advance: time.Sleep, tat: tat}
}

// TestRedisKeys checks where a key's state lives: one hash under the
// prefix, hash-tagged by the key id, expiring.
func TestRedisKeys(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	r := NewRedis(c, "gk:")
	k := Key{ID: "anthropic/main", Limits: minute(Limits{RPM: 60})}
	mustTake(t, r, k, Cost{Requests: 1})
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "gk:rl:{anthropic/main}:b" {
		t.Fatalf("keys %q, want [gk:rl:{anthropic/main}:b]", keys)
	}
	ttl, err := c.PTTL(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > 2*time.Minute+time.Second {
		t.Fatalf("TTL %s, want about two minutes", ttl)
	}
}

// TestRedisScriptFlushed checks that the buckets survive a server that lost
// its script cache (a restart, SCRIPT FLUSH).
func TestRedisScriptFlushed(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	r := NewRedis(c, "")
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 60})}
	mustTake(t, r, k, Cost{Requests: 10})
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, r, k, Cost{Requests: 10}, 6); n != 5 {
		t.Fatalf("after SCRIPT FLUSH, %d takes of 10 of the 50 left fit, want 5", n)
	}
}

// TestRedisWrongType checks that a key whose state is not what the scripts
// keep (here a string, not a hash) gives an error, not an admission.
func TestRedisWrongType(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	r := NewRedis(c, "")
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 60})}
	if err := c.Set(ctx, "rl:{p/k}:b", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Take(ctx, k, Cost{Requests: 1}); err == nil {
		t.Fatal("Take on a key whose state is not a hash succeeded")
	}
	if _, err := r.Headroom(ctx, k); err == nil {
		t.Fatal("Headroom on a key whose state is not a hash succeeded")
	}
}

// TestRedisDown checks that a Redis that is gone gives errors, not
// admissions.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	opt, err := goredis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	c := goredis.NewClient(opt)
	defer c.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	r := NewRedis(c, "")
	ok, _, err := r.Take(context.Background(), Key{ID: "p/k", Limits: minute(Limits{RPM: 60})}, Cost{Requests: 1})
	if err == nil || ok {
		t.Fatalf("Take with Redis down: ok %v, err %v; want an error", ok, err)
	}
	if errors.Is(err, ErrReply) {
		t.Fatalf("a connection failure reported as a bad reply: %v", err)
	}
}

// TestSchedulerRedisDown checks that a Scheduler whose Redis is gone
// answers Acquire with the error, on the fast path and for a waiting turn,
// instead of admitting or hanging.
func TestSchedulerRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	opt, err := goredis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	c := goredis.NewClient(opt)
	defer c.Close()
	s := New(Options{Buckets: NewRedis(c, ""), Poll: time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 60})}
	g, err := s.Acquire(ctx, Batch, []Key{k}, Cost{Requests: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Done(ctx, Cost{Requests: 60})

	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, Batch, []Key{k}, Cost{Requests: 1})
		errc <- err
	}()
	waitQueued(t, s, Batch, 1)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("a waiting turn was admitted with Redis gone")
	}
	if _, err := s.Acquire(ctx, Batch, []Key{k}, Cost{Requests: 1}); err == nil {
		t.Fatal("the fast path admitted a turn with Redis gone")
	}
}

// TestRedisHeadrooms checks the one-round-trip headroom of a pool against
// each key's Headroom, also after the script cache was lost, and the
// scheduler's choice of key on Redis.
func TestRedisHeadrooms(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	r := NewRedis(c, "")
	keys := []Key{
		{ID: "p/a", Limits: minute(Limits{RPM: 60})},
		{ID: "p/b", Limits: minute(Limits{RPM: 60})},
		{ID: "p/c"},
	}
	mustTake(t, r, keys[0], Cost{Requests: 45})
	mustTake(t, r, keys[1], Cost{Requests: 15})
	check := func() {
		t.Helper()
		hs, err := r.headrooms(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []float64{0.25, 0.75, 1} {
			if hs[i] < want-0.01 || hs[i] > want+0.05 {
				t.Fatalf("headroom of %s %v, want %v", keys[i].ID, hs[i], want)
			}
		}
	}
	check()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	check()

	s := New(Options{Buckets: r})
	defer s.Close()
	g, err := s.Acquire(ctx, Standard, keys[:2], Cost{Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	if g.Key.ID != "p/b" {
		t.Fatalf("turn on %s, want p/b (most headroom)", g.Key.ID)
	}
	g.Done(ctx, Cost{Requests: 1})
}

// TestRedisSettleOneRoundTrip checks that settling a turn, its correction
// and its rate-limit headers, costs one round trip to Redis, and none when
// there is nothing to settle.
func TestRedisSettleOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	rt := &redistest.RoundTrips{}
	c.AddHook(rt)
	r := NewRedis(c, "")
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 60, InputTPM: 60})}
	mustTake(t, r, k, Cost{Requests: 1, Input: 50})
	// The first run of the script loads it (NOSCRIPT, then EVAL), as
	// once per Redis server.
	if err := r.Settle(ctx, Key{ID: "p/warm", Limits: k.Limits}, Cost{Input: 1}, Unreported()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		delta Cost
		rem   Remaining
		want  int64
	}{
		{"CorrectionAndHeaders", Cost{Input: -30}, Remaining{Requests: 50, Input: 35, Output: -1, Tokens: -1}, 1},
		{"CorrectionOnly", Cost{Input: -5}, Unreported(), 1},
		{"HeadersOnly", Cost{}, Remaining{Requests: -1, Input: -1, Output: -1, Tokens: 30}, 1},
		{"Nothing", Cost{}, Unreported(), 0},
	}
	for _, tc := range tests {
		base := rt.Load()
		if err := r.Settle(ctx, k, tc.delta, tc.rem); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := rt.Load() - base; got != tc.want {
			t.Fatalf("%s: %d round trips, want %d", tc.name, got, tc.want)
		}
	}
	// 50 taken, 30 given back, the provider's 35, 5 given back, the
	// provider's 30: 30 input tokens left.
	if n := takeAll(t, r, k, Cost{Input: 10}, 6); n != 3 {
		t.Fatalf("after the settles, %d takes of 10 input tokens fit, want 3", n)
	}
}

// TestRedisSettleAll checks that settling several keys together costs one
// round trip and leaves each key as settling it alone does.
func TestRedisSettleAll(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	rt := &redistest.RoundTrips{}
	c.AddHook(rt)
	one, all := NewRedis(c, "one:"), NewRedis(c, "all:")
	lim := minute(Limits{RPM: 60, InputTPM: 60})
	keys := []Key{{ID: "p/a", Limits: lim}, {ID: "p/b", Limits: lim}, {ID: "p/c", Limits: lim}, {ID: "p/none"}}
	deltas := []Cost{{Input: -30}, {Input: -5}, {}, {Input: -10}}
	rems := []Remaining{Unreported(), {Requests: 50, Input: 35, Output: -1, Tokens: -1}, Unreported(), Unreported()}
	for _, b := range []*Redis{one, all} {
		for _, k := range keys[:3] {
			mustTake(t, b, k, Cost{Requests: 1, Input: 50})
		}
	}
	// Load the script once (NOSCRIPT, then EVAL), as once per server,
	// and open the client's pipeline connection (its handshake counts).
	warm := []Key{{ID: "p/warm", Limits: lim}, {ID: "p/warm2", Limits: lim}}
	if err := one.Settle(ctx, warm[0], Cost{Input: 1}, Unreported()); err != nil {
		t.Fatal(err)
	}
	for _, err := range all.SettleBatch(ctx, warm, []Cost{{Input: 1}, {Input: 1}}, []Remaining{Unreported(), Unreported()}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		if err := one.Settle(ctx, k, deltas[i], rems[i]); err != nil {
			t.Fatal(err)
		}
	}
	base := rt.Load()
	for i, err := range all.SettleBatch(ctx, keys, deltas, rems) {
		if err != nil {
			t.Fatalf("key %s: %v", keys[i].ID, err)
		}
	}
	if got := rt.Load() - base; got != 1 {
		t.Fatalf("settling %d keys together cost %d round trips, want 1", len(keys), got)
	}
	for _, k := range keys[:3] {
		h1, err := one.Headroom(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := all.Headroom(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		// The buckets refill between the two reads: about 1e-5 a
		// millisecond at 60 a minute.
		if math.Abs(h1-h2) > 0.005 || h1 > 0.9 {
			t.Errorf("key %s: headroom %v settled alone, %v together; want equal, below full", k.ID, h1, h2)
		}
	}
}

// TestRedisWholeMicrosecondTAT checks that a TAT written in whole
// microseconds, without a fraction (as before fractions were kept, and
// whenever there is none), is read as it was written.
func TestRedisWholeMicrosecondTAT(t *testing.T) {
	ctx := context.Background()
	c := newRedisClient(t)
	r := NewRedis(c, "")
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 60})}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Half of a minute's bucket taken: 30 s ahead.
	ahead := now.Add(30 * time.Second).UnixMicro()
	if err := c.HSet(ctx, r.hashKey(k), "t1", strconv.FormatInt(ahead, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if h := headroom(t, r, k); h < 0.49 || h > 0.51 {
		t.Fatalf("a bucket 30 s ahead of a minute's burst has headroom %v, want 0.5", h)
	}
}

// TestRedisCallCache checks a script call's KEYS and ARGV for a key, built
// once and kept for at most maxKeyCalls keys, and that a key's limits
// changing (a reload) gives its new arguments.
func TestRedisCallCache(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	r := NewRedis(c, "gk:")
	for i := range maxKeyCalls + 10 {
		k := Key{ID: "p/" + strconv.Itoa(i), Limits: Limits{RPM: 60 + i}}
		for range 2 {
			keys, args := r.call(k, int64(7))
			if len(keys) != 1 || keys[0] != "gk:rl:{"+k.ID+"}:b" {
				t.Fatalf("key %s: KEYS %q", k.ID, keys)
			}
			if len(args) != 8 || args[0] != int64(60+i) || args[7] != int64(7) {
				t.Fatalf("key %s: ARGV %v, want its limits then 7", k.ID, args)
			}
		}
		if n := r.ncalls.Load(); n > maxKeyCalls {
			t.Fatalf("%d keys kept, more than %d", n, maxKeyCalls)
		}
	}
	k := Key{ID: "p/0", Limits: Limits{RPM: 120}}
	if _, args := r.call(k); args[0] != int64(120) {
		t.Fatalf("after a reload to 120 rpm, ARGV %v", args)
	}
}
