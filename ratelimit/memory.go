package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The three dimensions of a key's capacity, as indexes of the arrays
// below.
const (
	dimRequests = iota
	dimInput
	dimOutput
	dims
)

// perMinute is a key's limit in each dimension; 0 is unlimited.
func perMinute(l Limits) [dims]int64 {
	return [dims]int64{int64(max(l.RPM, 0)), max(l.InputTPM, 0), max(l.OutputTPM, 0)}
}

// amounts is c in each dimension.
func amounts(c Cost) [dims]int64 {
	return [dims]int64{int64(c.Requests), c.Input, c.Output}
}

// reported is what r says is left in each dimension, -1 where it says
// nothing. A combined token count caps input and output alike.
func reported(r Remaining) [dims]int64 {
	lowest := func(a, b int64) int64 {
		switch {
		case a < 0:
			return b
		case b < 0:
			return a
		}
		return min(a, b)
	}
	return [dims]int64{r.Requests, lowest(r.Input, r.Tokens), lowest(r.Output, r.Tokens)}
}

// Memory keeps keys' capacity in this process: per key and dimension a
// token bucket (rate.Limiter) holding the per-minute limit and refilling
// at limit/60 per second. Replicas each with a Memory would each spend the
// whole budget: use Redis when there is more than one.
//
// A cost larger than a dimension's burst (the whole per-minute limit) is
// admitted once the bucket is full, and then drives the bucket below zero
// by the excess, so that the turns after it wait for what it overdrew: it
// never waits forever, and the accounting stays honest.
type Memory struct {
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*memKey
}

var _ Buckets = (*Memory)(nil)

// memKey is one key's buckets.
type memKey struct {
	limits      Limits
	buckets     [dims]*rate.Limiter // nil where unlimited
	cooledUntil time.Time
}

// NewMemory returns buckets kept in this process, on clock (nil means
// time.Now).
func NewMemory(clock func() time.Time) *Memory {
	if clock == nil {
		clock = time.Now
	}
	return &Memory{now: clock, keys: make(map[string]*memKey)}
}

// key returns k's buckets, made full on first use and brought to k's
// current limits (configuration reloads change them). m.mu is held.
func (m *Memory) key(k Key, now time.Time) *memKey {
	st, ok := m.keys[k.ID]
	if !ok {
		st = &memKey{}
		m.keys[k.ID] = st
	} else if st.limits == k.Limits {
		return st
	}
	st.limits = k.Limits
	for d, lim := range perMinute(k.Limits) {
		b := st.buckets[d]
		switch {
		case lim == 0:
			st.buckets[d] = nil
		case b == nil:
			st.buckets[d] = rate.NewLimiter(rate.Limit(float64(lim)/60), burst(lim))
		default:
			b.SetLimitAt(now, rate.Limit(float64(lim)/60))
			b.SetBurstAt(now, burst(lim))
		}
	}
	return st
}

func burst(perMinute int64) int { return int(min(perMinute, math.MaxInt32)) }

// Take implements Buckets.
func (m *Memory) Take(ctx context.Context, k Key, c Cost) (bool, time.Duration, error) {
	ok, wait, _ := m.take(k, c)
	return ok, wait, nil
}

// takeHeadroom is Take and then Headroom in one step.
func (m *Memory) takeHeadroom(ctx context.Context, k Key, c Cost) (bool, time.Duration, float64, error) {
	ok, wait, h := m.take(k, c)
	return ok, wait, h, nil
}

func (m *Memory) take(k Key, c Cost) (bool, time.Duration, float64) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.key(k, now)
	if now.Before(st.cooledUntil) {
		return false, clampWait(st.cooledUntil.Sub(now)), 0
	}
	// Check every dimension before taking from any: a take is all or
	// nothing.
	want := amounts(c)
	var wait time.Duration
	for d, b := range st.buckets {
		if b == nil || want[d] <= 0 {
			continue
		}
		need := float64(min(want[d], int64(b.Burst())))
		if have := b.TokensAt(now); have < need {
			wait = max(wait, time.Duration((need-have)/float64(b.Limit())*float64(time.Second)))
		}
	}
	if wait > 0 {
		return false, clampWait(wait), st.headroom(now)
	}
	for d, b := range st.buckets {
		if b != nil {
			spend(b, now, want[d])
		}
	}
	return true, 0, st.headroom(now)
}

// spend takes n tokens from b, or gives -n back when n < 0. A take may
// leave b below zero; a give-back is capped at full.
func spend(b *rate.Limiter, now time.Time, n int64) {
	if n < 0 {
		// rate.Limiter has no give-back; ReserveN of a negative count
		// adds tokens. Give no more than the room below full, so that
		// the bucket never holds more than its burst.
		give := int64(b.Burst()) - int64(math.Floor(b.TokensAt(now)))
		b.ReserveN(now, -int(min(-n, max(give, 0))))
		return
	}
	// ReserveN refuses more than the burst at once, but lets the bucket
	// go negative: take an oversized cost a burst at a time.
	for n > 0 {
		chunk := min(n, int64(b.Burst()))
		b.ReserveN(now, int(chunk))
		n -= chunk
	}
}

// headroom is the fraction left in st's tightest limited dimension; 0
// while st is cooled. m.mu is held.
func (st *memKey) headroom(now time.Time) float64 {
	if now.Before(st.cooledUntil) {
		return 0
	}
	h := 1.0
	for _, b := range st.buckets {
		if b != nil {
			h = min(h, b.TokensAt(now)/float64(b.Burst()))
		}
	}
	return max(h, 0)
}

// adjust moves st's buckets by delta. m.mu is held.
func (st *memKey) adjust(now time.Time, delta Cost) {
	n := amounts(delta)
	for d, b := range st.buckets {
		if b != nil && n[d] != 0 {
			spend(b, now, n[d])
		}
	}
}

// Headroom implements Buckets.
func (m *Memory) Headroom(ctx context.Context, k Key) (float64, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.key(k, now).headroom(now), nil
}

// Cool implements Buckets. A shorter cooling than one in force does not
// shorten it.
func (m *Memory) Cool(ctx context.Context, k Key, d time.Duration) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.key(k, now)
	if until := now.Add(d); until.After(st.cooledUntil) {
		st.cooledUntil = until
	}
	return nil
}

// sync lowers st's buckets to what r reports. m.mu is held.
func (st *memKey) sync(now time.Time, r Remaining) {
	left := reported(r)
	for d, b := range st.buckets {
		if b == nil || left[d] < 0 {
			continue
		}
		if over := b.TokensAt(now) - float64(left[d]); over > 0 {
			spend(b, now, int64(math.Ceil(over)))
		}
	}
}

// Settle implements Buckets: the correction and the sync under one hold
// of the mutex, so that no Take sees the key between them.
func (m *Memory) Settle(ctx context.Context, k Key, delta Cost, r Remaining) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.key(k, now)
	st.adjust(now, delta)
	st.sync(now, r)
	return nil
}
