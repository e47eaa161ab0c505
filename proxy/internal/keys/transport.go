package keys

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"gatekeeper/ratelimit"
)

// Transport sends the call on its grant's key through next and, when the
// provider refuses it before any byte went to the agent (429, 529, 503
// or no connection), sends it again on another key of the pool that has
// room, with body (the call's body) from the start. Requests of a call
// without a grant go straight through. log gets the call's key moves.
func (t *Turn) Transport(next http.RoundTripper, log *slog.Logger, body []byte) http.RoundTripper {
	return &transport{t: t, next: next, log: log, body: body}
}

type transport struct {
	t    *Turn
	next http.RoundTripper
	log  *slog.Logger
	body []byte
}

var _ http.RoundTripper = (*transport)(nil)

func (kt *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t := kt.t
	if t.grant.Load() == nil {
		return kt.next.RoundTrip(req)
	}
	pool := t.pool
	ctx := req.Context()
	for try := 1; ; try++ {
		resp, err := kt.next.RoundTrip(req)
		g := t.grant.Load()
		retryAfter, refused := refusal(resp, err)
		if !refused || ctx.Err() != nil {
			if err == nil {
				t.KeepHeader(resp.Header) // read once the call's usage is known
			}
			return resp, err
		}
		// The key is cooled (for a 429 or 529) and the call's take given
		// back whether or not another key takes the call.
		other, rerr := g.Reject(ctx, retryAfter, pool.keys)
		if rerr != nil {
			kt.log.LogAttrs(ctx, slog.LevelWarn, "no other key: rate-limit buckets unreadable", slog.String("error", rerr.Error()))
		}
		// The headroom gauge moves on takes; a cooled key is taken no
		// more until it is warm, so it is reported here.
		if h, err := t.s.buckets.Headroom(ctx, g.Key); err == nil && t.s.obs != nil {
			t.s.obs.Headroom(g.Key.ID, h)
		}
		if other != nil && try >= len(pool.keys) {
			other.Done(ctx, ratelimit.Cost{}) // every key was tried: give its take back
			other = nil
		}
		if other == nil {
			// The agent gets the provider's answer (its 429 and
			// Retry-After, which the SDKs honour).
			return resp, err
		}
		kt.log.LogAttrs(ctx, slog.LevelInfo, "provider refused the call; sending it on another key",
			slog.String("key", g.Key.ID), slog.String("next_key", other.Key.ID), slog.String("refusal", upstreamRefusal(resp, err)))
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
		}
		t.grant.Store(other)
		if t.s.obs != nil {
			t.s.obs.KeyRetried(pool.provider)
		}
		req = resend(req, pool, pool.secrets[other.Key.ID], kt.body)
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

// upstreamRefusal says, for the log, why the provider refused a call on a key.
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

// resend is req again, on another key of pool, with the call's body from
// the start.
func resend(req *http.Request, pool *Pool, secret string, body []byte) *http.Request {
	r := req.Clone(req.Context())
	pool.SetKey(r.Header, secret)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	return r
}
