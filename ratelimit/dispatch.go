package ratelimit

import (
	"context"
	"time"
)

// giveBackTimeout bounds the give-back of a take whose turn left while
// the dispatcher took it.
const giveBackTimeout = 5 * time.Second

// idle is how long the dispatcher sleeps with nothing queued; a new
// waiter wakes it sooner.
const idle = time.Hour

// dispatch serves the queues until Close.
func (s *Scheduler) dispatch() {
	defer close(s.done)
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		sleep := s.pass()
		if s.ctx.Err() != nil {
			return
		}
		if sleep <= 0 {
			continue
		}
		timer.Reset(sleep)
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// candidate is the turn whose turn it is in a pool.
type candidate struct {
	p *pool
	w *waiter
}

// pass fails the turns that waited MaxWait, then tries to admit the turn
// whose turn it is in each pool that is not blocked. It returns 0 when it
// admitted one (there may be more), else how long to sleep: until the
// earliest a pool may have room or a turn reaches MaxWait, at most Poll.
func (s *Scheduler) pass() time.Duration {
	now := s.now()
	s.mu.Lock()
	s.expire(now)
	var cands []candidate
	for _, p := range s.pools {
		if p.blockedUntil.After(now) {
			continue
		}
		if w := p.next(); w != nil {
			cands = append(cands, candidate{p, w})
		}
	}
	s.mu.Unlock()

	admitted := false
	for _, c := range cands {
		if s.try(c) {
			admitted = true
		}
	}
	if admitted {
		return 0
	}

	now = s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pools) == 0 {
		return idle
	}
	sleep := s.poll
	for _, p := range s.pools {
		if !p.blockedUntil.After(now) {
			// Not blocked, or no longer: changed since the pass
			// began (a release, a departure, a new pool), or the
			// wait passed during it. Look again at once.
			return 0
		}
		sleep = min(sleep, p.blockedUntil.Sub(now))
		for _, q := range p.queues {
			if w := q.head(); w != nil {
				sleep = min(sleep, w.enq.Add(s.maxWait).Sub(now))
			}
		}
	}
	return max(sleep, minTakeWait)
}

// try admits c's turn if a key has room for it now, and reports whether
// it did; otherwise it marks c's pool blocked for as long as the Take said.
func (s *Scheduler) try(c candidate) bool {
	k, ok, wait, err := s.pick(s.ctx, c.w.keys, c.w.est, "")
	now := s.now()
	s.mu.Lock()
	switch {
	case err != nil && s.ctx.Err() != nil:
		// Closing: Close fails the turn with ErrClosed.
		s.mu.Unlock()
		return false
	case err != nil:
		if c.w.q != nil {
			s.fail(c.p, c.w, err)
		}
		s.mu.Unlock()
		return false
	case !ok:
		c.p.blockedUntil = now.Add(wait)
		s.mu.Unlock()
		return false
	case c.w.q == nil:
		// The turn left (its ctx ended, or it expired) during the
		// Take: give the take back, even if Close is under way.
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), giveBackTimeout)
		defer cancel()
		s.grant(k, c.w.class, c.w.est, 0).release(ctx)
		return true
	}
	defer s.mu.Unlock()
	waited := now.Sub(c.w.enq)
	c.p.admit(c.w, now)
	s.setLength(c.w.class, -1)
	if c.p.n == 0 {
		delete(s.pools, c.p.id)
	}
	s.observeWait(c.w.class, waited)
	c.w.ready <- result{g: s.grant(k, c.w.class, c.w.est, waited)}
	return true
}

// expire fails the turns that have waited MaxWait. Queues are oldest
// first and every turn gets the same MaxWait, so only heads need looking
// at. s.mu is held.
func (s *Scheduler) expire(now time.Time) {
	for _, p := range s.pools {
		for _, q := range p.queues {
			for w := q.head(); w != nil && now.Sub(w.enq) >= s.maxWait; w = q.head() {
				retry := max(p.drainEstimate(), p.blockedUntil.Sub(now), time.Second)
				retry = min(retry, MaxTakeWait)
				retry = (retry + time.Second - 1).Truncate(time.Second)
				s.fail(p, w, &WaitError{Class: w.class, Waited: now.Sub(w.enq), RetryAfter: retry})
			}
		}
	}
}
