package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// pipesClient is a client of a fresh redis-server with a round-trip
// counter, and shared pipes on it.
func pipesClient(t *testing.T) (*goredis.Client, *sharedPipes, *counter) {
	t.Helper()
	opts, err := goredis.ParseURL(redistest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	n := &counter{}
	c.AddHook(n)
	return c, &sharedPipes{rdb: c}, n
}

// TestSharedPipesShareRoundTrips: callers that send at once share round
// trips, and each gets its own replies.
func TestSharedPipesShareRoundTrips(t *testing.T) {
	c, p, n := pipesClient(t)
	ctx := context.Background()
	const callers, each = 64, 20
	before := n.Load()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "pipes:" + strconv.Itoa(w)
			for i := 1; i <= each; i++ {
				b := c.Pipeline()
				incr := b.IncrBy(ctx, key, 2)
				get := b.Get(ctx, key)
				if err := p.exec(ctx, b.Cmds()); err != nil {
					errs <- err
					return
				}
				if incr.Val() != int64(2*i) || get.Val() != strconv.Itoa(2*i) {
					errs <- errors.New(key + ": replies of another caller, or none: " + incr.String() + ", " + get.String())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sent := n.Load() - before
	t.Logf("%d sends of %d callers in %d round trips", callers*each, callers, sent)
	if sent < 1 || sent >= callers*each {
		t.Fatalf("%d sends made %d round trips: none shared", callers*each, sent)
	}
}

// TestSharedPipesLeaveUnsent: a caller whose context ends while a
// pipeline ahead of it is out gets its context's error at once, and its
// commands never reach Redis; a caller whose commands went out gets their
// replies, even when its context ends first.
func TestSharedPipesLeaveUnsent(t *testing.T) {
	c, p, _ := pipesClient(t)
	ctx := context.Background()

	// The pipeline ahead: a BLPOP that holds the connection for 1 s, its
	// caller's context ending at once (its replies are waited for).
	aheadCtx, cancelAhead := context.WithCancel(ctx)
	b := c.Pipeline()
	pop := b.BLPop(ctx, time.Second, "pipes:empty")
	aheadDone := make(chan error, 1)
	go func() { aheadDone <- p.exec(aheadCtx, b.Cmds()) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		out := p.sending && len(p.queue) == 0
		p.mu.Unlock()
		if out || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // taken and sent
	cancelAhead()

	// Canceled, not past a deadline: a pipeline's own deadline would not
	// keep its commands from Redis.
	behindCtx, cancelBehind := context.WithCancel(ctx)
	defer cancelBehind()
	time.AfterFunc(100*time.Millisecond, cancelBehind)
	b = c.Pipeline()
	incr := b.Incr(ctx, "pipes:unsent")
	start := time.Now()
	err := p.exec(behindCtx, b.Cmds())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("queued behind a busy pipeline until canceled: %v, want the context's error", err)
	}
	if waited := time.Since(start); waited > 900*time.Millisecond {
		t.Fatalf("left after %s: it waited for the pipeline ahead", waited)
	}

	if err := <-aheadDone; err != nil {
		t.Fatalf("a caller whose commands went out: %v, want their replies", err)
	}
	if !errors.Is(pop.Err(), goredis.Nil) {
		t.Fatalf("BLPOP on an empty list: %v, want its timeout (redis: nil)", pop.Err())
	}
	// The next pipeline runs, and the command left behind is not in it.
	b = c.Pipeline()
	get := b.Get(ctx, "pipes:unsent")
	if err := p.exec(ctx, b.Cmds()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(incr.Err(), context.Canceled) {
		t.Fatalf("the left command's error: %v, want the context's", incr.Err())
	}
	if !errors.Is(get.Err(), goredis.Nil) || incr.Val() != 0 {
		t.Fatalf("the left command reached Redis: GET %v, INCR %v", get, incr)
	}
}

// TestSharedPipesErrorsAreEachCommands: one command's error reply stays
// its own.
func TestSharedPipesErrorsAreEachCommands(t *testing.T) {
	c, p, _ := pipesClient(t)
	ctx := context.Background()
	b := c.Pipeline()
	bad := b.Do(ctx, "NOSUCHCOMMAND")
	set := b.Set(ctx, "pipes:k", "v", 0)
	if err := p.exec(ctx, b.Cmds()); err != nil {
		t.Fatal(err)
	}
	if bad.Err() == nil || set.Err() != nil || set.Val() != "OK" {
		t.Fatalf("error reply %v, set %v: want the error on its command only", bad.Err(), set)
	}
}
