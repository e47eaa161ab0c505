package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/trajectory"
)

// scanChunk is how many index members List reads per round trip pair.
const scanChunk = 256

// pruneBatch bounds the expired index entries one List clears, so a List
// after a long idle spell stays quick; the next ones clear the rest.
const pruneBatch = 256

// List implements trajectory.Store. It first clears a batch of index
// entries whose records have expired. The children of a named parent come
// from the parent's list; everything else walks the created index newest
// first, fetching records a chunk per round trip and filtering them here,
// as the memory store does, until the page is full.
func (s *Store) List(ctx context.Context, f trajectory.Filter) ([]*trajectory.Record, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	shards, err := s.dir.shards(ctx, s.rdb)
	if err != nil {
		return nil, s.fail(ctx, "SMEMBERS "+recordSlots, err)
	}
	if err := s.prune(ctx, shards); err != nil {
		return nil, err
	}
	limit := trajectory.PageLimit(f.Limit)
	if f.ParentID != nil && *f.ParentID != "" && checkID(*f.ParentID) == nil {
		parent, err := s.readOne(ctx, *f.ParentID)
		switch {
		case err == nil:
			return s.listChildren(ctx, parent.rec, f, limit)
		case !errors.Is(err, trajectory.ErrNotFound):
			return nil, err
		}
		// An expired parent may still have children: walk the index.
	}
	if f.State == trajectory.CallingModel {
		return s.listCalling(ctx, shards, f, limit)
	}
	return s.scan(ctx, shards, f, limit)
}

func (s *Store) listChildren(ctx context.Context, parent *trajectory.Record, f trajectory.Filter, limit int) ([]*trajectory.Record, error) {
	recs, err := s.fetch(ctx, parent.Children)
	if err != nil {
		return nil, err
	}
	var out []*trajectory.Record
	for _, r := range recs {
		if r != nil && f.Match(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *trajectory.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out[:min(len(out), limit)], nil
}

// scan walks the created indexes of every slot the directory lists as
// one index, from the newest member. Members whose record is gone, or is a
// later record under the same id, are removed.
func (s *Store) scan(ctx context.Context, shards []string, f trajectory.Filter, limit int) ([]*trajectory.Record, error) {
	keys := make([]string, len(shards))
	for i, sh := range shards {
		keys[i] = idxCreated(sh)
	}
	walk := newLexMerge(s.rdb, keys, mergeChunk(len(keys)))
	var out []*trajectory.Record
	var stale []staleMember
	members := make([]string, 0, scanChunk)
	from := make([]int, 0, scanChunk)
	for len(out) < limit {
		members, from = members[:0], from[:0]
		for len(members) < scanChunk {
			m, k, ok, err := walk.next(ctx)
			if err != nil {
				return nil, s.fail(ctx, "ZRANGE created indexes", err)
			}
			if !ok {
				break
			}
			members, from = append(members, m), append(from, k)
		}
		if len(members) == 0 {
			break
		}
		ids := make([]string, len(members))
		for i, m := range members {
			ids[i] = memberID(m)
		}
		recs, err := s.fetch(ctx, ids)
		if err != nil {
			return nil, err
		}
		for i, r := range recs {
			if r == nil || member(r.ID, r.CreatedAt) != members[i] {
				stale = append(stale, staleMember{shard: shards[from[i]], member: members[i]})
				continue
			}
			if f.Match(r) {
				out = append(out, r)
				if len(out) == limit {
					break
				}
			}
		}
	}
	if len(stale) > 0 {
		pipe := s.rdb.Pipeline()
		for _, m := range stale {
			pipe.ZRem(ctx, idxCreated(m.shard), m.member)
			pipe.ZRem(ctx, idxExpires(m.shard), m.member)
			pipe.ZRem(ctx, idxCalling(m.shard), m.member)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, s.fail(ctx, "ZREM stale index entries", err)
		}
	}
	return out, nil
}

// staleMember is an index entry to remove, with the slot tag of its index.
type staleMember struct{ shard, member string }

// mergeChunk is how many members a walk of n indexes reads from each per
// round trip: a page's worth from a few indexes, a few from many.
func mergeChunk(n int) int {
	return min(max(4*scanChunk/max(n, 1), 8), scanChunk)
}

// fetch reads records by id in one round trip; a missing one is nil.
func (s *Store) fetch(ctx context.Context, ids []string) ([]*trajectory.Record, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*goredis.SliceCmd, len(ids))
	for i, id := range ids {
		if id == "" || checkID(id) != nil {
			continue
		}
		cmds[i] = pipe.HMGet(ctx, recKey(id), "json", "kids")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.fail(ctx, "HMGET", err)
	}
	out := make([]*trajectory.Record, len(ids))
	for i, c := range cmds {
		if c == nil {
			continue
		}
		vals := c.Val()
		if len(vals) != 2 {
			return nil, fmt.Errorf("%w: HMGET %s: %d values for 2 fields", errReply, ids[i], len(vals))
		}
		if vals[0] == nil {
			continue
		}
		r, err := decodeRecord(ids[i], vals[0], vals[1])
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// pruneShards bounds how many slots' expiry indexes one List visits; the
// next List goes on from where this one stopped.
const pruneShards = 64

// prune clears index entries of finished records whose retention has run
// out, in the next pruneShards slots of shards (the directory). Redis expires the
// records themselves; the indexes, which must outlive any one record, are
// cleaned here. An entry is dropped only once its record's key is gone, so
// a replica whose clock runs ahead starts this cleanup early but never
// hides a live record. An entry whose record lives on without a TTL was
// written by an update that lost its race, and is dropped from the expiry
// index alone.
func (s *Store) prune(ctx context.Context, shards []string) error {
	if len(shards) == 0 {
		return nil
	}
	n := min(len(shards), pruneShards)
	first := int(s.pruneNext.Add(uint64(n)) - uint64(n))
	visit := make([]string, n)
	for i := range visit {
		visit[i] = shards[(first+i)%len(shards)]
	}
	now := s.now()
	pipe := s.rdb.Pipeline()
	dues := make([]*goredis.StringSliceCmd, n)
	for i, sh := range visit {
		dues[i] = pipe.ZRangeArgs(ctx, goredis.ZRangeArgs{
			Key: idxExpires(sh), Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10), ByScore: true, Count: pruneBatch,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.fail(ctx, "ZRANGE expiry indexes", err)
	}
	var due []staleMember
	for i, c := range dues {
		for _, m := range c.Val() {
			due = append(due, staleMember{shard: visit[i], member: m})
		}
	}
	if len(due) == 0 {
		return nil
	}
	pipe = s.rdb.Pipeline()
	ttls := make([]*goredis.DurationCmd, len(due))
	for i, d := range due {
		if id := memberID(d.member); id != "" && checkID(id) == nil {
			ttls[i] = pipe.PTTL(ctx, recKey(id))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.fail(ctx, "PTTL", err)
	}
	pipe = s.rdb.Pipeline()
	for i, d := range due {
		var ttl time.Duration = -2 // not a member: drop it
		if ttls[i] != nil {
			ttl = ttls[i].Val()
		}
		switch {
		case ttl == -2:
			pipe.ZRem(ctx, idxCreated(d.shard), d.member)
			pipe.ZRem(ctx, idxExpires(d.shard), d.member)
		case ttl < 0:
			pipe.ZRem(ctx, idxExpires(d.shard), d.member)
		default:
			pipe.ZAdd(ctx, idxExpires(d.shard), goredis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: d.member})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.fail(ctx, "pruning the indexes", err)
	}
	return nil
}
