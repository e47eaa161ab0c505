package settle

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"gatekeeper/internal/clock"
	"gatekeeper/trajectory"
)

// Bounds of settle retries.
const (
	retryMin    = 200 * time.Millisecond
	retryMax    = 10 * time.Second
	Attempt     = 10 * time.Second // one attempt's timeout
	maxRetrying = 4096             // settles retried at once
	// maxSettleAttempts bounds one charge's retries: about an hour and a
	// half at retryMax apart, past any outage a run outlives.
	maxSettleAttempts = 512
)

// Retrier retries the charges of turns whose reply went out while the
// store was unreachable: a budget is a guarantee, so a charge is retried
// until the store takes it, not dropped. Settles are idempotent (the call
// id), so a retry after an answer that was lost charges once.
type Retrier struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}
	sleep  func(context.Context, time.Duration) error
}

// NewRetrier returns a Retrier with nothing to retry yet.
func NewRetrier() *Retrier {
	ctx, cancel := context.WithCancel(context.Background())
	return &Retrier{ctx: ctx, cancel: cancel, sem: make(chan struct{}, maxRetrying), sleep: clock.Sleep}
}

// Retry runs settle again in the background, with backoff, until it
// succeeds, fails for another reason than the store being unreachable, or
// the proxy closes. Whatever is not recorded is logged with its figures.
func (s *Retrier) Retry(log *slog.Logger, w Write, settle func(context.Context) error, attrs []slog.Attr) {
	s.RetryThen(log, w, settle, attrs, nil)
}

// RetryThen is Retry, calling end, when not nil, once the retries are
// over, whatever their outcome.
func (s *Retrier) RetryThen(log *slog.Logger, w Write, settle func(context.Context) error, attrs []slog.Attr, end func()) {
	select {
	case s.sem <- struct{}{}:
	default:
		log.LogAttrs(s.ctx, slog.LevelError, w.lost+": too many writes waiting for the store", attrs...)
		if end != nil {
			end()
		}
		return
	}
	log.LogAttrs(s.ctx, slog.LevelWarn, "store unreachable; retrying "+w.what, attrs...)
	s.wg.Add(1)
	go func() {
		defer func() {
			if end != nil {
				end()
			}
			<-s.sem
			s.wg.Done()
		}()
		wait := retryMin
		for attempt := 1; ; attempt++ {
			if err := s.sleep(s.ctx, wait); err != nil {
				log.LogAttrs(context.Background(), slog.LevelError, w.lost+": gatekeeper stopped before the store came back", attrs...)
				return
			}
			if attempt > maxSettleAttempts {
				log.LogAttrs(context.Background(), slog.LevelError, w.lost+": the store stayed unavailable", attrs...)
				return
			}
			ctx, cancel := context.WithTimeout(s.ctx, Attempt)
			err := settle(ctx)
			cancel()
			switch {
			case err == nil:
				log.LogAttrs(s.ctx, slog.LevelInfo, w.done+" after the store came back", attrs...)
				return
			case errors.Is(err, trajectory.ErrNotFound) && w.gone != "":
				log.LogAttrs(s.ctx, slog.LevelInfo, w.gone, attrs...)
				return
			case !errors.Is(err, trajectory.ErrUnavailable) && s.ctx.Err() == nil:
				log.LogAttrs(s.ctx, slog.LevelError, w.lost, append(attrs, slog.String("error", err.Error()))...)
				return
			}
			wait = min(wait*2, retryMax)
		}
	}()
}

// Close gives the retries until ctx ends, then stops them.
func (s *Retrier) Close(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.cancel()
	s.wg.Wait()
}

// Write names, for the log, what a retried write does: what it is, what
// its success says and what its loss says; and, when its record may be
// gone (a store restarted without its data), what that says: nothing is
// left to write, and no later sweep has anything to do.
type Write struct{ what, done, lost, gone string }

// The writes retried.
var (
	WriteCharge  = Write{what: "the turn's charge", done: "turn charge recorded", lost: "charge not recorded"}
	WriteRelease = Write{what: "the release of an abandoned admission", done: "abandoned admission cleared (released if it had been written)",
		lost: "abandoned admission not released (the sweeper reclaims it)",
		gone: "abandoned admission's record no longer exists; nothing to release"}
	WriteTenant = Write{what: "the tenant's charge", done: "tenant charge recorded", lost: "tenant charge not recorded"}
)
