package mockprovider

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// RateLimit makes the mock enforce a provider's rate limits on every key
// it sees, the way Anthropic and OpenAI do: a token bucket per key and
// dimension that holds the limit (or Quantum's share of it) and refills
// at the limit per Window. A turn that
// does not fit is answered 429 in the provider's own error format, with
// retry-after. The zero value enforces nothing.
type RateLimit struct {
	// RPM is the number of turn requests per Window; 0 is unlimited.
	RPM int
	// InputTPM bounds the input tokens (uncached input and cache writes,
	// as the reply's usage reports them) per Window; 0 is unlimited.
	InputTPM int64
	// OutputTPM bounds the output tokens per Window. A turn is refused
	// while the key's output bucket is empty; its output is charged when
	// admitted. 0 is unlimited.
	OutputTPM int64
	// Window is the period over which each bucket refills in full;
	// default one minute, like the providers' per-minute limits.
	Window time.Duration
	// Quantum, when set, makes each bucket hold only Quantum's share of
	// its limit (at least one unit) while still refilling at the limit
	// per Window: the providers enforce per-minute limits over such
	// shorter intervals (600 a minute with a Quantum of 1s holds 10).
	// 0 holds the whole limit.
	Quantum time.Duration
}

// capacity is what a bucket of limit per Window holds.
func (r RateLimit) capacity(limit int64) float64 {
	if r.Quantum <= 0 || r.Quantum >= r.Window {
		return float64(limit)
	}
	return max(float64(limit)*float64(r.Quantum)/float64(r.Window), 1)
}

func (r RateLimit) enabled() bool { return r.RPM > 0 || r.InputTPM > 0 || r.OutputTPM > 0 }

// RateCounts says how the mock's rate limits answered turn requests.
type RateCounts struct {
	// Served counts the turns admitted by the rate limits (whatever the
	// reply then was).
	Served int64
	// Limited counts the turns answered 429 for a rate limit.
	Limited int64
	// InputTokens and OutputTokens are what the served turns were charged.
	InputTokens, OutputTokens int64
}

// rateLimiter holds the buckets of every key the mock has seen.
type rateLimiter struct {
	cfg RateLimit

	mu     sync.Mutex
	keys   map[string]*keyBuckets
	counts RateCounts
}

// keyBuckets is one key's level in each dimension, as of at.
type keyBuckets struct {
	at                      time.Time
	requests, input, output float64
}

func newRateLimiter(cfg RateLimit) *rateLimiter {
	if cfg.Window <= 0 {
		cfg.Window = time.Minute
	}
	return &rateLimiter{cfg: cfg, keys: make(map[string]*keyBuckets)}
}

// refill brings b to now; buckets start full.
func (l *rateLimiter) refill(b *keyBuckets, now time.Time) {
	el := now.Sub(b.at)
	if el <= 0 {
		return
	}
	b.at = now
	c := l.cfg
	f := float64(el) / float64(c.Window)
	b.requests = min(c.capacity(int64(c.RPM)), b.requests+f*float64(c.RPM))
	b.input = min(c.capacity(c.InputTPM), b.input+f*float64(c.InputTPM))
	b.output = min(c.capacity(c.OutputTPM), b.output+f*float64(c.OutputTPM))
}

// until is how long a bucket of limit per Window holding have needs to
// hold want; a want larger than the whole bucket waits for a full one. 0
// when it holds it already or limit is 0 (unlimited).
func (l *rateLimiter) until(have, want float64, limit int64) time.Duration {
	if limit <= 0 {
		return 0
	}
	want = min(want, l.cfg.capacity(limit))
	if have >= want {
		return 0
	}
	return time.Duration((want - have) / float64(limit) * float64(l.cfg.Window))
}

// rateState is what a turn's rate-limit check found: whether it was
// admitted, what is left, and when the key would take it.
type rateState struct {
	ok         bool
	retryAfter time.Duration
	left       keyBuckets
}

