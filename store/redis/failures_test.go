package redis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
)

// TestCountFailures: answers, absent keys and error replies that are
// answers are not failures; a command or pipeline that cannot reach Redis,
// or whose deadline passes first, is one each.
func TestCountFailures(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n atomic.Int64
	CountFailures(c, func() { n.Add(1) })
	ctx := context.Background()

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, "absent").Err()                                            // redis.Nil
	_ = c.EvalSha(ctx, "0123456789012345678901234567890123456789", nil).Err() // NOSCRIPT
	_ = c.LPush(ctx, "k", "x").Err()                                          // WRONGTYPE: an answer
	pipe := c.Pipeline()
	pipe.Get(ctx, "k")
	pipe.Get(ctx, "absent")
	_, _ = pipe.Exec(ctx)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = c.Get(cctx, "k").Err() // the caller went away
	if got := n.Load(); got != 0 {
		t.Fatalf("%d failures counted while Redis answered every command", got)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Get(tctx, "k").Err(); err == nil {
		t.Fatal("GET answered by a stopped server")
	}
	pipe = c.Pipeline()
	pipe.Get(tctx, "k")
	_, _ = pipe.Exec(tctx)
	if got := n.Load(); got != 2 {
		t.Errorf("%d failures counted for a command and a pipeline to a stopped server, want 2", got)
	}
}
