package proxy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"gatekeeper/trajectory"
)

// Bounds of settle retries.
const (
	settleRetryMin = 200 * time.Millisecond
	settleRetryMax = 10 * time.Second
	settleAttempt  = 10 * time.Second // one attempt's timeout
	maxRetrying    = 4096             // settles retried at once
	// maxSettleAttempts bounds one charge's retries: about an hour and a
	// half at settleRetryMax apart, past any outage a run outlives.
	maxSettleAttempts = 512
)

// settles retries the charges of turns whose reply went out while the
// store was unreachable: a budget is a guarantee, so a charge is retried
// until the store takes it, not dropped. Settles are idempotent (the call
// id), so a retry after an answer that was lost charges once.
type settles struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}
	sleep  func(context.Context, time.Duration) error
}

func newSettles() *settles {
	ctx, cancel := context.WithCancel(context.Background())
	return &settles{ctx: ctx, cancel: cancel, sem: make(chan struct{}, maxRetrying), sleep: sleepCtx}
}

// retry runs settle again in the background, with backoff, until it
// succeeds, fails for another reason than the store being unreachable, or
// the proxy closes. Whatever is not recorded is logged with its figures.
func (s *settles) retry(log *slog.Logger, settle func(context.Context) error, attrs []slog.Attr) {
	select {
	case s.sem <- struct{}{}:
	default:
		log.LogAttrs(s.ctx, slog.LevelError, "charge not recorded: too many charges waiting for the store", attrs...)
		return
	}
	log.LogAttrs(s.ctx, slog.LevelWarn, "store unreachable; retrying the turn's charge", attrs...)
	s.wg.Add(1)
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		wait := settleRetryMin
		for attempt := 1; ; attempt++ {
			if err := s.sleep(s.ctx, wait); err != nil {
				log.LogAttrs(context.Background(), slog.LevelError, "charge not recorded: gatekeeper stopped before the store came back", attrs...)
				return
			}
			if attempt > maxSettleAttempts {
				log.LogAttrs(context.Background(), slog.LevelError, "charge not recorded: the store stayed unavailable", attrs...)
				return
			}
			ctx, cancel := context.WithTimeout(s.ctx, settleAttempt)
			err := settle(ctx)
			cancel()
			switch {
			case err == nil:
				log.LogAttrs(s.ctx, slog.LevelInfo, "turn charge recorded after the store came back", attrs...)
				return
			case !errors.Is(err, trajectory.ErrUnavailable) && s.ctx.Err() == nil:
				log.LogAttrs(s.ctx, slog.LevelError, "charge not recorded", append(attrs, slog.String("error", err.Error()))...)
				return
			}
			wait = min(wait*2, settleRetryMax)
		}
	}()
}

// close gives the retries until ctx ends, then stops them.
func (s *settles) close(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.cancel()
	s.wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
