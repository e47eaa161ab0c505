package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limits of one provider key per minute; 0 means unlimited in that
// dimension.
//
// A key's bucket in each dimension holds its burst and refills
// continuously at the per-minute rate. The providers enforce per-minute
// limits over shorter intervals (60 a minute may be enforced as one a
// second), so a bucket holding a whole minute would let a minute's worth
// reach the provider at once and be refused. The bursts are therefore
// one second of the rate by default (DefaultBurst), at least one unit. A
// cost larger than a burst (one large call) is still admitted, on a full
// bucket, which it then overdraws: the bucket holds at least one maximal
// call, so no call is impossible, and the turns after it wait for what it
// overdrew.
type Limits struct {
	RPM       int
	InputTPM  int64
	OutputTPM int64

	// RPMBurst, InputBurst and OutputBurst are what each bucket holds;
	// 0 is DefaultBurst of the limit.
	RPMBurst    int
	InputBurst  int64
	OutputBurst int64
}

// unlimited reports whether no dimension is limited.
func (l Limits) unlimited() bool { return l.RPM <= 0 && l.InputTPM <= 0 && l.OutputTPM <= 0 }

// DefaultBurst is what a bucket of perMinute holds unless configured: one
// second of the rate, rounded up, at least one.
func DefaultBurst(perMinute int64) int64 {
	if perMinute <= 0 {
		return 0
	}
	return max((perMinute+59)/60, 1)
}

// Cost of a turn in each dimension.
type Cost struct {
	Requests int
	Input    int64
	Output   int64
}

// Tokens is Input+Output: what the scheduler charges a turn in its
// round-robin.
func (c Cost) Tokens() int64 { return c.Input + c.Output }

// sub is c-d in every dimension.
func (c Cost) sub(d Cost) Cost {
	return Cost{Requests: c.Requests - d.Requests, Input: c.Input - d.Input, Output: c.Output - d.Output}
}

// add is c+d in every dimension.
func (c Cost) add(d Cost) Cost {
	return Cost{Requests: c.Requests + d.Requests, Input: c.Input + d.Input, Output: c.Output + d.Output}
}

// neg is -c in every dimension.
func (c Cost) neg() Cost { return Cost{}.sub(c) }

func (c Cost) zero() bool { return c == Cost{} }

// Key is one key of a pool. ID must be unique across pools: the proxy
// passes "provider/keyname". It is never the secret itself.
type Key struct {
	ID     string
	Limits Limits
	// Advisory marks Limits that are not the key's own: the scheduler
	// gives a key without limits, in a pool with limited keys, its pool's
	// largest limits to measure its headroom by (see Scheduler.Acquire).
	// A Take on it never waits; what it takes, the provider's headers
	// and a cooling lower its headroom as they do any key's.
	Advisory bool
}

// Buckets holds the shared state of keys' capacity. Memory (NewMemory)
// keeps it in this process, Redis (NewRedis) shares it between replicas.
type Buckets interface {
	// Take admits c on key k now if every dimension has room, and
	// returns ok; otherwise it takes nothing and returns how long until
	// c would fit (at least 1ms; at most MaxTakeWait, which is also what
	// a cost larger than the burst gets).
	Take(ctx context.Context, k Key, c Cost) (ok bool, wait time.Duration, err error)
	// Headroom is the fraction (0..1) left now in k's tightest limited
	// dimension; 1 when k has no limits. A cooled key has headroom 0.
	Headroom(ctx context.Context, k Key) (float64, error)
	// Cool makes k unavailable until now+d (an upstream 429/529 with
	// Retry-After d).
	Cool(ctx context.Context, k Key, d time.Duration) error
	// Settle corrects an earlier Take by delta (measured minus
	// estimated; may be negative, which gives capacity back, never above
	// full), and then lowers k's view of what is left to what the
	// provider reports in r (a dimension < 0 means not reported), as one
	// step and in that order: a provider's headers already count the turn
	// being settled, so synced after the correction they only lower what
	// the correction leaves, never take the turn twice. A zero delta only
	// syncs; r reporting no dimension (Unreported) only corrects.
	Settle(ctx context.Context, k Key, delta Cost, r Remaining) error
}

