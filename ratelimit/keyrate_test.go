package ratelimit

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// keyRate is the key of TestKeyAdmitsItsRate: 100,000 requests a minute
// (1,667 a second), the key of the load that found Redis admitting 0.71
// of it. A request every 0.6 ms is about a take's round trip to Redis
// under -race on this two-core machine (0.5 to 0.9 ms measured, more
// when the machine is busy), so a dispatcher that admits one waiting
// turn per round trip falls short of it; and it is under what the
// clients drive here under -race (about 1,800 turns a second while the
// key has room, half a core for the three runs at once).
const keyRate = 100_000

// keyRateRun is how long TestKeyAdmitsItsRate runs its clients, unless
// GATEKEEPER_KEYRATE_RUN (a duration) says otherwise.
const keyRateRun = 30 * time.Second

// TestKeyAdmitsItsRate runs 64 clients on a key whose bucket they find
// empty, as the proxy's turns use the scheduler (a take riding in a
// pipeline with the key settle of the client's previous turn, Acquire
// when it cannot ride, a settle of less output than estimated), for
// 30 s: on Memory, on Redis with one replica, and on Redis with two (two
// Schedulers over one Redis, 32 clients each). Each admits at least 0.95
// of the key's rate, and never more than the bucket allows: its burst,
// taken before the clients start, and the rate over the run.
//
// The bucket starts empty so that the run measures the key's rate
// alone: from a full bucket, the first seconds measure how fast the
// clients go while the burst lasts, which is this machine's load, not
// the limiter. The three run at once, in goroutines rather than parallel
// subtests: go test runs as many parallel tests at a time as there are
// cores, two here, which would make the test a minute long.
func TestKeyAdmitsItsRate(t *testing.T) {
	// It measures a rate, which a machine busy with the rest of the
	// suite's packages cannot give it: .ci/run runs it on its own, after
	// the suite, with GATEKEEPER_KEYRATE=1.
	if os.Getenv("GATEKEEPER_KEYRATE") != "1" {
		t.Skip("SKIPPED: a 30s measurement of the key's admitted rate, run on its own machine time: GATEKEEPER_KEYRATE=1 go test -race -run '^TestKeyAdmitsItsRate$' ./ratelimit/ (.ci/run does)")
	}
	run := keyRateRun
	if s := os.Getenv("GATEKEEPER_KEYRATE_RUN"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		run = d
	}
	variants := []*rateRun{
		{name: "Memory", replicas: 1},
		{name: "Redis", redis: true, replicas: 1},
		{name: "RedisTwoReplicas", redis: true, replicas: 2},
	}
	for _, v := range variants {
		v.start(t)
	}
	var wg sync.WaitGroup
	for _, v := range variants {
		wg.Go(func() { v.drive(run) })
	}
	wg.Wait()

	rate := float64(keyRate) / 60
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, err := range v.errs {
				t.Error(err)
			}
			got := float64(v.admitted) / v.elapsed.Seconds()
			// Since the burst was taken; the bucket counts on Redis's
			// clock, the run on this process's: a millisecond between
			// them is 1.7 requests.
			allowed := rate*v.sinceEmpty.Seconds() + 2
			t.Logf("%d turns admitted in %s: %.0f a second, %.3f of the key's %.0f; the bucket allows %.0f",
				v.admitted, v.elapsed.Round(time.Millisecond), got, got/rate, rate, allowed)
			if float64(v.admitted) > allowed {
				t.Errorf("admitted %d turns, more than the bucket allows (%.0f)", v.admitted, allowed)
			}
			if got < 0.95*rate {
				t.Errorf("admitted %.0f a second, under 0.95 of the key's %.0f; a second at a time: %v", got, rate, v.perSecond)
			}
		})
	}
}

// rateRun is one variant of TestKeyAdmitsItsRate.
type rateRun struct {
	name     string
	redis    bool
	replicas int

	k       Key
	scheds  []*Scheduler
	clients []goredis.UniversalClient // each replica's, on Redis

	emptied    time.Time // before the burst was taken
	admitted   int64
	elapsed    time.Duration // of the clients' run
	sinceEmpty time.Duration // from emptied to the run's end
	perSecond  []int64
	errs       []error
}

