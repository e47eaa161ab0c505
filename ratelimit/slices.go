package ratelimit

import (
	"context"
	"time"
)

// A slice is capacity of one key that a replica took from the shared
// Redis bucket ahead of its turns, and then spends in memory: while a
// key is roomy, most of a replica's turns on it take and settle without
// a script call.
//
// A turn whose take goes to Redis anyway (the key has no slice here, or
// too little) may ask for one: its take script takes the turn's estimate
// and then, only when the bucket keeps at least half of every limited
// dimension's burst free after it, sliceTurns more of that estimate,
// capped at a sliceShare-th of each burst. Turns after it take from the
// slice, and their settles (the correction from estimate to use) go into
// it, as long as the provider's rate-limit headers on the reply lower
// nothing (a key reported near its limit is settled in Redis, and its
// slice given back). What is left of a slice goes back to the bucket
// after sliceLife, when the key is cooled, or when the scheduler closes.
//
// So the provider's limits hold exactly as before: a slice was taken
// from the shared bucket, and no replica spends more than it took. What
// a slice changes is who may spend that capacity: near a key's limit
// there is no slice (the script grants none below half a burst free) and
// every take is the bucket's own, as without slices; while the key is
// roomy, each replica may hold up to a sliceShare-th of a burst for at
// most sliceLife that the others do not see. A replica that dies with a
// slice has taken it all, once: the bucket refills it within its burst's
// time.
const (
	sliceTurns = 64
	sliceShare = 16
	sliceLife  = 500 * time.Millisecond
)

// slice is a key's slice in this scheduler.
type slice struct {
	key     Key    // as its last ask named it
	left    Cost   // not yet spent
	granted Cost   // left when last given: settles never raise left above it
	grant   uint64 // the generation of the last grant (its expiry's)
	ask     uint64 // the generation of the last ask (its answer's)
	// asking: a turn's take asks Redis for more (since asked); one ask
	// per key at a time. An ask unanswered for sliceLife (its turn went
	// away) no longer stops another.
	asking bool
	asked  time.Time
	// last is when a take on the key last went to Redis: a slice is
	// asked for only on a key this replica takes often (see busyGap).
	last time.Time
}

// busyGap is the most between two of a replica's takes on a key that go
// to Redis for the second to ask for a slice: one turn in 62 ms, 16 a
// second. A replica's turns rarer than that would leave most of a slice
// to go back unspent, one more script each time.
const busyGap = sliceLife / 8

// live reports whether sl has a slice to spend or settle into.
func (sl *slice) live() bool { return sl != nil && sl.granted != (Cost{}) }

// covers reports whether c fits in what is left of sl.
func (sl *slice) covers(c Cost) bool {
	return sl.live() && c.Requests <= sl.left.Requests && c.Input <= sl.left.Input && c.Output <= sl.left.Output
}

// low reports whether less than half of what sl was given is left: the
// next take asks for more while it spends the rest.
func (sl *slice) low() bool {
	return 2*sl.left.Requests < sl.granted.Requests || 2*sl.left.Input < sl.granted.Input ||
		2*sl.left.Output < sl.granted.Output
}

