package ratelimit

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// DefaultCool is how long Reject cools a key when the upstream gave no
// Retry-After.
const DefaultCool = time.Second

// Grant is a turn admitted on Key. Its methods are safe on a nil Grant,
// which does nothing.
type Grant struct {
	Key    Key
	Waited time.Duration

	s     *Scheduler
	class string
	est   Cost

	mu      sync.Mutex
	settled bool // Done, Reject or release ran: the estimate is corrected
}

// settle marks g settled and reports whether it was not already.
func (g *Grant) settle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.settled {
		return false
	}
	g.settled = true
	return true
}

// Done corrects the estimate with the measured cost, once; later calls do
// nothing. It is Settle of a reply without rate-limit headers. actual is taken as it is: a turn that made its request reports
// Requests 1, and Done(ctx, Cost{}) gives a take that was never used back
// whole. Call it with a context that outlives a client that went away
// (context.WithoutCancel): the tokens were spent all the same.
func (g *Grant) Done(ctx context.Context, actual Cost) {
	g.Settle(ctx, actual, nil)
}

// release gives the whole estimate back: the turn never ran.
func (g *Grant) release(ctx context.Context) {
	if !g.settle() {
		return
	}
	g.s.giveBack(ctx, g.Key, g.est, "a turn's take")
}

// Reject tells the scheduler the upstream refused the turn on this key
// (429/529/503 or no connection) before any byte went to the client. The
// key is cooled for retryAfter: DefaultCool when retryAfter is 0 (a 429 or
// 529 without Retry-After), not at all when it is negative (a 503 or a
// connection failure, which say nothing of the key). The turn's take is
// given back, and the returned Grant, if any, is another key of keys with
// room now (no waiting); nil when none. The error is that of the buckets
// while looking for another key; cooling and give-back errors are logged.
func (g *Grant) Reject(ctx context.Context, retryAfter time.Duration, keys []Key) (*Grant, error) {
	if g == nil {
		return nil, nil
	}
	if retryAfter == 0 {
		retryAfter = DefaultCool
	}
	if retryAfter > 0 {
		if err := g.s.buckets.Cool(ctx, g.Key, retryAfter); err != nil {
			g.s.log.ErrorContext(ctx, "ratelimit: cooling a key", "key", g.Key.ID, "err", err)
		}
		// A cooled key serves no turn from a slice.
		g.s.dropSlice(ctx, g.Key)
	}
	g.release(ctx)
	k, ok, _, err := g.s.pick(ctx, keys, g.est, g.Key.ID)
	if err != nil || !ok {
		return nil, err
	}
	return g.s.grant(k, g.class, g.est, g.Waited), nil
}

// Observe feeds the upstream reply's rate-limit headers to the key's
// buckets, which only ever lowers what they think is left.
func (g *Grant) Observe(ctx context.Context, h http.Header) {
	if g == nil {
		return
	}
	r, ok := ParseHeaders(h, g.s.now())
	if !ok || lowersNothing(g.Key, r) {
		return
	}
	// The key is no longer roomy: its slice goes back with the sync.
	if err := g.s.buckets.Settle(ctx, g.Key, g.s.surrender(g.Key).neg(), r); err != nil {
		g.s.log.ErrorContext(ctx, "ratelimit: syncing a key with its rate-limit headers", "key", g.Key.ID, "err", err)
	}
}

// Settle is Done and then Observe in one call to the buckets (one round
// trip with Redis): the estimate is corrected with actual, once, and then
// the key is lowered to what the reply's rate-limit headers h report (nil
// or none: no sync). The correction comes first because the headers
// already count this turn (see Buckets.Settle). A grant already settled
// only syncs, as Observe would. Call it with a context that outlives a
// client that went away, as Done.
func (g *Grant) Settle(ctx context.Context, actual Cost, h http.Header) {
	SettleAll(ctx, []Settlement{{Grant: g, Actual: actual, Header: h}})
}

// Settlement is one grant's Settle: the measured cost and the reply's
// rate-limit headers.
type Settlement struct {
	Grant  *Grant
	Actual Cost
	Header http.Header
}

// BatchSettler is Buckets that settle several keys in one call: Redis sends
// them in one pipelined round trip. SettleBatch returns each key's error.
type BatchSettler interface {
	SettleBatch(ctx context.Context, keys []Key, deltas []Cost, rs []Remaining) []error
}

// SettleAll is Settle of each settlement (a nil Grant does nothing), those
// of one scheduler on Redis in one round trip: a flush of settles written
// behind their replies costs one, not one each.
func SettleAll(ctx context.Context, ss []Settlement) {
	if sr := RideSettles(ss); sr != nil {
		sr.Finish(ctx)
	}
}
