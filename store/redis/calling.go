package redis

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/trajectory"
)

// The calling index of a slot holds an entry for every record of the slot
// that may be CALLING_MODEL, so that listing the calls in flight (what
// every replica's sweeper does each heartbeat) reads those records, not
// every record of the store. An entry is written ahead of the save that
// moves a record into CALLING_MODEL, in the same pipeline and slot, so no
// crash can leave a call the index misses; its score is when it was
// written. An entry whose record has moved on is stale, and a listing
// drops it only if its score is still the one it read: a record that
// began another call meanwhile was written again, with a later score.
func idxCalling(shard string) string { return "gk:{" + shard + "}:idx:calling" }

// callingScore is an entry's score: the writing time in microseconds,
// exact in a float64 for the next quarter of a million years.
func (s *Store) callingScore() float64 { return float64(s.now().UnixMicro()) }

// pruneCallingScript drops stale entries of a calling index, each only if
// its score is still the one read.
//
// KEYS: the calling index. ARGV: pairs of member and score.
var pruneCallingScript = goredis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
  local sc = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if sc and tonumber(sc) == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
`)

// listCalling is List of the records in CALLING_MODEL, read through the
// calling indexes, newest first as the created index orders them.
func (s *Store) listCalling(ctx context.Context, shards []string, f trajectory.Filter, limit int) ([]*trajectory.Record, error) {
	pipe := s.rdb.Pipeline()
	ranges := make([]*goredis.ZSliceCmd, len(shards))
	for i, sh := range shards {
		ranges[i] = pipe.ZRangeWithScores(ctx, idxCalling(sh), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.fail(ctx, "ZRANGE calling indexes", err)
	}
	type entry struct {
		shard, member string
		score         float64
	}
	var entries []entry
	var ids []string
	for i, cmd := range ranges {
		for _, z := range cmd.Val() {
			m, _ := z.Member.(string)
			entries = append(entries, entry{shards[i], m, z.Score})
			ids = append(ids, memberID(m))
		}
	}
	recs, err := s.fetch(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []*trajectory.Record
	stale := make(map[string][]any)
	for i, r := range recs {
		e := entries[i]
		if r == nil || r.State != trajectory.CallingModel || member(r.ID, r.CreatedAt) != e.member {
			stale[e.shard] = append(stale[e.shard], e.member, strconv.FormatFloat(e.score, 'f', -1, 64))
			continue
		}
		if f.Match(r) {
			out = append(out, r)
		}
	}
	for sh, args := range stale {
		if err := pruneCallingScript.Run(ctx, s.rdb, []string{idxCalling(sh)}, args...).Err(); err != nil {
			return nil, s.fail(ctx, "pruning a calling index", err)
		}
	}
	slices.SortFunc(out, func(a, b *trajectory.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
