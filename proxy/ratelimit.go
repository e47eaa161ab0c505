package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/ratelimit"
)

// headerQueueWait tells the agent (and operators reading its logs) how
// long a turn waited for provider key capacity.
const headerQueueWait = "X-Gatekeeper-Queue-Wait-Ms"

// keyPool is a provider's keys as the scheduler sees them: by id
// "provider/keyname", never by secret.
type keyPool struct {
	keys    []ratelimit.Key
	secrets map[string]string // key id → the provider key
	limited bool              // some key has a limit: turns go through the scheduler
}

func newKeyPool(p *config.Provider) keyPool {
	kp := keyPool{secrets: make(map[string]string, len(p.Keys))}
	for _, k := range p.Keys {
		id := p.Name + "/" + k.Name
		lim := ratelimit.Limits{RPM: k.RPM, InputTPM: k.InputTPM, OutputTPM: k.OutputTPM,
			RPMBurst: k.RPMBurst, InputBurst: k.InputTPMBurst, OutputBurst: k.OutputTPMBurst}
		kp.keys = append(kp.keys, ratelimit.Key{ID: id, Limits: lim})
		kp.secrets[id] = k.Key
		kp.limited = kp.limited || lim != ratelimit.Limits{}
	}
	return kp
}

// newScheduler builds the scheduler when some provider key has a limit;
// nil otherwise, and turns then go straight to the provider.
func (s *Server) newScheduler(opts Options) *ratelimit.Scheduler {
	limited := false
	for _, up := range s.providers {
		limited = limited || up.pool.limited
	}
	if !limited {
		return nil
	}
	b := opts.Buckets
	if b == nil {
		b = ratelimit.NewMemory(s.now)
	} else {
		b = deadline.Buckets(b, s.cfg.Store.Timeout.Std())
	}
	s.buckets = b
	rl := s.cfg.RateLimits
	o := ratelimit.Options{Buckets: b, Weights: rl.Weights, MaxWait: rl.MaxWait.Std(), Clock: s.now, Logger: s.log}
	if s.tel != nil {
		o.Observer = s.tel
	}
	return ratelimit.New(o)
}

// acquireKey waits, in the tenant's priority class, until a key of the
// provider has room for the turn's estimate, and holds the grant. It is a
// no-op for providers whose keys have no limits. The error is what the
// agent gets (rate_limited) or the context's. The time waited goes in h
// (the agent's response headers) when h is not nil.
//
// A take that rode in the admission's round trip (rideKey) is its grant
// when it found room; when it did not, the turn waits in its class as
// any turn does.
func (t *turn) acquireKey(ctx context.Context, h http.Header) error {
	s, up := t.s, t.req.up
	if s.sched == nil || !up.pool.limited {
		return nil
	}
	class := t.req.tenant.Priority
	var g *ratelimit.Grant
	var err error
	if rd := t.ride; rd != nil {
		t.ride = nil
		g, err = rd.Grant(ctx)
	} else {
		g, err = s.sched.Acquire(ctx, class, up.pool.keys, t.keyEstimate())
	}
	var we *ratelimit.WaitError
	switch {
	case err == nil:
		t.grant.Store(g)
		if g.Waited > 0 && h != nil {
			h.Set(headerQueueWait, strconv.FormatInt(g.Waited.Milliseconds(), 10))
		}
		return nil
	case errors.As(err, &we):
		s.tel.RateLimited(class)
		if h != nil {
			h.Set(headerQueueWait, strconv.FormatInt(we.Waited.Milliseconds(), 10))
		}
		return &HTTPError{Code: http.StatusTooManyRequests, Type: errRateLimited, RetryAfter: max(we.RetryAfter, time.Second),
			Msg: fmt.Sprintf("provider %s has no key capacity for this %s request after waiting %s; retry after the Retry-After delay",
				up.cfg.Name, we.Class, we.Waited.Round(time.Millisecond)), Err: err}
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		// The shared buckets could not be read (Redis down): the turn is
		// not sent rather than sent past the limits.
		return &HTTPError{Code: http.StatusServiceUnavailable, Type: errUpstream, RetryAfter: 5 * time.Second,
			Msg: "gatekeeper could not check provider " + up.cfg.Name + "'s rate limits; retry later", Err: err}
	}
}

