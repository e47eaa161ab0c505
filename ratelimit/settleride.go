package ratelimit

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// SettleRide is SettleAll prepared to ride in another operation's
// pipeline to the same Redis (a flush's record updates, or its tenant
// charges), so that a flush's key settles cost no round trip of their
// own. Its owner hands it to that operation (which calls Queue while it
// builds its pipeline), waits for the operation, and then calls Finish,
// which reads the settles' replies and sends those that did not ride, as
// SettleAll sends them. Queue and Finish are not called concurrently.
type SettleRide struct {
	groups []*settleGroup
	// A ride's first group and its first settle, in place: most rides
	// are one turn's settle of one key, which then costs one allocation.
	first  settleGroup
	firsts [1]*settleGroup
}

// settleGroup is a SettleRide's settles of one scheduler.
type settleGroup struct {
	s      *Scheduler
	keys   []Key
	deltas []Cost
	rs     []Remaining
	cmds   []*goredis.Cmd // once queued; nil where nothing is sent
	queued bool
	// fused is 1 + the index of the settle that went in a take's own
	// script call (Fuse), whose reply is the take's; 0 for none.
	fused    int
	fusedCmd *goredis.Cmd
	// The room of the first settle, before keys, deltas and rs grow.
	key1   [1]Key
	delta1 [1]Cost
	r1     [1]Remaining
}

// RideSettles prepares Settle of each settlement (a nil Grant does
// nothing): each grant's estimate is marked corrected here, once, and its
// reply's rate-limit headers read. Nil when none has anything to send.
func RideSettles(ss []Settlement) *SettleRide {
	var sr *SettleRide
	for _, st := range ss {
		g := st.Grant
		if g == nil {
			continue
		}
		var delta Cost
		if g.settle() {
			delta = st.Actual.sub(g.est)
		}
		r, ok := ParseHeaders(st.Header, g.s.now())
		if !ok || lowersNothing(g.Key, r) {
			// Headers that lower nothing (a roomy key's) are not sent.
			r, ok = Unreported(), false
		}
		if delta.zero() && !ok {
			continue
		}
		if ok {
			// The key is no longer roomy: its slice goes back with
			// this settle.
			delta = delta.sub(g.s.surrender(g.Key))
		} else if g.s.intoSlice(g.Key, delta, r) {
			continue
		}
		if sr == nil {
			sr = &SettleRide{}
		}
		grp := sr.group(g.s)
		grp.keys, grp.deltas, grp.rs = append(grp.keys, g.Key), append(grp.deltas, delta), append(grp.rs, r)
	}
	return sr
}

// group is sr's group of s, made on first use: a flush's settles are most
// often all of one scheduler.
func (sr *SettleRide) group(s *Scheduler) *settleGroup {
	for _, grp := range sr.groups {
		if grp.s == s {
			return grp
		}
	}
	if len(sr.groups) == 0 {
		grp := &sr.first
		grp.s = s
		grp.keys, grp.deltas, grp.rs = grp.key1[:0], grp.delta1[:0], grp.r1[:0]
		sr.firsts[0] = grp
		sr.groups = sr.firsts[:1]
		return grp
	}
	grp := &settleGroup{s: s}
	sr.groups = append(sr.groups, grp)
	return grp
}

// Queue adds to p the settles of every scheduler whose buckets are in
// client's Redis, and reports whether it added any.
func (sr *SettleRide) Queue(ctx context.Context, client any, p goredis.Pipeliner) bool {
	added := false
	for _, grp := range sr.groups {
		r := redisOf(grp.s.buckets)
		if grp.queued || r == nil || client != any(r.rdb) {
			continue
		}
		grp.queued, grp.cmds = true, make([]*goredis.Cmd, len(grp.keys))
		for i, k := range grp.keys {
			if grp.fused == i+1 {
				grp.cmds[i] = grp.fusedCmd
				continue
			}
			if !grp.sends(i) {
				continue
			}
			keys, argv := r.call(k, settleArgs(grp.deltas[i], grp.rs[i])...)
			grp.cmds[i] = p.EvalSha(ctx, settleScript.hash, keys, argv...)
			added = true
		}
	}
	return added
}

// sends reports whether settle i has anything to send (settles).
func (grp *settleGroup) sends(i int) bool {
	return settles(grp.keys[i], grp.deltas[i], grp.rs[i])
}

// Fused is a turn's take riding with the key settles of the turns before
// it (Fuse).
type Fused struct {
	rd *Ride
	sr *SettleRide
}

// Fuse is one rider for a turn's take rd and the key settles sr that ride
// with it in the same pipeline: a settle on the key rd takes on (most
// often the thread's previous turn on the same key) goes in the take's
// own script call (settleTakeScript), one script in Redis instead of two,
// and before the take, which sees the capacity it gives back. The other
// settles ride as sr alone would. Either may be nil. The take's reply is
// read as a Ride's (Grant, Undo), the settles' as a SettleRide's (Finish).
func Fuse(rd *Ride, sr *SettleRide) *Fused {
	return &Fused{rd: rd, sr: sr}
}