// BatchTaker is Buckets that take several costs on one key in one call:
// Redis in one round trip, so that a scheduler admits the turns waiting
// for a key at the key's rate, not at one round trip each. TakeBatch
// takes cs in order, each as Take would, until one has no room now; n is
// how many it took, wait how long until cs[n] would fit (0 when it took
// them all), and headroom the key's Headroom after them.
type BatchTaker interface {
	TakeBatch(ctx context.Context, k Key, cs []Cost) (n int, wait time.Duration, headroom float64, err error)
}

// MaxTakeWait caps the wait a Take reports: a scheduler polls again by then
// anyway, and a cost larger than a key's burst never fits "exactly".
const MaxTakeWait = 60 * time.Second

// minTakeWait is the least wait a Take reports, so that a caller sleeping
// on it never spins.
const minTakeWait = time.Millisecond

// clampWait keeps a refused Take's wait within [minTakeWait, MaxTakeWait].
func clampWait(d time.Duration) time.Duration {
	return min(max(d, minTakeWait), MaxTakeWait)
}

// Remaining is what a provider's rate-limit headers say is left, -1 where
// not reported. Tokens is a combined token count (Anthropic's most
// restrictive token limit, OpenAI's tokens per minute): it caps both Input
// and Output.
//
// The resets are how long until the provider's bucket is full again, -1
// where not reported. They are read only where the provider reports
// nothing left (or no count): its bucket is then empty until it refills,
// and a bucket refilling at the key's rate and full only in d holds its
// burst less d's worth. Where some is left, the count is the provider's
// better word: a reset then says only when a bucket of unknown size is
// full, or when a fixed window ends, which would lower a key that still
// has room. TokensReset covers both Input and Output.
type Remaining struct {
	Requests int64
	Input    int64
	Output   int64
	Tokens   int64

	RequestsReset time.Duration
	InputReset    time.Duration
	OutputReset   time.Duration
	TokensReset   time.Duration
}

// Unreported is a Remaining that reports no dimension: Settle with it
// only corrects.
func Unreported() Remaining {
	return Remaining{Requests: -1, Input: -1, Output: -1, Tokens: -1,
		RequestsReset: -1, InputReset: -1, OutputReset: -1, TokensReset: -1}
}

// reportsNothing says whether r leaves every dimension as it is.
func (r Remaining) reportsNothing() bool {
	return r.Requests < 0 && r.Input < 0 && r.Output < 0 && r.Tokens < 0 &&
		r.RequestsReset < 0 && r.InputReset < 0 && r.OutputReset < 0 && r.TokensReset < 0
}

// Classes of turns, and their default weights (DefaultWeights).
const (
	Interactive = "interactive"
	Standard    = "standard"
	Batch       = "batch"
)

// DefaultWeights are the classes' shares of tokens when all are waiting:
// interactive 4, standard 2, batch 1.
func DefaultWeights() map[string]int {
	return map[string]int{Interactive: 4, Standard: 2, Batch: 1}
}

// ErrClosed is returned by Acquire once the Scheduler is closed, and to
// the turns that were waiting when it closed.
var ErrClosed = errors.New("ratelimit: scheduler closed")

// WaitError is returned when a turn waited MaxWait without a key having
// room for it. RetryAfter is when a retry may fit: the proxy sends it as
// Retry-After.
type WaitError struct {
	Class      string
	Waited     time.Duration
	RetryAfter time.Duration
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("ratelimit: %s turn waited %s for a provider key; retry after %s",
		e.Class, e.Waited.Round(time.Millisecond), e.RetryAfter)
}
