package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReplicasShareOneBudget runs two Schedulers, as two replicas would, on
// one Redis: together they must admit no more than the key's rpm allows,
// and not much less.
func TestReplicasShareOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3s run")
	}
	c := newRedisClient(t)
	k := Key{ID: "p/shared", Limits: minute(Limits{RPM: 6000})}
	const perSecond = 6000 / 60

	// Empty the bucket so that the window measures the refill alone.
	r0 := NewRedis(c, "gk:")
	if ok, _ := mustTake(t, r0, k, Cost{Requests: 6000}); !ok {
		t.Fatal("could not empty the bucket")
	}
	start := time.Now()

	var admitted atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		s := New(Options{Buckets: NewRedis(c, "gk:"), MaxWait: time.Minute})
		defer s.Close()
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					g, err := s.Acquire(ctx, Standard, []Key{k}, Cost{Requests: 1})
					if err != nil {
						if ctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					admitted.Add(1)
					g.Done(context.WithoutCancel(ctx), Cost{Requests: 1})
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	got := admitted.Load()
	want := elapsed.Seconds() * perSecond
	t.Logf("%d admitted in %s by two replicas; the key allows %.0f", got, elapsed.Round(time.Millisecond), want)
	if float64(got) > want*1.05+1 {
		t.Fatalf("two replicas admitted %d, over the key's %.0f by more than 5%%", got, want)
	}
	if float64(got) < want*0.95 {
		t.Fatalf("two replicas admitted %d, under the key's %.0f by more than 5%%", got, want)
	}
}