// keyEstimate is what the turn is expected to cost its key: one request,
// its body's tokens, and its output limit (rate_limits'
// default_output_tokens when it has none); settleKey corrects it.
func (t *turn) keyEstimate() ratelimit.Cost {
	out := t.maxOut
	if out <= 0 {
		out = t.s.cfg.RateLimits.DefaultOutputTokens
	}
	return ratelimit.Cost{Requests: 1, Input: estimateTokens(int64(len(t.body))), Output: out}
}

// rideKey prepares the turn's key take to ride in its admission's update
// (one round trip to Redis for both, rather than one each), when its
// provider's keys are limited and the buckets are in Redis; t.ride stays
// nil otherwise. The estimate is the one known before admission: the
// agent's body before shaping, and its output limit before the budget's
// clamp; the settle corrects it as it corrects any estimate.
func (t *turn) rideKey() {
	s, up := t.s, t.req.up
	if s.sched == nil || !up.pool.limited {
		return
	}
	t.ride = s.sched.Ride(t.req.tenant.Priority, up.pool.keys, t.keyEstimate())
}

// dropRide gives back a take that rode with an admission that refused the
// turn, or that the turn will not use: a refusal consumes no rate.
func (t *turn) dropRide(ctx context.Context) {
	if rd := t.ride; rd != nil {
		t.ride = nil
		rd.Undo(context.WithoutCancel(ctx))
	}
}

// settleKey corrects the grant's estimate with what the turn used: input
// and cache writes count toward the providers' input limits, cache reads
// do not. A call the provider refused or never answered made one request.
func (t *turn) settleKey(ctx context.Context, o outcome) {
	if st := t.keySettlement(o); st.Grant != nil {
		st.Grant.Settle(ctx, st.Actual, st.Header)
	}
}

// rideKeySettles prepares the key settles of the settles ps, which an
// admission takes, to ride in its update (one round trip for them all,
// rather than a flush's): each turn's grant leaves it, so that the flush
// that later writes its tenant's side sends no key settle again. Nil when
// none went on a limited key.
func rideKeySettles(ps []*pendingSettle) *ratelimit.SettleRide {
	var ss []ratelimit.Settlement
	for _, p := range ps {
		st := p.t.keySettlement(p.o)
		if st.Grant != nil && p.t.grant.CompareAndSwap(st.Grant, nil) {
			ss = append(ss, st)
		}
	}
	return ratelimit.RideSettles(ss)
}

// keySettlement is what settleKey sends for the turn; its Grant is nil
// when the call went on no limited key.
func (t *turn) keySettlement(o outcome) ratelimit.Settlement {
	g := t.grant.Load()
	if g == nil {
		return ratelimit.Settlement{}
	}
	actual := ratelimit.Cost{Requests: 1}
	if !o.upstream {
		actual.Input = o.usage.InputTokens + o.usage.CacheWriteTokens
		actual.Output = o.usage.OutputTokens
	}
	// The provider's rate-limit headers already count this turn as the
	// provider measured it. Read before the correction, they would lower
	// the key's level to what the provider reports and the correction
	// would then take the turn's usage a second time; read after it, they
	// only lower what gatekeeper's own accounting leaves. Settle does both
	// in that order, in one call to the buckets.
	var h http.Header
	if p := t.limitHeaders.Load(); p != nil {
		h = *p
	}
	return ratelimit.Settlement{Grant: g, Actual: actual, Header: h}
}

// keyedTransport sends a turn on its grant's key and, when the provider
// refuses it before any byte went to the agent (429, 529, 503 or no
// connection), sends it again on another key of the pool that has room.
// Requests without a grant go straight through.
type keyedTransport struct {
	s    *Server
	next http.RoundTripper
	t    *turn // the turn sent
}

var _ http.RoundTripper = keyedTransport{}

