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
	if err := s.prune(ctx); err != nil {
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
	return s.scan(ctx, f, limit)
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

// scan walks the created index from the newest member. Members whose
// record is gone, or is a later record under the same id, are removed.
func (s *Store) scan(ctx context.Context, f trajectory.Filter, limit int) ([]*trajectory.Record, error) {
	var out []*trajectory.Record
	var stale []any
	start := "-"
walk:
	for {
		members, err := s.rdb.ZRangeArgs(ctx, goredis.ZRangeArgs{
			Key: idxCreated, Start: start, Stop: "+", ByLex: true, Count: scanChunk,
		}).Result()
		if err != nil {
			return nil, s.fail(ctx, "ZRANGE "+idxCreated, err)
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
				stale = append(stale, members[i])
				continue
			}
			if f.Match(r) {
				out = append(out, r)
				if len(out) == limit {
					break walk
				}
			}
		}
		if len(members) < scanChunk {
			break
		}
		start = "(" + members[len(members)-1]
	}
	if len(stale) > 0 {
		pipe := s.rdb.Pipeline()
		pipe.ZRem(ctx, idxCreated, stale...)
		pipe.ZRem(ctx, idxExpires, stale...)
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, s.fail(ctx, "ZREM "+idxCreated, err)
		}
	}
	return out, nil
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

// prune clears index entries of finished records whose retention has run
// out. Redis expires the records themselves; the index, which must outlive
// any one record, is cleaned here. An entry is dropped only once its
// record's key is gone, so a replica whose clock runs ahead starts this
// cleanup early but never hides a live record. An entry whose record lives on without a TTL was written
// by an update that lost its race, and is dropped from the expiry index
// alone.
func (s *Store) prune(ctx context.Context) error {
	now := s.now()
	due, err := s.rdb.ZRangeArgs(ctx, goredis.ZRangeArgs{
		Key: idxExpires, Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10), ByScore: true, Count: pruneBatch,
	}).Result()
	if err != nil {
		return s.fail(ctx, "ZRANGE "+idxExpires, err)
	}
	if len(due) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	ttls := make([]*goredis.DurationCmd, len(due))
	for i, m := range due {
		if id := memberID(m); id != "" && checkID(id) == nil {
			ttls[i] = pipe.PTTL(ctx, recKey(id))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.fail(ctx, "PTTL", err)
	}
	pipe = s.rdb.Pipeline()
	for i, m := range due {
		var ttl time.Duration = -2 // not a member: drop it
		if ttls[i] != nil {
			ttl = ttls[i].Val()
		}
		switch {
		case ttl == -2:
			pipe.ZRem(ctx, idxCreated, m)
			pipe.ZRem(ctx, idxExpires, m)
		case ttl < 0:
			pipe.ZRem(ctx, idxExpires, m)
		default:
			pipe.ZAdd(ctx, idxExpires, goredis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: m})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.fail(ctx, "pruning the index", err)
	}
	return nil
}
