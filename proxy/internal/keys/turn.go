package keys

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// HeaderQueueWait tells the agent (and operators reading its logs) how
// long a call waited for provider key capacity.
const HeaderQueueWait = "X-Gatekeeper-Queue-Wait-Ms"

// Refusal is the answer to a call that got no key capacity: a 429 after
// waiting as long as it may, or a 503 when the shared buckets could not
// be read. The caller puts it in the agent's error form.
type Refusal struct {
	Status     int // http.StatusTooManyRequests or http.StatusServiceUnavailable
	RetryAfter time.Duration
	Msg        string // for the agent
	Err        error  // the scheduler's, for the logs
}

func (r *Refusal) Error() string { return fmt.Sprintf("%d: %s: %v", r.Status, r.Msg, r.Err) }
func (r *Refusal) Unwrap() error { return r.Err }

// Turn is one call's use of its provider's keys: the take that rides in
// its admission's round trip, the grant it goes on, and the provider's
// reply headers for the grant's settle. A Turn of a nil Scheduler, or of
// a pool without limits, holds no grant and its calls go straight to the
// provider.
type Turn struct {
	s     *Scheduler
	pool  *Pool
	class string

	ride   *ratelimit.Ride                 // the key take riding in the admission's round trip (Ride)
	grant  atomic.Pointer[ratelimit.Grant] // the key the call goes on; nil when its pool has no limits
	header atomic.Pointer[http.Header]     // the provider's reply headers, for the grant
}

func (t *Turn) scheduled() bool { return t.s != nil && t.pool.limited }

// estimate is what a call is expected to cost its key: one request, its
// body's input tokens, and its output limit maxOut (rate_limits'
// default_output_tokens when it has none); Settle corrects it.
func (t *Turn) estimate(input, maxOut int64) ratelimit.Cost {
	if maxOut <= 0 && t.s != nil {
		maxOut = t.s.defaultOut
	}
	return ratelimit.Cost{Requests: 1, Input: input, Output: maxOut}
}

// Ride prepares the call's key take to ride in its admission's update
// (one round trip to Redis for both, rather than one each), when its
// pool's keys are limited and the buckets are in Redis; Riding stays nil
// otherwise. Its estimate is the one known before admission: the input
// tokens of the agent's body before shaping, and its output limit maxOut
// before the budget's clamp; the settle corrects it as it corrects any
// estimate.
func (t *Turn) Ride(input, maxOut int64) {
	if !t.scheduled() {
		return
	}
	t.ride = t.s.sched.Ride(t.class, t.pool.keys, t.estimate(input, maxOut))
}

// Riding is the take prepared by Ride and not used or dropped yet; nil
// when none.
func (t *Turn) Riding() *ratelimit.Ride { return t.ride }

// DropRide gives back a take that rode with an admission that refused the
// call, or that the call will not use: a refusal consumes no rate.
func (t *Turn) DropRide(ctx context.Context) {
	if rd := t.ride; rd != nil {
		t.ride = nil
		rd.Undo(context.WithoutCancel(ctx))
	}
}