func (kt keyedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if kt.t == nil || kt.t.grant.Load() == nil {
		return kt.next.RoundTrip(req)
	}
	t, up := kt.t, kt.t.req.up
	ctx := req.Context()
	for try := 1; ; try++ {
		resp, err := kt.next.RoundTrip(req)
		g := t.grant.Load()
		retryAfter, refused := refusal(resp, err)
		if !refused || ctx.Err() != nil {
			if err == nil {
				h := resp.Header
				t.limitHeaders.Store(&h) // read once the turn's usage is known
			}
			return resp, err
		}
		// The key is cooled (for a 429 or 529) and the turn's take given
		// back whether or not another key takes the turn.
		other, rerr := g.Reject(ctx, retryAfter, up.pool.keys)
		if rerr != nil {
			t.log.LogAttrs(ctx, slog.LevelWarn, "no other key: rate-limit buckets unreadable", slog.String("error", rerr.Error()))
		}
		// The headroom gauge moves on takes; a cooled key is taken no
		// more until it is warm, so it is reported here.
		if h, err := t.s.buckets.Headroom(ctx, g.Key); err == nil {
			t.s.tel.Headroom(g.Key.ID, h)
		}
		if other != nil && try >= len(up.pool.keys) {
			other.Done(ctx, ratelimit.Cost{}) // every key was tried: give its take back
			other = nil
		}
		if other == nil {
			// The agent gets the provider's answer (its 429 and
			// Retry-After, which the SDKs honour).
			return resp, err
		}
		t.log.LogAttrs(ctx, slog.LevelInfo, "provider refused the call; sending it on another key",
			slog.String("key", g.Key.ID), slog.String("next_key", other.Key.ID), slog.String("refusal", upstreamRefusal(resp, err)))
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
		}
		t.grant.Store(other)
		t.s.tel.KeyRetried(up.cfg.Name)
		req = resend(req, up, up.pool.secrets[other.Key.ID], t.body)
	}
}

// refusal says whether a reply or a failed round trip means the provider
// refused the call on this key, and for how long to cool the key: the
// provider's Retry-After for a 429 or 529 (0: the scheduler's default),
// -1 (no cooling) for a 503 or no connection, which say nothing of the key.
func refusal(resp *http.Response, err error) (time.Duration, bool) {
	if err != nil {
		return -1, errors.Is(err, syscall.ECONNREFUSED) || isDialError(err)
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, 529:
		return retryAfter(resp.Header), true
	case http.StatusServiceUnavailable:
		return -1, true
	}
	return 0, false
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// upstreamRefusal says, for the log, why the provider refused a turn on a key.
func upstreamRefusal(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// maxCool bounds how long a provider's Retry-After cools a key: a key
// cooled for hours by one odd header would leave its pool short.
const maxCool = 5 * time.Minute

// retryAfter reads the provider's retry-after-ms (OpenAI) or Retry-After
// (seconds or an HTTP date), at most maxCool; 0 when absent or unreadable.
func retryAfter(h http.Header) time.Duration {
	if d, ok := delay(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d
	}
	v := h.Get("Retry-After")
	if d, ok := delay(v, time.Second); ok {
		return d
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(at), 0), maxCool)
	}
	return 0
}

// delay reads a positive count of unit, at most maxCool.
func delay(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), math.IsNaN(f), f <= 0:
		return 0, false
	case f >= float64(maxCool/unit):
		return maxCool, true
	}
	return time.Duration(f * float64(unit)), true
}

// resend is req again, on another key, with the turn's body from the start.
func resend(req *http.Request, up *upstream, secret string, body []byte) *http.Request {
	r := req.Clone(req.Context())
	setProviderKey(r.Header, up, secret)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	return r
}

// rateLimitedOutcome is how a turn that never got key capacity settles: not
// a turn of the run, and not charged.
func rateLimitedOutcome(err error) outcome {
	o := outcome{stop: "error", upstream: true, rateLimited: true, status: http.StatusTooManyRequests, estimated: true,
		detail: "rate limited: " + err.Error()}
	var he *HTTPError
	if errors.As(err, &he) {
		o.status = he.Code
		if he.Err != nil {
			o.detail = "rate limited: " + he.Err.Error()
		}
	}
	return o
}
