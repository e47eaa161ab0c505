package redis

import (
	"context"
	"sync/atomic"
	"time"
)

// redisClock is what this process knows of Redis's clock: how far ahead
// of its own it has been seen, in ms. A record update carries its
// caller's deadline in Redis's clock, and Redis refuses an update it
// reads past it (chainScript): a caller that gave up has answered its
// request already, and what the update would save, a reservation above
// all, must not appear afterwards. Only a clock seen ahead matters: one
// behind only makes that refusal come later.
type redisClock struct {
	ahead atomic.Int64
}

// notAfter is ctx's deadline in Redis's clock, in ms since the epoch: 0
// when ctx has none.
func (c *redisClock) notAfter(ctx context.Context) int64 {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return dl.UnixMilli() + c.ahead.Load()
}

// saw learns from an update refused as late while its caller still waited
// that Redis's clock read redisMs: at least that far ahead of this one.
func (c *redisClock) saw(redisMs int64) {
	d := redisMs - time.Now().UnixMilli() + 1
	for {
		cur := c.ahead.Load()
		if d <= cur || c.ahead.CompareAndSwap(cur, d) {
			return
		}
	}
}