// fromSlice takes c from k's slice, and reports whether it could.
func (s *Scheduler) fromSlice(k Key, c Cost) bool {
	if !s.slicing {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slices[k.ID]
	if !sl.covers(c) {
		return false
	}
	sl.left = sl.left.sub(c)
	return true
}

// sliceRide is a Ride of est on one of keys (measured) served from its
// slice, asking for more when the slice runs low; nil when no slice
// covers est. s.mu is held.
func (s *Scheduler) sliceRide(keys []Key, est Cost) *Ride {
	if !s.slicing {
		return nil
	}
	for _, k := range keys {
		sl := s.slices[k.ID]
		if k.Limits.unlimited() || !sl.covers(est) {
			continue
		}
		sl.left = sl.left.sub(est)
		rd := &Ride{k: k, est: est, local: true}
		if sl.low() {
			rd.ask, _, rd.askGen = s.askLocked(sl, k, est, false)
		}
		return rd
	}
	return nil
}

// sliceAsk is what a take of est on k, which its slice does not cover,
// asks for beyond est (zero for nothing: the key's last take here was
// more than busyGap ago, or an ask is out), what is left of the slice
// (given back in the same call), and the ask's generation.
func (s *Scheduler) sliceAsk(k Key, est Cost) (ask, back Cost, gen uint64) {
	if !s.slicing || k.Advisory || k.Limits.unlimited() {
		return Cost{}, Cost{}, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Cost{}, Cost{}, 0
	}
	sl := s.slices[k.ID]
	if sl == nil {
		sl = &slice{}
		s.slices[k.ID] = sl
	}
	now := s.now()
	busy := !sl.last.IsZero() && now.Sub(sl.last) < busyGap
	sl.last = now
	if !busy {
		return Cost{}, Cost{}, 0
	}
	return s.askLocked(sl, k, est, true)
}

// askLocked marks sl asked for, unless an ask is out, and returns the
// ask (see sliceAsk); with giveUp, what is left of sl goes back with it.
// s.mu is held.
func (s *Scheduler) askLocked(sl *slice, k Key, est Cost, giveUp bool) (ask, back Cost, gen uint64) {
	now := s.now()
	if sl.asking && now.Sub(sl.asked) < sliceLife {
		return Cost{}, Cost{}, 0
	}
	if ask = sliceOf(k, est); ask.zero() {
		return Cost{}, Cost{}, 0
	}
	if giveUp {
		back = sl.left
		sl.left, sl.granted = Cost{}, Cost{}
	}
	s.sliceGen++
	sl.key, sl.asking, sl.asked, sl.ask = k, true, now, s.sliceGen
	return ask, back, sl.ask
}

// sliceOf is the slice a take of est on k asks for: sliceTurns of est in
// each limited dimension, at most a sliceShare-th of its burst; zero when
// that is less than est in some dimension (a key too tight for slices).
func sliceOf(k Key, est Cost) Cost {
	lim, b, n := perMinute(k.Limits), bursts(k.Limits), amounts(est)
	var out [dims]int64
	for d := range out {
		if lim[d] == 0 || n[d] <= 0 {
			continue
		}
		out[d] = min(n[d]*sliceTurns, b[d]/sliceShare)
		if out[d] < n[d] {
			return Cost{}
		}
	}
	c := Cost{Requests: int(out[dimRequests]), Input: out[dimInput], Output: out[dimOutput]}
	if c.zero() {
		return Cost{}
	}
	return c
}

// sliceAnswer records what Redis answered the ask gen for ask on k:
// granted, or not (nor when the answer was lost).
func (s *Scheduler) sliceAnswer(k Key, gen uint64, ask Cost, granted bool) {
	if back := s.answered(k, gen, ask, granted); !back.zero() {
		s.giveToBucket(k, back)
	}
}

// answered is sliceAnswer under s.mu; it returns what goes back to the
// bucket at once.
func (s *Scheduler) answered(k Key, gen uint64, ask Cost, granted bool) Cost {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slices[k.ID]
	if sl == nil || sl.ask != gen || s.closed {
		// A cooling or Close gave the slice up: what came goes back.
		if granted {
			return ask
		}
		return Cost{}
	}
	sl.asking = false
	if !granted {
		return Cost{}
	}
	sl.left = Cost{Requests: sl.left.Requests + ask.Requests, Input: sl.left.Input + ask.Input, Output: sl.left.Output + ask.Output}
	sl.granted = sl.left
	s.sliceGen++
	sl.grant = s.sliceGen
	next := sl.grant
	time.AfterFunc(sliceLife, func() { s.sliceExpired(k, next) })
	return Cost{}
}

// sliceExpired gives back what is left of k's slice, unless it was given
// more since grant gen.
func (s *Scheduler) sliceExpired(k Key, gen uint64) {
	s.mu.Lock()
	sl := s.slices[k.ID]
	if sl == nil || sl.grant != gen {
		s.mu.Unlock()
		return
	}
	left := sl.left
	sl.left, sl.granted = Cost{}, Cost{}
	if !sl.asking {
		delete(s.slices, k.ID)
	}
	s.mu.Unlock()
	s.giveToBucket(k, left)
}

// dropSlice gives back what is left of k's slice now: the key was
// cooled, or its provider reported less than a burst left.
func (s *Scheduler) dropSlice(ctx context.Context, k Key) {
	s.settleBucket(ctx, k, s.surrender(k), leftover)
}

// surrender ends k's slice and returns what was left of it, for a
// settle going to Redis to give back: the provider reported less than a
// burst left, and the key is no longer roomy. A slice still asked for
// goes back when it comes (sliceAnswer).
func (s *Scheduler) surrender(k Key) Cost {
	if !s.slicing {
		return Cost{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slices[k.ID]
	if sl == nil {
		return Cost{}
	}
	delete(s.slices, k.ID)
	return sl.left
}

// leftover names a slice's give-back in a failure's log.
const leftover = "what is left of a slice"

// giveToBucket gives c back to k's bucket, on the scheduler's own
// context (a slice's leftover, after its turns ended).
func (s *Scheduler) giveToBucket(k Key, c Cost) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), sliceLife)
	defer cancel()
	s.settleBucket(ctx, k, c, leftover)
}

