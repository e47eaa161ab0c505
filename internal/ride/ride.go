package ride

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// Rider is commands waiting to ride in a pipeline.
type Rider interface {
	// Queue adds the rider's commands to p, which client sends; false
	// when the rider does not go through client (its state lives in
	// another Redis), and nothing was added. The caller reads the
	// commands' results after the pipeline ran.
	Queue(ctx context.Context, client any, p goredis.Pipeliner) bool
}

type slot struct {
	r    Rider
	used atomic.Bool
}

type ctxKey struct{}

// With returns ctx carrying r for the next pipeline sent on it.
func With(ctx context.Context, r Rider) context.Context {
	return context.WithValue(ctx, ctxKey{}, &slot{r: r})
}

// Take returns the rider ctx carries, once: later calls on ctx, or on a
// context derived from it, return nil, so that an operation retried on
// the same context sends its rider once.
func Take(ctx context.Context) Rider {
	s, _ := ctx.Value(ctxKey{}).(*slot)
	if s == nil || !s.used.CompareAndSwap(false, true) {
		return nil
	}
	return s.r
}
