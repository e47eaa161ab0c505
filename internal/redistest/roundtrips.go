package redistest

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts round trips to the server:
// one per command sent alone and one per pipeline (a script call is a
// command). Add it with Client.AddHook.
type RoundTrips struct{ n atomic.Int64 }

// Load returns the round trips counted so far.
func (c *RoundTrips) Load() int64 { return c.n.Load() }

// DialHook implements goredis.Hook.
func (c *RoundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (c *RoundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (c *RoundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
