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

// batchTurns is the most waiting turns of a pool that the dispatcher
// takes for in one call to the buckets (one round trip to Redis): a key
// every turn waits for is served at its rate, not at one round trip a
// turn.
const batchTurns = 64

// candidate is the turns whose turn it is in a pool, in the order the
// round-robin serves them (pool.serving).
type candidate struct {
	p  *pool
	ws []*waiter
}

// pass fails the turns that waited MaxWait, then tries to admit the turns
// whose turn it is in each pool that is not blocked. It returns 0 when it
// admitted some (there may be more), else how long to sleep: until the
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
			cands = append(cands, candidate{p, p.serving(w, batchTurns)})
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

// try takes for c's turns in one call to the buckets and admits, in
// order, those it could take for; it reports whether it took any. When it
// took for none, or for only some, it marks c's pool blocked for as long
// as the buckets said. A take whose turn left during the call, or that
// the round-robin no longer serves next (a turn came or went), goes back.
func (s *Scheduler) try(c candidate) bool {
	ests := make([]Cost, len(c.ws))
	for i, w := range c.ws {
		ests[i] = w.est
	}
	head := c.ws[0]
	on, wait, err := s.pickBatch(s.ctx, head.keys, ests, "")
	now := s.now()
	s.mu.Lock()
	switch {
	case err != nil && s.ctx.Err() != nil:
		// Closing: Close fails the turns with ErrClosed.
		s.mu.Unlock()
		return false
	case err != nil:
		if head.q != nil {
			s.fail(c.p, head, err)
		}
		s.mu.Unlock()
		return false
	case len(on) == 0:
		c.p.blockedUntil = now.Add(wait)
		s.mu.Unlock()
		return false
	}
	back := make(map[Key]Cost)
	for i, w := range c.ws[:len(on)] {
		if w.q == nil {
			// The turn left (its ctx ended, or it expired) during the
			// take: its take goes back, even if Close is under way.
			back[on[i]] = back[on[i]].add(w.est)
			continue
		}
		if c.p.next() != w {
			for j := i; j < len(on); j++ {
				back[on[j]] = back[on[j]].add(c.ws[j].est)
			}
			break
		}
		waited := now.Sub(w.enq)
		c.p.admit(w, now)
		s.setLength(w.class, -1)
		s.observeWait(w.class, waited)
		w.ready <- result{g: s.grant(on[i], w.class, w.est, waited)}
	}
	if len(back) == 0 && len(on) < len(c.ws) {
		// The next turn is the one the buckets had no room for.
		c.p.blockedUntil = now.Add(wait)
	}
	if c.p.n == 0 && s.pools[c.p.id] == c.p {
		// (A pool whose turns all left during the call is gone
		// already, and its ID may name a new one.)
		delete(s.pools, c.p.id)
	}
	s.mu.Unlock()
	if len(back) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), giveBackTimeout)
		defer cancel()
		for k, c := range back {
			s.giveBack(ctx, k, c, "a turn's take")
		}
	}
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
