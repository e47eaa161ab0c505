package keys

import (
	"log/slog"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/ratelimit"
)

// Observer receives the key scheduling's metrics besides the
// scheduler's own.
type Observer interface {
	ratelimit.Observer
	// RateLimited counts a request of a priority class answered
	// rate_limited after waiting for key capacity as long as it may.
	RateLimited(class string)
	// KeyRetried counts a request sent again on another key of provider
	// after the provider refused it on the first.
	KeyRetried(provider string)
}

// Options are what the scheduler is built from.
type Options struct {
	// Pools are every provider's pool.
	Pools []*Pool
	// Buckets holds the keys' capacity; in this process when nil.
	Buckets ratelimit.Buckets
	// StoreTimeout bounds each call to shared Buckets (store.timeout).
	StoreTimeout time.Duration
	// RateLimits is config's rate_limits.
	RateLimits config.RateLimits
	// Clock is the scheduler's; nil for time.Now.
	Clock func() time.Time
	// Logger gets the errors no caller can receive (a failed correction
	// after a call).
	Logger *slog.Logger
	// Observer receives metrics; nil for none.
	Observer Observer
}

// Scheduler is the rate-limit scheduler of the provider keys, with what
// a call's side of it needs: the buckets (for a cooled key's headroom),
// the metrics and the default output estimate.
type Scheduler struct {
	sched      *ratelimit.Scheduler
	buckets    ratelimit.Buckets
	obs        Observer
	defaultOut int64
}

// NewScheduler builds the scheduler when some pool has a limited key;
// nil otherwise, and calls then go straight to the provider.
func NewScheduler(o Options) *Scheduler {
	limited := false
	for _, p := range o.Pools {
		limited = limited || p.limited
	}
	if !limited {
		return nil
	}
	b := o.Buckets
	if b == nil {
		b = ratelimit.NewMemory(o.Clock)
	} else {
		b = deadline.Buckets(b, o.StoreTimeout)
	}
	ro := ratelimit.Options{Buckets: b, Weights: o.RateLimits.Weights, MaxWait: o.RateLimits.MaxWait.Std(), Clock: o.Clock, Logger: o.Logger,
		Slices: !o.RateLimits.ExactTakes}
	if o.Observer != nil {
		ro.Observer = o.Observer
	}
	return &Scheduler{sched: ratelimit.New(ro), buckets: b, obs: o.Observer, defaultOut: o.RateLimits.DefaultOutputTokens}
}

// Close stops the scheduler; a nil one has nothing to stop.
func (s *Scheduler) Close() {
	if s != nil {
		s.sched.Close()
	}
}

// Turn is a new call's use of pool's keys, in priority class class; s
// may be nil (no key has a limit).
func (s *Scheduler) Turn(pool *Pool, class string) *Turn {
	return &Turn{s: s, pool: pool, class: class}
}

// Unscheduled is a call's use of pool when it goes on no key of it (its
// agent's own credential): it waits for nothing, holds no grant and
// settles nothing.
func Unscheduled(pool *Pool) *Turn {
	return &Turn{pool: pool}
}

// rateLimited counts a call of class answered rate_limited.
func (s *Scheduler) rateLimited(class string) {
	if s.obs != nil {
		s.obs.RateLimited(class)
	}
}
