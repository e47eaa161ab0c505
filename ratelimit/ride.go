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
	// local: the take came from the key's slice (slices.go), in memory;
	// nothing goes to Redis.
	local bool
	// ask is the slice the take asks for beyond est, back what is left
	// of the key's slice before, given back in the same script call;
	// both zero for a plain take; askGen is the ask's, for its answer.
	ask, back Cost
	askGen    uint64
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
	if rd := s.sliceRide(m, est); rd != nil {
		s.mu.Unlock()
		rd.s, rd.r, rd.class, rd.keys = s, r, s.class(class), keys
		return rd
	}
	s.mu.Unlock()
	if k.Limits.unlimited() {
		return nil
	}
	rd := &Ride{s: s, r: r, class: s.class(class), keys: keys, k: k, est: est}
	rd.ask, rd.back, rd.askGen = s.sliceAsk(k, est)
	return rd
}

// Queue adds the take to p when client is the buckets' own Redis client,
// and reports whether it did; a ride is queued once.
func (rd *Ride) Queue(ctx context.Context, client any, p goredis.Pipeliner) bool {
	if rd.cmd != nil || rd.local && rd.ask.zero() || client != any(rd.r.rdb) {
		return false
	}
	n := amounts(rd.est)
	if !rd.ask.zero() {
		rd.queueSlice(ctx, p, settleArgs(rd.back.neg(), Unreported()))
		return true
	}
	keys, argv := rd.r.call(rd.k, n[0], n[1], n[2])
	rd.cmd = p.EvalSha(ctx, takeScript.hash, keys, argv...)
	return true
}

// queueSlice adds to p the take asking for a slice (sliceTakeScript),
// after settle, the arguments of a settle on the same key (settleArgs).
func (rd *Ride) queueSlice(ctx context.Context, p goredis.Pipeliner, settle []any) {
	n, a := amounts(rd.est), amounts(rd.ask)
	if rd.local {
		// Taken from the slice already: the call only asks for more.
		n = [dims]int64{}
	}
	keys, argv := rd.r.call(rd.k, append(settle, n[0], n[1], n[2], a[0], a[1], a[2])...)
	if !rd.r.sliceSent.Swap(true) {
		// Ahead of its first call, as the fused script (Fused.Queue).
		p.ScriptLoad(ctx, sliceTakeScript.src)
	}
	rd.cmd = p.EvalSha(ctx, sliceTakeScript.hash, keys, argv...)
}

// Sent reports whether the take was made: queued in a pipeline, or
// served by the key's slice with nothing to ask Redis for.
func (rd *Ride) Sent() bool { return rd.cmd != nil || rd.local && rd.ask.zero() }

// Grant is the turn's grant, once the pipeline the take rode in ran: on
// the ride's key when its take admitted the turn. Otherwise (no room, not
// sent, a script the server lost, an error) it is Acquire's, which waits
// in the class's queue as any turn does. A take whose answer was lost is
// not given back (see Undo).
func (rd *Ride) Grant(ctx context.Context) (*Grant, error) {
	if rd.local {
		rd.local = false
		rd.topUp()
		rd.s.mu.Lock()
		rd.s.observeWait(rd.class, 0)
		rd.s.mu.Unlock()
		return rd.s.grant(rd.k, rd.class, rd.est, 0), nil
	}
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
	} else {
		rd.unsent()
	}
	return rd.s.Acquire(ctx, rd.class, rd.keys, rd.est)
}

// topUp reads the answer of a ride served by its slice that asked for
// more in the same pipeline.
func (rd *Ride) topUp() {
	if rd.cmd == nil {
		rd.unsent()
		return
	}
	_, _ = rd.result() // the take was the slice's; an error only denies more
	rd.cmd = nil
}

// unsent ends a ride that asked for a slice and never went: the key may
// be asked again, and what was left of its slice goes back.
func (rd *Ride) unsent() {
	if rd.ask.zero() {
		return
	}
	rd.s.sliceAnswer(rd.k, rd.askGen, rd.ask, false)
	rd.ask = Cost{}
	rd.s.giveToBucket(rd.k, rd.back)
}

// Undo gives back what the take took: the operation it rode with refused
// the turn; to the key's slice when it has one (a take the slice served
// goes back to it). A ride not sent, or whose take found no room, gives
// nothing back; nor does one whose answer was lost (Redis timed out or went
// away): it may or may not have taken, and a give-back would wait on the
// same Redis again, on the refused turn's path. Such a take is one turn's
// estimate, which the bucket refills within its burst's time.
func (rd *Ride) Undo(ctx context.Context) {
	if rd == nil {
		return
	}
	if rd.local {
		rd.local = false
		rd.topUp()
		rd.s.giveBack(ctx, rd.k, rd.est, "a refused turn's take")
		return
	}
	if rd.cmd == nil {
		rd.unsent()
		return
	}
	ok, err := rd.result()
	rd.cmd = nil
	if err != nil || !ok {
		return
	}
	rd.s.giveBack(ctx, rd.k, rd.est, "a refused turn's take")
}

// result reads the take's reply: whether it admitted the turn. The
// headroom it answers goes to the Observer and to what later rides
// choose their key by; a slice it was given, to the key's slice.
func (rd *Ride) result() (bool, error) {
	asked := !rd.ask.zero()
	if asked {
		// Answered once: whatever it says, the key may be asked again.
		defer func() { rd.ask = Cost{} }()
	}
	v, err := rd.cmd.Result()
	if err != nil {
		if asked {
			if noScript(err) {
				rd.r.sliceSent.Store(false)
			}
			rd.s.sliceAnswer(rd.k, rd.askGen, rd.ask, false)
		}
		return false, fmt.Errorf("ratelimit: key %s: %w", rd.k.ID, err)
	}
	if asked {
		ok, h, sliced, err := sliceReply(rd.k, v)
		rd.s.sliceAnswer(rd.k, rd.askGen, rd.ask, err == nil && sliced)
		if err != nil {
			return false, err
		}
		rd.s.noteHeadroom(rd.k.ID, h)
		return ok, nil
	}
	ok, _, h, err := takeReply(rd.k, v)
	if err != nil {
		return false, err
	}
	rd.s.noteHeadroom(rd.k.ID, h)
	return ok, nil
}

// sliceReply checks sliceTakeScript's reply: the take's, and then 1 when
// the slice was taken, else 0.
func sliceReply(k Key, v any) (ok bool, h float64, sliced bool, err error) {
	reply, isList := v.([]any)
	if !isList || len(reply) != 4 {
		return false, 0, false, fmt.Errorf("%w: take with a slice on key %s answered %T %v", ErrReply, k.ID, v, v)
	}
	s, isInt := reply[3].(int64)
	if !isInt || s != 0 && s != 1 {
		return false, 0, false, fmt.Errorf("%w: take with a slice on key %s answered %v", ErrReply, k.ID, v)
	}
	ok, _, h, err = takeReply(k, reply[:3])
	return ok, h, s == 1, err
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
