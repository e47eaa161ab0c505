package redistest

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts round trips to the server:
// one per command sent alone and one per pipeline (a script call is a
// command). Add it with Client.AddHook. A new connection's handshake
// (HELLO, then CLIENT SETINFO and the like) is not counted: it is paid
// once per pooled connection, not per operation, and a count pinned in a
// test must not depend on whether the pool had an idle connection.
type RoundTrips struct{ n atomic.Int64 }

// Load returns the round trips counted so far.
func (c *RoundTrips) Load() int64 { return c.n.Load() }

// DialHook implements goredis.Hook.
func (c *RoundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (c *RoundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !handshake(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (c *RoundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(cmd goredis.Cmder) bool { return !handshake(cmd) }) {
			return next(ctx, cmds)
		}
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// handshake reports a command go-redis sends as it opens a connection.
func handshake(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "hello":
		return true
	case "client":
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		sub, _ := args[1].(string)
		return strings.EqualFold(sub, "setinfo") || strings.EqualFold(sub, "maint_notifications")
	}
	return false
}