// Queue adds the take and the settles to p (see Ride.Queue and
// SettleRide.Queue), and reports whether it added any.
func (f *Fused) Queue(ctx context.Context, client any, p goredis.Pipeliner) bool {
	added := false
	if rd := f.rd; rd != nil && rd.cmd == nil && !rd.local && client == any(rd.r.rdb) {
		if grp, i := f.sr.onKeyOf(rd); grp != nil && !rd.ask.zero() {
			// The take asks for a slice: the settle and what is left of
			// the slice before go in its call, as one correction.
			rd.queueSlice(ctx, p, settleArgs(grp.deltas[i].sub(rd.back), grp.rs[i]))
			grp.fused, grp.fusedCmd, added = i+1, rd.cmd, true
		} else if grp != nil {
			n := amounts(rd.est)
			args := append(settleArgs(grp.deltas[i], grp.rs[i]), n[0], n[1], n[2])
			keys, argv := rd.r.call(rd.k, args...)
			if !rd.r.fusedSent.Swap(true) {
				// Ahead of its first call, so that no turn pays a NOSCRIPT
				// for it (on a cluster the load may reach another node:
				// Finish then loads it on every node).
				p.ScriptLoad(ctx, settleTakeScript.src)
			}
			rd.cmd = p.EvalSha(ctx, settleTakeScript.hash, keys, argv...)
			grp.fused, grp.fusedCmd, added = i+1, rd.cmd, true
		}
	}
	if f.rd != nil && f.rd.Queue(ctx, client, p) {
		added = true
	}
	if f.sr != nil && f.sr.Queue(ctx, client, p) {
		added = true
	}
	return added
}

// onKeyOf is sr's first settle, not yet queued, with something to send on
// rd's key (the same limits, in the same scheduler's Redis).
func (sr *SettleRide) onKeyOf(rd *Ride) (*settleGroup, int) {
	if sr == nil {
		return nil, 0
	}
	for _, grp := range sr.groups {
		if grp.s != rd.s || grp.queued || grp.fused != 0 || redisOf(grp.s.buckets) != rd.r {
			continue
		}
		for i, k := range grp.keys {
			if k == rd.k && grp.sends(i) {
				return grp, i
			}
		}
	}
	return nil, 0
}

// Finish reads the replies of the settles that rode (sending again, by
// its text, one whose script the server lost) and sends the others, those
// of one scheduler on Redis in one round trip; errors are logged, as
// SettleAll logs them. A nil SettleRide does nothing.
func (sr *SettleRide) Finish(ctx context.Context) {
	if sr == nil {
		return
	}
	for _, grp := range sr.groups {
		grp.finish(ctx)
	}
}

func (grp *settleGroup) finish(ctx context.Context) {
	s := grp.s
	errs := make([]error, len(grp.keys))
	if grp.queued {
		var lost []int // settles whose script the server lost
		for i, cmd := range grp.cmds {
			if cmd == nil {
				continue
			}
			v, err := cmd.Result()
			if noScript(err) {
				lost = append(lost, i)
				if grp.fused == i+1 {
					// Sent by its text below, alone; the next fused
					// call finds its script again.
					if r := redisOf(s.buckets); r != nil && r.rdb.ScriptLoad(ctx, settleTakeScript.src).Err() != nil {
						r.fusedSent.Store(false)
					}
				}
				continue
			}
			if err != nil {
				err = fmt.Errorf("ratelimit: key %s: %w", grp.keys[i].ID, err)
			}
			if grp.fused == i+1 {
				// Answered with the take's reply: the settle ran.
				errs[i] = err
				continue
			}
			errs[i] = checkZero("settle", grp.keys[i], v, err)
		}
		if len(lost) > 0 {
			// The first loads the script again; the others follow in one
			// round trip.
			i := lost[0]
			errs[i] = s.buckets.Settle(ctx, grp.keys[i], grp.deltas[i], grp.rs[i])
			grp.resend(ctx, lost[1:], errs)
		}
	} else {
		all := make([]int, len(grp.keys))
		for i := range all {
			all[i] = i
		}
		grp.resend(ctx, all, errs)
	}
	released := false
	for i, k := range grp.keys {
		if errs[i] != nil {
			s.log.ErrorContext(ctx, "ratelimit: settling a turn's estimate and rate-limit headers", "key", k.ID, "err", errs[i])
		}
		d := grp.deltas[i]
		released = released || d.Requests < 0 || d.Input < 0 || d.Output < 0
	}
	if released {
		s.released()
	}
}

// resend settles grp's settles at idx again, in one call to the buckets
// when they batch, their errors into errs.
func (grp *settleGroup) resend(ctx context.Context, idx []int, errs []error) {
	if len(idx) == 0 {
		return
	}
	b, ok := grp.s.buckets.(BatchSettler)
	if !ok || len(idx) == 1 {
		for _, i := range idx {
			errs[i] = grp.s.buckets.Settle(ctx, grp.keys[i], grp.deltas[i], grp.rs[i])
		}
		return
	}
	keys, deltas, rs := make([]Key, len(idx)), make([]Cost, len(idx)), make([]Remaining, len(idx))
	for j, i := range idx {
		keys[j], deltas[j], rs[j] = grp.keys[i], grp.deltas[i], grp.rs[i]
	}
	for j, err := range b.SettleBatch(ctx, keys, deltas, rs) {
		errs[idx[j]] = err
	}
}
