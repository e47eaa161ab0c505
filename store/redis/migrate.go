package redis

import (
	"context"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// The record indexes of earlier versions: one pair for every record, in a
// slot of its own, which only a single Redis could serve.
const (
	legacyCreated = "gk:{idx}:created"
	legacyExpires = "gk:{idx}:expires"
)

// migrateBatch is how many legacy index members one round trip moves.
const migrateBatch = 512

// migrateIndexes moves the entries of the legacy record indexes into the
// per-slot indexes, so that records created before an upgrade are still
// listed, then deletes the legacy keys. Every step is idempotent, so
// replicas starting together, or a start interrupted halfway, leave the
// same result; an entry is removed from the legacy index only after it was
// written to its slot's.
func (s *Store) migrateIndexes(ctx context.Context) error {
	if n, err := s.rdb.Exists(ctx, legacyCreated, legacyExpires).Result(); err != nil || n == 0 {
		return err
	}
	for _, legacy := range []struct {
		key  string
		into func(shard string) string
	}{{legacyCreated, idxCreated}, {legacyExpires, idxExpires}} {
		for range 1 << 20 { // bounded: each round removes what it moved
			batch, err := s.rdb.ZRangeWithScores(ctx, legacy.key, 0, migrateBatch-1).Result()
			if err != nil || len(batch) == 0 {
				if err != nil {
					return err
				}
				break
			}
			pipe := s.rdb.Pipeline()
			moved := make([]any, 0, len(batch))
			for _, z := range batch {
				m, _ := z.Member.(string)
				moved = append(moved, m)
				id := memberID(m)
				if id == "" || checkID(id) != nil {
					continue
				}
				shard := shardOf(rootOf(id))
				pipe.SAdd(ctx, recordSlots, strconv.Itoa(slotOf(shard)))
				pipe.ZAdd(ctx, legacy.into(shard), goredis.Z{Score: z.Score, Member: m})
			}
			if pipe.Len() > 0 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
			if err := s.rdb.ZRem(ctx, legacy.key, moved...).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}