// Acquire waits, in the call's priority class, until a key of the pool
// has room for the call's estimate (its input tokens and its output
// limit maxOut), and holds the grant. It is a no-op for pools whose
// keys have no limits. The error is a *Refusal or the context's. The time
// waited goes in h (the agent's response headers) when h is not nil.
//
// A take that rode in the admission's round trip (Ride) is its grant when
// it found room; when it did not, the call waits in its class as any
// call does.
func (t *Turn) Acquire(ctx context.Context, input, maxOut int64, h http.Header) error {
	if !t.scheduled() {
		return nil
	}
	var g *ratelimit.Grant
	var err error
	if rd := t.ride; rd != nil {
		t.ride = nil
		g, err = rd.Grant(ctx)
	} else {
		g, err = t.s.sched.Acquire(ctx, t.class, t.pool.keys, t.estimate(input, maxOut))
	}
	var we *ratelimit.WaitError
	switch {
	case err == nil:
		t.grant.Store(g)
		if g.Waited > 0 && h != nil {
			h.Set(HeaderQueueWait, strconv.FormatInt(g.Waited.Milliseconds(), 10))
		}
		return nil
	case errors.As(err, &we):
		t.s.rateLimited(t.class)
		if h != nil {
			h.Set(HeaderQueueWait, strconv.FormatInt(we.Waited.Milliseconds(), 10))
		}
		return &Refusal{Status: http.StatusTooManyRequests, RetryAfter: max(we.RetryAfter, time.Second),
			Msg: fmt.Sprintf("provider %s has no key capacity for this %s request after waiting %s; retry after the Retry-After delay",
				t.pool.provider, we.Class, we.Waited.Round(time.Millisecond)), Err: err}
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return t.unreadable(err)
}

// AcquireOne is Acquire for a request that is not a model call (a
// pass-through request): one request, no tokens, nothing waited told.
func (t *Turn) AcquireOne(ctx context.Context) error {
	if !t.scheduled() {
		return nil
	}
	g, err := t.s.sched.Acquire(ctx, t.class, t.pool.keys, ratelimit.Cost{Requests: 1})
	var we *ratelimit.WaitError
	switch {
	case err == nil:
		t.grant.Store(g)
		return nil
	case errors.As(err, &we):
		t.s.rateLimited(t.class)
		return &Refusal{Status: http.StatusTooManyRequests, RetryAfter: max(we.RetryAfter, time.Second),
			Msg: fmt.Sprintf("provider %s has no key capacity for this request; retry after the Retry-After delay", t.pool.provider), Err: err}
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return t.unreadable(err)
}

// unreadable is the answer when the shared buckets could not be read
// (Redis down): the call is not sent rather than sent past the limits.
func (t *Turn) unreadable(err error) error {
	return &Refusal{Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second,
		Msg: "gatekeeper could not check provider " + t.pool.provider + "'s rate limits; retry later", Err: err}
}

// Grant is the key the call goes on; nil when it goes on no limited key.
func (t *Turn) Grant() *ratelimit.Grant { return t.grant.Load() }

// Key is the provider key the call goes on: its grant's, or the pool's
// next in turn when it has none.
func (t *Turn) Key() string {
	if g := t.grant.Load(); g != nil {
		return t.pool.secrets[g.Key.ID]
	}
	return t.pool.Pick()
}

// KeepHeader keeps the provider's reply headers for the grant's settle.
func (t *Turn) KeepHeader(h http.Header) { t.header.Store(&h) }

// Used is what a call used of its key: input and cache writes count
// toward the providers' input limits, cache reads do not. A call the
// provider refused or never answered (refused) made one request.
func Used(refused bool, u trajectory.Usage) ratelimit.Cost {
	c := ratelimit.Cost{Requests: 1}
	if !refused {
		c.Input = u.InputTokens + u.CacheWriteTokens
		c.Output = u.OutputTokens
	}
	return c
}

// Settle corrects the grant's estimate with what the call used.
func (t *Turn) Settle(ctx context.Context, used ratelimit.Cost) {
	if st := t.Settlement(used); st.Grant != nil {
		st.Grant.Settle(ctx, st.Actual, st.Header)
	}
}

// Settlement is what Settle sends; its Grant is nil when the call went
// on no limited key.
func (t *Turn) Settlement(used ratelimit.Cost) ratelimit.Settlement {
	g := t.grant.Load()
	if g == nil {
		return ratelimit.Settlement{}
	}
	// The provider's rate-limit headers already count this call as the
	// provider measured it. Read before the correction, they would lower
	// the key's level to what the provider reports and the correction
	// would then take the call's usage a second time; read after it, they
	// only lower what gatekeeper's own accounting leaves. Settle does both
	// in that order, in one call to the buckets.
	var h http.Header
	if p := t.header.Load(); p != nil {
		h = *p
	}
	return ratelimit.Settlement{Grant: g, Actual: used, Header: h}
}

// Leave is Settlement for a settle that rides in another update (one
// round trip for many, rather than a flush's): the grant leaves the
// call, so that a later Settle sends nothing again. Its Grant is nil when
// the call went on no limited key or its grant left already.
func (t *Turn) Leave(used ratelimit.Cost) ratelimit.Settlement {
	st := t.Settlement(used)
	if st.Grant == nil || !t.grant.CompareAndSwap(st.Grant, nil) {
		return ratelimit.Settlement{}
	}
	return st
}