// settleBucket gives c, what, back to k's bucket, logging a failure, and
// tells the dispatcher capacity came back.
func (s *Scheduler) settleBucket(ctx context.Context, k Key, c Cost, what string) {
	if c.zero() {
		return
	}
	if err := s.buckets.Settle(ctx, k, c.neg(), Unreported()); err != nil {
		s.log.ErrorContext(ctx, "ratelimit: giving back "+what, "key", k.ID, "err", err)
	}
	s.released()
}

// intoSlice settles delta (measured minus estimated) and the provider's
// report r on k in k's slice, and reports whether it could: the slice
// is live, r lowers nothing (see lowersNothing), and the slice covers a
// positive delta. A negative delta gives back to the slice, never above
// what it was granted: a give-back beyond that (the estimate of a turn
// that took in Redis) is dropped, as Redis drops one into a full bucket.
func (s *Scheduler) intoSlice(k Key, delta Cost, r Remaining) bool {
	if !s.slicing || !lowersNothing(k, r) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slices[k.ID]
	if !sl.live() {
		return false
	}
	left := sl.left.sub(delta)
	if left.Requests < 0 || left.Input < 0 || left.Output < 0 {
		return false
	}
	sl.left = Cost{
		Requests: min(left.Requests, sl.granted.Requests),
		Input:    min(left.Input, sl.granted.Input),
		Output:   min(left.Output, sl.granted.Output),
	}
	return true
}

// giveBack gives c (a take never used) back to k's slice when it has
// one, else to its bucket.
func (s *Scheduler) giveBack(ctx context.Context, k Key, c Cost, what string) {
	if c.zero() || s.intoSlice(k, c.neg(), Unreported()) {
		return
	}
	s.settleBucket(ctx, k, c, what)
}

// lowersNothing reports whether syncing k to r would leave every bucket
// as it is (see syncLua): in each limited dimension, the provider reports
// no count or at least a burst left, and no reset that would count.
func lowersNothing(k Key, r Remaining) bool {
	left, reset, b := reported(r), resets(r), bursts(k.Limits)
	for d := range left {
		if b[d] == 0 {
			continue
		}
		if left[d] >= 0 && left[d] < b[d] || reset[d] >= 0 && left[d] <= 0 {
			return false
		}
	}
	return true
}

// closeSlices gives back what is left of every slice, before the
// scheduler's context ends.
func (s *Scheduler) closeSlices() {
	s.mu.Lock()
	type back struct {
		k Key
		c Cost
	}
	var all []back
	for id, sl := range s.slices {
		if sl.live() && !sl.left.zero() {
			all = append(all, back{k: sl.key, c: sl.left})
		}
		delete(s.slices, id)
	}
	s.mu.Unlock()
	for _, b := range all {
		s.giveToBucket(b.k, b.c)
	}
}
