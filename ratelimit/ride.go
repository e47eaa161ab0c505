package ratelimit

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Ride is a turn's Take, on one key of its pool, prepared to ride in
// another operation's pipeline to the same Redis (the proxy's admission
// update), so that taking a key costs the turn no round trip of its own.
//
// Its owner queues it (Queue, which the other operation calls while it
// builds its pipeline), then either turns it into the turn's Grant or,
// when what it rode with refused the turn, gives it back with Undo: a
// refused turn consumes no rate. A Ride is used by one goroutine.
//
// A ride keeps the scheduler's order: Scheduler.Ride makes one only when
// no turn of the pool waits, as Acquire's fast path takes only then, and
// a take that finds no room falls back to Acquire, which queues the turn
// in its class.
type Ride struct {
	s     *Scheduler
	r     *Redis
	class string
	keys  []Key // the pool, as the caller gave it (for Acquire)
	k     Key   // the key it takes on, measured
	est   Cost
	cmd   *goredis.Cmd // once queued
}

// Ride prepares a Take of est for a turn of class on keys, to ride in a
// pipeline (see Ride); nil when the buckets are not in Redis, the
// scheduler is closed, or a turn of the pool waits: the turn then
// Acquires as usual. On a pool of several keys the ride takes on the key
// with the most headroom the scheduler last saw (its takes answer it),
// not on one read anew, which would cost the round trip the ride saves.
func (s *Scheduler) Ride(class string, keys []Key, est Cost) *Ride {
	r := redisOf(s.buckets)
	if r == nil || len(keys) == 0 {
		return nil
	}
	m := measured(keys)
	s.mu.Lock()
	p := s.pools[poolID(keys)]
	if s.closed || p != nil && p.n > 0 {
		s.mu.Unlock()
		return nil
	}
	k := m[0]
	best := s.seenHeadroom(k.ID)
	for _, o := range m[1:] {
		if h := s.seenHeadroom(o.ID); h > best {
			k, best = o, h
		}
	}
	s.mu.Unlock()
	if k.Limits.unlimited() {
		return nil
	}
	return &Ride{s: s, r: r, class: s.class(class), keys: keys, k: k, est: est}
}

// Queue adds the take to p when client is the buckets' own Redis client,
// and reports whether it did; a ride is queued once.
func (rd *Ride) Queue(ctx context.Context, client any, p goredis.Pipeliner) bool {
	if rd.cmd != nil || client != any(rd.r.rdb) {
		return false
	}
	n := amounts(rd.est)
	keys, argv := rd.r.call(rd.k, n[0], n[1], n[2])
	rd.cmd = p.EvalSha(ctx, takeScript.hash, keys, argv...)
	return true
}

// Sent reports whether the take was queued in a pipeline.
func (rd *Ride) Sent() bool { return rd.cmd != nil }

// Grant is the turn's grant, once the pipeline the take rode in ran: on
// the ride's key when its take admitted the turn. Otherwise (no room, not
// sent, a script the server lost, an error) it is Acquire's, which waits
// in the class's queue as any turn does. A take whose answer was lost is
// not given back (see Undo).
func (rd *Ride) Grant(ctx context.Context) (*Grant, error) {
	if rd.cmd != nil {
		ok, err := rd.result()
		if err == nil && ok {
			rd.cmd = nil
			rd.s.mu.Lock()
			rd.s.observeWait(rd.class, 0)
			rd.s.mu.Unlock()
			return rd.s.grant(rd.k, rd.class, rd.est, 0), nil
		}
		rd.cmd = nil
	}
	return rd.s.Acquire(ctx, rd.class, rd.keys, rd.est)
}

// Undo gives back what the take took: the operation it rode with refused
// the turn. A ride not sent, or whose take found no room, gives nothing
// back; nor does one whose answer was lost (Redis timed out or went
// away): it may or may not have taken, and a give-back would wait on the
// same Redis again, on the refused turn's path. Such a take is one turn's
// estimate, which the bucket refills within its burst's time.
func (rd *Ride) Undo(ctx context.Context) {
	if rd == nil || rd.cmd == nil {
		return
	}
	ok, err := rd.result()
	rd.cmd = nil
	if err != nil || !ok || rd.est.zero() {
		return
	}
	if err := rd.s.buckets.Settle(ctx, rd.k, rd.est.neg(), Unreported()); err != nil {
		rd.s.log.ErrorContext(ctx, "ratelimit: giving back a refused turn's take", "key", rd.k.ID, "err", err)
	}
	rd.s.released()
}

// result reads the take's reply: whether it admitted the turn. The
// headroom it answers goes to the Observer and to what later rides
// choose their key by.
func (rd *Ride) result() (bool, error) {
	v, err := rd.cmd.Result()
	if err != nil {
		return false, fmt.Errorf("ratelimit: key %s: %w", rd.k.ID, err)
	}
	ok, _, h, err := takeReply(rd.k, v)
	if err != nil {
		return false, err
	}
	rd.s.noteHeadroom(rd.k.ID, h)
	return ok, nil
}

// takeReply checks the take script's reply {admitted, wait ms, headroom
// in millionths}.
func takeReply(k Key, v any) (bool, time.Duration, float64, error) {
	reply, ok := v.([]any)
	if !ok || len(reply) != 3 {
		return false, 0, 0, fmt.Errorf("%w: take on key %s answered %T %v", ErrReply, k.ID, v, v)
	}
	var ints [3]int64
	for i, e := range reply {
		if ints[i], ok = e.(int64); !ok {
			return false, 0, 0, fmt.Errorf("%w: take on key %s answered %T in %v", ErrReply, k.ID, e, v)
		}
	}
	h := float64(ints[2]) / 1e6
	if ints[0] == 1 {
		return true, 0, h, nil
	}
	return false, clampWait(time.Duration(ints[1]) * time.Millisecond), h, nil
}

// unwrapper is Buckets wrapping other Buckets (the proxy's deadline).
type unwrapper interface{ Unwrap() Buckets }

// redisOf is the Redis buckets b is or wraps; nil when it is neither.
func redisOf(b Buckets) *Redis {
	for range 8 {
		switch v := b.(type) {
		case *Redis:
			return v
		case unwrapper:
			b = v.Unwrap()
		default:
			return nil
		}
	}
	return nil
}
