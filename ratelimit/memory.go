package ratelimit

import (
	"cmp"
	"context"
	"math"
	"sync"
	"time"
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

// bursts is what a key's bucket holds in each dimension: the configured
// burst, else DefaultBurst; 0 where unlimited.
func bursts(l Limits) [dims]int64 {
	lim := perMinute(l)
	set := [dims]int64{int64(max(l.RPMBurst, 0)), max(l.InputBurst, 0), max(l.OutputBurst, 0)}
	var out [dims]int64
	for d := range out {
		if lim[d] > 0 {
			out[d] = cmp.Or(set[d], DefaultBurst(lim[d]))
		}
	}
	return out
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

// maxReset bounds a reset header's effect: a per-minute bucket is full
// again within a minute of its rate, so a longer reset (an odd header, or
// a daily limit's) would only keep a key idle for nothing that gatekeeper
// schedules.
const maxReset = time.Minute

// resets is how long r says each dimension needs to be full again, -1
// where it says nothing, at most maxReset. A combined token reset covers
// input and output alike: the longer reset wins, as it lowers more.
func resets(r Remaining) [dims]time.Duration {
	out := [dims]time.Duration{r.RequestsReset, max(r.InputReset, r.TokensReset), max(r.OutputReset, r.TokensReset)}
	for d, v := range out {
		out[d] = min(max(v, -1), maxReset)
	}
	return out
}

// Memory keeps keys' capacity in this process: per key and dimension a
// GCRA bucket, the same algorithm the Redis scripts run (see gcra).
// Replicas each with a Memory would each spend the whole budget: use Redis
// when there is more than one.
type Memory struct {
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*memKey
}

var _ Buckets = (*Memory)(nil)

// memKey is one key's buckets.
type memKey struct {
	key         Key
	buckets     [dims]*gcra // nil where unlimited
	cooledUntil time.Time
}

// gcra is one dimension's bucket as a theoretical arrival time: the
// bucket emits a unit every interval and holds burst of them, so it is
// full while tat is not after now, and holds burst - (tat-now)/interval
// otherwise (below zero after an oversized take). The arrival time keeps
// the fraction of a nanosecond that a Time cannot (frac): at a trillion
// tokens a minute a token is 0.06 ns, and a take rounded to whole
// nanoseconds would be lost, as the Redis scripts keep theirs.
type gcra struct {
	tat      time.Time
	frac     float64 // of a nanosecond, in [0, 1): tat's remainder
	interval float64 // nanoseconds per unit
	burst    int64
	limit    int64 // per minute
}

func newGCRA(limit, burst int64) *gcra {
	return &gcra{interval: float64(time.Minute) / float64(limit), burst: burst, limit: limit}
}

// ahead is how far tat is after now, in nanoseconds.
func (g *gcra) ahead(now time.Time) float64 { return max(float64(g.tat.Sub(now))+g.frac, 0) }

// level is what g holds at now.
func (g *gcra) level(now time.Time) float64 { return float64(g.burst) - g.ahead(now)/g.interval }

// wait is how long until g holds n, or a full bucket when n is more than
// it holds at all; 0 when it does now.
func (g *gcra) wait(now time.Time, n int64) time.Duration {
	need := float64(min(n, g.burst))
	return time.Duration(math.Ceil(g.ahead(now) - (float64(g.burst)-need)*g.interval))
}

// move takes n units (n < 0 gives them back, never above full).
func (g *gcra) move(now time.Time, n float64) {
	// Bounded so that no count, however odd, overflows a Duration: a
	// century ahead is as refused as any later time.
	g.setAhead(now, min(g.ahead(now)+n*g.interval, float64(100*365*24*time.Hour)))
}

// setAhead puts tat ahead nanoseconds after now (a full bucket when not
// positive), its fraction of a nanosecond in frac.
func (g *gcra) setAhead(now time.Time, ahead float64) {
	if ahead <= 0 {
		g.tat, g.frac = now, 0
		return
	}
	whole := math.Floor(ahead)
	g.tat, g.frac = now.Add(time.Duration(whole)), ahead-whole
}

// lowerTo moves tat so that g holds at most left, never raising it.
func (g *gcra) lowerTo(now time.Time, left float64) {
	if over := g.level(now) - left; over > 0 {
		g.move(now, over)
	}
}

// capDebt keeps an advisory bucket's debt (what it holds below empty)
// within a minute of its rate:
// what it overdrew only lowers its headroom, and a key that absorbed a
// flood is ranked again once a minute has passed.
func (g *gcra) capDebt(now time.Time) {
	if limit := float64(g.burst)*g.interval + float64(time.Minute); g.ahead(now) > limit {
		g.setAhead(now, limit)
	}
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
// current limits (configuration reloads change them): a dimension keeps
// its theoretical arrival time, as the Redis scripts do. m.mu is held.
func (m *Memory) key(k Key) *memKey {
	st, ok := m.keys[k.ID]
	if !ok {
		st = &memKey{}
		m.keys[k.ID] = st
	} else if st.key == k {
		return st
	}
	st.key = k
	lim, burst := perMinute(k.Limits), bursts(k.Limits)
	for d := range st.buckets {
		b := st.buckets[d]
		switch {
		case lim[d] == 0:
			st.buckets[d] = nil
		case b == nil:
			st.buckets[d] = newGCRA(lim[d], burst[d])
		default:
			nb := newGCRA(lim[d], burst[d])
			nb.tat, nb.frac = b.tat, b.frac
			st.buckets[d] = nb
		}
	}
	return st
}

// Take implements Buckets.
func (m *Memory) Take(ctx context.Context, k Key, c Cost) (bool, time.Duration, error) {
	n, wait, _, err := m.TakeBatch(ctx, k, []Cost{c})
	return n == 1, wait, err
}

var _ BatchTaker = (*Memory)(nil)

// TakeBatch implements BatchTaker under one hold of the mutex.
func (m *Memory) TakeBatch(ctx context.Context, k Key, cs []Cost) (int, time.Duration, float64, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.key(k)
	for i, c := range cs {
		if wait := st.take(now, c); wait > 0 {
			return i, clampWait(wait), st.headroom(now), nil
		}
	}
	return len(cs), 0, st.headroom(now), nil
}

// take takes c from st if every dimension has room for it, and returns
// 0; otherwise it takes nothing and returns how long until c would fit.
// m.mu is held.
func (st *memKey) take(now time.Time, c Cost) time.Duration {
	if now.Before(st.cooledUntil) {
		return st.cooledUntil.Sub(now)
	}
	// Check every dimension before taking from any: a take is all or
	// nothing. An advisory key never waits.
	want := amounts(c)
	var wait time.Duration
	for d, b := range st.buckets {
		if b != nil && want[d] > 0 && !st.key.Advisory {
			wait = max(wait, b.wait(now, want[d]))
		}
	}
	if wait > 0 {
		return wait
	}
	for d, b := range st.buckets {
		if b != nil && want[d] > 0 {
			b.move(now, float64(want[d]))
			if st.key.Advisory {
				b.capDebt(now)
			}
		}
	}
	return 0
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
			h = min(h, b.level(now)/float64(b.burst))
		}
	}
	return max(h, 0)
}

// adjust moves st's buckets by delta. m.mu is held.
func (st *memKey) adjust(now time.Time, delta Cost) {
	n := amounts(delta)
	for d, b := range st.buckets {
		if b != nil && n[d] != 0 {
			b.move(now, float64(n[d]))
			if st.key.Advisory {
				b.capDebt(now)
			}
		}
	}
}

// Headroom implements Buckets.
func (m *Memory) Headroom(ctx context.Context, k Key) (float64, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.key(k).headroom(now), nil
}

// Cool implements Buckets. A shorter cooling than one in force does not
// shorten it.
func (m *Memory) Cool(ctx context.Context, k Key, d time.Duration) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.key(k)
	if until := now.Add(d); until.After(st.cooledUntil) {
		st.cooledUntil = until
	}
	return nil
}

// sync lowers st's buckets to what r reports is left and, where r reports
// nothing left (or no count), to what a bucket full only after r's reset
// holds. m.mu is held.
func (st *memKey) sync(now time.Time, r Remaining) {
	left, reset := reported(r), resets(r)
	for d, b := range st.buckets {
		if b == nil {
			continue
		}
		if left[d] >= 0 {
			b.lowerTo(now, float64(left[d]))
		}
		if reset[d] >= 0 && left[d] <= 0 {
			b.lowerTo(now, float64(b.burst)-float64(reset[d])/b.interval)
		}
	}
}

// Settle implements Buckets: the correction and the sync under one hold
// of the mutex, so that no Take sees the key between them.
func (m *Memory) Settle(ctx context.Context, k Key, delta Cost, r Remaining) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.key(k)
	st.adjust(now, delta)
	st.sync(now, r)
	return nil
}
