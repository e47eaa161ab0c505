package redis

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// numSlots is the number of hash slots of Redis Cluster.
const numSlots = 16384

// slotOf is the Redis Cluster hash slot of every key whose hash tag is tag:
// CRC16 (XMODEM) of the tag, modulo 16384.
func slotOf(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % numSlots
}

// slotTags holds, for each slot, a short tag that hashes to it. An index
// that must change in the same script as a tree's keys is named with the
// tag of the tree's slot: it then lives where the tree lives, on a single
// Redis as on a cluster, and one index serves every tree of that slot.
var slotTags = sync.OnceValue(func() *[numSlots]string {
	var tags [numSlots]string
	left := numSlots
	// About 170,000 CRCs of short strings cover every slot.
	for i := uint64(0); left > 0; i++ {
		tag := "s" + strconv.FormatUint(i, 36)
		if s := slotOf(tag); tags[s] == "" {
			tags[s] = tag
			left--
		}
	}
	return &tags
})

// shardOf is the tag of the slot whose keys are tagged tag.
func shardOf(tag string) string { return slotTags()[slotOf(tag)] }

// shardDir is the directory of the slots that hold a kind of index: a set,
// in a slot of its own, of the slot numbers whose index was ever written.
// Readers walk the indexes it lists. A slot is added before the first
// index entry in it is written, in a round trip of its own, so that no
// crash leaves an entry no reader finds; this process remembers the slots
// it has added, so the cost is one round trip per slot and process.
type shardDir struct {
	key   string
	known [numSlots / 64]atomic.Uint64
}

// dirClient is what a shardDir needs of a client.
type dirClient interface {
	SAdd(ctx context.Context, key string, members ...any) *goredis.IntCmd
	SMembers(ctx context.Context, key string) *goredis.StringSliceCmd
}

// ensure adds the slot of tag to the directory, in a round trip of its
// own, unless this process already did; it then reports known. A caller
// that gets known true sends the directory entry again, with its write,
// at no extra round trip (see again): the directory may have lost it, as
// a replica promoted before it had the entry would have.
func (d *shardDir) ensure(ctx context.Context, rdb dirClient, tag string) (known bool, err error) {
	s := slotOf(tag)
	bit := uint64(1) << (s % 64)
	if d.known[s/64].Load()&bit != 0 {
		return true, nil
	}
	if err := rdb.SAdd(ctx, d.key, s).Err(); err != nil {
		return false, err
	}
	d.known[s/64].Or(bit)
	return false, nil
}

// again adds the slot of tag to the directory in p.
func (d *shardDir) again(ctx context.Context, p goredis.Pipeliner, tag string) {
	p.SAdd(ctx, d.key, slotOf(tag))
}

// shards reads the directory: the tags of the slots it lists, in slot
// order.
func (d *shardDir) shards(ctx context.Context, rdb dirClient) ([]string, error) {
	members, err := rdb.SMembers(ctx, d.key).Result()
	if err != nil {
		return nil, err
	}
	seen := make([]bool, numSlots)
	for _, m := range members {
		if s, err := strconv.Atoi(m); err == nil && s >= 0 && s < numSlots {
			seen[s] = true
		}
	}
	var out []string
	for s, ok := range seen {
		if ok {
			out = append(out, slotTags()[s])
		}
	}
	return out, nil
}