// take admits a turn of input and output tokens on key at now, or tells
// how long until it would fit.
func (l *rateLimiter) take(key string, input, output int64, now time.Time) rateState {
	c := l.cfg
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.keys[key]
	if !ok {
		b = &keyBuckets{at: now, requests: c.capacity(int64(c.RPM)), input: c.capacity(c.InputTPM), output: c.capacity(c.OutputTPM)}
		l.keys[key] = b
	}
	l.refill(b, now)
	// The longest a dimension needs to hold what the turn asks of it; an
	// empty output bucket refuses, the rest of the output is charged.
	wait := max(l.until(b.requests, 1, int64(c.RPM)),
		l.until(b.input, float64(input), c.InputTPM),
		l.until(b.output, 1, c.OutputTPM))
	if wait > 0 {
		l.counts.Limited++
		return rateState{retryAfter: wait, left: *b}
	}
	if c.RPM > 0 {
		b.requests--
	}
	if c.InputTPM > 0 {
		b.input -= float64(input)
	}
	if c.OutputTPM > 0 {
		b.output -= float64(output)
	}
	l.counts.Served++
	l.counts.InputTokens += input
	l.counts.OutputTokens += output
	return rateState{ok: true, left: *b}
}

func (l *rateLimiter) snapshot() RateCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts
}

func (l *rateLimiter) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = make(map[string]*keyBuckets)
	l.counts = RateCounts{}
}

// RateCounts returns what the rate limits did since New or Reset; all zero
// when Options.RateLimit enforces nothing.
func (s *Server) RateCounts() RateCounts {
	if s.rate == nil {
		return RateCounts{}
	}
	return s.rate.snapshot()
}

// admitRate checks the turn against the key's rate limits, sets the
// providers' rate-limit headers from what is left, and answers 429 when the
// turn does not fit. It reports whether the turn may go on.
func (x *exchange) admitRate(u usageCounts) bool {
	l := x.s.rate
	if l == nil {
		return true
	}
	key := x.rec.APIKey
	now := x.s.clock()
	st := l.take(key, u.input+u.cacheWrite, u.output, now)
	x.rateHeaders(st, now)
	if st.ok {
		return true
	}
	retry := max(st.retryAfter, time.Second)
	typ, msg := statusError(x.fam, http.StatusTooManyRequests)
	x.failAfter(http.StatusTooManyRequests, typ, msg, nil, retry)
	return false
}

// rateHeaders replaces the fixed rate-limit headers with the key's real
// levels, in the provider's own names.
func (x *exchange) rateHeaders(st rateState, now time.Time) {
	l := x.s.rate
	c := l.cfg
	h := x.w.Header()
	left := func(v float64) string { return strconv.FormatInt(max(0, int64(v)), 10) }
	type dim struct {
		anthropic, openai string
		limit             int64
		have              float64
	}
	dims := []dim{
		{"requests", "requests", int64(c.RPM), st.left.requests},
		{"input-tokens", "", c.InputTPM, st.left.input},
		{"output-tokens", "", c.OutputTPM, st.left.output},
	}
	if c.InputTPM > 0 {
		dims = append(dims, dim{"", "tokens", c.InputTPM, st.left.input})
	}
	for _, d := range []string{"requests", "tokens"} {
		h.Del("anthropic-ratelimit-" + d + "-limit")
		h.Del("anthropic-ratelimit-" + d + "-remaining")
		h.Del("anthropic-ratelimit-" + d + "-reset")
		h.Del("x-ratelimit-limit-" + d)
		h.Del("x-ratelimit-remaining-" + d)
		h.Del("x-ratelimit-reset-" + d)
	}
	for _, d := range dims {
		if d.limit <= 0 {
			continue
		}
		wait := l.until(d.have, float64(d.limit), d.limit) // until full again
		switch {
		case x.fam == familyAnthropic && d.anthropic != "":
			h.Set("anthropic-ratelimit-"+d.anthropic+"-limit", strconv.FormatInt(d.limit, 10))
			h.Set("anthropic-ratelimit-"+d.anthropic+"-remaining", left(d.have))
			h.Set("anthropic-ratelimit-"+d.anthropic+"-reset", now.Add(wait).UTC().Format(time.RFC3339))
		case x.fam == familyOpenAI && d.openai != "":
			h.Set("x-ratelimit-limit-"+d.openai, strconv.FormatInt(d.limit, 10))
			h.Set("x-ratelimit-remaining-"+d.openai, left(d.have))
			h.Set("x-ratelimit-reset-"+d.openai, wait.Round(time.Millisecond).String())
		}
	}
}
