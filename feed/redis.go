package feed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// StreamKey is the Redis stream every replica appends its events to and
// reads everyone's from.
const StreamKey = "gk:feed"

// redisWait is how long one blocking read waits for new entries.
const redisWait = time.Second

// redisClient is what the Redis log uses of a go-redis client.
type redisClient interface {
	Pipelined(ctx context.Context, fn func(goredis.Pipeliner) error) ([]goredis.Cmder, error)
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *goredis.XMessageSliceCmd
	XRangeN(ctx context.Context, stream, start, stop string, count int64) *goredis.XMessageSliceCmd
	XRead(ctx context.Context, a *goredis.XReadArgs) *goredis.XStreamSliceCmd
	XInfoStream(ctx context.Context, key string) *goredis.XInfoStreamCmd
}

var _ redisClient = (*goredis.Client)(nil)

// redisLog is the log shared by replicas: a Redis stream capped at about
// retain entries (XADD MAXLEN ~), whose entry ids are the events' ids.
// Redis assigns them from its own clock, so the replicas' events have one
// order.
type redisLog struct {
	rdb    redisClient
	key    string
	retain int64
}

var _ eventLog = (*redisLog)(nil)

// entryField is the one field of a stream entry: the encoded event.
const entryField = "e"

func (l *redisLog) append(ctx context.Context, evs []Event) error {
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	_, err := l.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		var buf []byte
		for i := range evs {
			buf = appendEntry(buf[:0], &evs[i])
			p.XAdd(ctx, &goredis.XAddArgs{Stream: l.key, MaxLen: l.retain, Approx: true, Values: []any{entryField, string(buf)}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("feed: XADD %s: %w", l.key, err)
	}
	return nil
}

func (l *redisLog) last(ctx context.Context) (ID, error) {
	ms, err := l.rdb.XRevRangeN(ctx, l.key, "+", "-", 1).Result()
	if err != nil {
		return ID{}, fmt.Errorf("feed: XREVRANGE %s: %w", l.key, err)
	}
	if len(ms) == 0 {
		return ID{}, nil
	}
	return ParseID(ms[0].ID)
}

func (l *redisLog) read(ctx context.Context, after ID, limit int) ([]raw, bool, error) {
	info, err := l.rdb.XInfoStream(ctx, l.key).Result()
	switch {
	case err != nil && strings.Contains(err.Error(), "no such key"):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("feed: XINFO STREAM %s: %w", l.key, err)
	}
	// Entries were trimmed when more were added than remain; a resume
	// point before the first one left may have missed some. (Redis keeps
	// no record of the last trimmed id, so a client whose last event was
	// exactly that one is told of a gap it does not have: it reloads.)
	gap := false
	if info.EntriesAdded > info.Length && info.FirstEntry.ID != "" {
		first, err := ParseID(info.FirstEntry.ID)
		if err != nil {
			return nil, false, fmt.Errorf("feed: XINFO STREAM %s: first-entry: %w", l.key, err)
		}
		gap = after.Less(first)
	}
	ms, err := l.rdb.XRangeN(ctx, l.key, "("+after.String(), "+", int64(limit)).Result()
	if err != nil {
		return nil, false, fmt.Errorf("feed: XRANGE %s: %w", l.key, err)
	}
	rs, err := raws(ms)
	return rs, gap, err
}

func (l *redisLog) wait(ctx context.Context, after ID, limit int) ([]raw, error) {
	ss, err := l.rdb.XRead(ctx, &goredis.XReadArgs{Streams: []string{l.key, after.String()}, Count: int64(limit), Block: redisWait}).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("feed: XREAD %s: %w", l.key, err)
	}
	var rs []raw
	for _, s := range ss {
		r, err := raws(s.Messages)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r...)
	}
	return rs, nil
}

// raws reads stream entries. An entry without the event field keeps its
// id, with no bytes, so that it is counted as malformed and passed over.
func raws(ms []goredis.XMessage) ([]raw, error) {
	rs := make([]raw, 0, len(ms))
	for _, m := range ms {
		id, err := ParseID(m.ID)
		if err != nil {
			return nil, fmt.Errorf("feed: stream entry: %w", err)
		}
		s, _ := m.Values[entryField].(string)
		rs = append(rs, raw{id: id, b: []byte(s)})
	}
	return rs, nil
}