// start makes the variant's schedulers, each with its own client when
// the buckets are in Redis, as replicas have.
func (v *rateRun) start(t *testing.T) {
	v.k = Key{ID: "p/rate", Limits: Limits{RPM: keyRate, InputTPM: 1_000_000_000, OutputTPM: 1_000_000_000}}
	var url string
	if v.redis {
		url = redistest.StartServer(t).URL
	}
	for range v.replicas {
		var b Buckets = NewMemory(nil)
		if v.redis {
			opt, err := goredis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			c := goredis.NewClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			v.clients = append(v.clients, c)
			b = NewRedis(c, "rate:")
		}
		s := New(Options{Buckets: b, MaxWait: time.Minute, Slices: true, Observer: newRecorder()})
		t.Cleanup(s.Close)
		v.scheds = append(v.scheds, s)
	}
}

// drive takes the key's burst, runs 64 clients for run, then closes the
// schedulers.
func (v *rateRun) drive(run time.Duration) {
	v.emptied = time.Now()
	ok, _, err := v.scheds[0].buckets.Take(context.Background(), v.k, Cost{Requests: int(DefaultBurst(keyRate))})
	if err != nil || !ok {
		v.errs = append(v.errs, fmt.Errorf("taking the key's burst: admitted %t, %v", ok, err))
		return
	}
	var admitted atomic.Int64
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n := admitted.Load()
			v.perSecond = append(v.perSecond, n-last)
			last = n
		}
	})
	for c := range 64 {
		i := c % v.replicas
		var rdb goredis.UniversalClient
		if v.redis {
			rdb = v.clients[i]
		}
		wg.Go(func() {
			if err := rateClient(ctx, v.scheds[i], rdb, v.k, &admitted); err != nil {
				mu.Lock()
				v.errs = append(v.errs, fmt.Errorf("client %d: %w", c, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	v.elapsed = time.Since(start)
	v.sinceEmpty = time.Since(v.emptied)
	v.admitted = admitted.Load()
	for _, s := range v.scheds {
		s.Close()
	}
}

// rateClient runs turns on k through s until ctx ends, counting those
// admitted, as the proxy runs a thread's turns: each turn's take rides
// in one pipeline to rdb (nil on Memory) with the key settle of the turn
// before it, or Acquires when it cannot ride; a turn uses one request,
// its input, and less output than its estimate.
func rateClient(ctx context.Context, s *Scheduler, rdb goredis.UniversalClient, k Key, admitted *atomic.Int64) error {
	keys := []Key{k}
	est := Cost{Requests: 1, Input: 400, Output: 1024}
	used := Cost{Requests: 1, Input: 400, Output: 120}
	var prev *Grant
	for ctx.Err() == nil {
		rd := s.Ride(Standard, keys, est)
		var sr *SettleRide
		if prev != nil {
			sr = RideSettles([]Settlement{{Grant: prev, Actual: used}})
			prev = nil
		}
		// Sent whole, as a turn's admission is: its settles are spent
		// capacity whether or not the run goes on.
		pctx := context.WithoutCancel(ctx)
		if rdb != nil && (rd != nil || sr != nil) {
			p := rdb.Pipeline()
			Fuse(rd, sr).Queue(pctx, rdb, p)
			// Each command's error is read by Grant and Finish.
			_, _ = p.Exec(pctx)
		}
		sr.Finish(pctx)
		var g *Grant
		var err error
		if rd != nil {
			g, err = rd.Grant(ctx)
		} else {
			g, err = s.Acquire(ctx, Standard, keys, est)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		admitted.Add(1)
		if rdb == nil {
			g.Done(pctx, used)
			continue
		}
		prev = g
	}
	if prev != nil {
		prev.Done(context.WithoutCancel(ctx), used)
	}
	return nil
}
