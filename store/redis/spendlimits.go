package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/spendlimit"
)

// SpendLimits keeps the admin API's spend limits on people in the Redis
// of a Store: one hash, field <id> holding the limit's JSON and field
// c:<id> when it was created, on one slot of a cluster. Replicas read it
// whole: it holds at most spendlimit.MaxLimits limits.
type SpendLimits struct{ s *Store }

var _ spendlimit.Store = (*SpendLimits)(nil)

// SpendLimits returns the spend limits kept in the Store's Redis.
func (s *Store) SpendLimits() *SpendLimits { return &SpendLimits{s: s} }

var spendLimitsKeys = []string{"gk:{spend_limits}:all"}

var spendListScript = goredis.NewScript(`return redis.call('HGETALL', KEYS[1])`)

// spendPutScript sets field ARGV[1] to ARGV[2], and c:ARGV[1] to ARGV[3]
// unless set; it returns the creation time kept, or -1 when a new limit
// would pass ARGV[4] limits.
var spendPutScript = goredis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) / 2 >= tonumber(ARGV[4]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSETNX', KEYS[1], 'c:' .. ARGV[1], ARGV[3])
return redis.call('HGET', KEYS[1], 'c:' .. ARGV[1])
`)

var spendDeleteScript = goredis.NewScript(`return redis.call('HDEL', KEYS[1], ARGV[1], 'c:' .. ARGV[1])`)

func init() {
	scripts = append(scripts, spendListScript, spendPutScript, spendDeleteScript)
}

// SpendLimits implements spendlimit.Store, in id order.
func (l *SpendLimits) SpendLimits(ctx context.Context) ([]spendlimit.Limit, error) {
	if err := l.s.usable(ctx); err != nil {
		return nil, err
	}
	v, err := l.s.eval(ctx, spendListScript, spendLimitsKeys, nil, nil)
	if err != nil {
		return nil, l.s.fail(ctx, "reading the spend limits", err)
	}
	r, ok := v.([]any)
	if !ok || len(r)%2 != 0 {
		return nil, fmt.Errorf("redis store: spend limits: unexpected reply %T", v)
	}
	created := map[string]time.Time{}
	var out []spendlimit.Limit
	for i := 0; i < len(r); i += 2 {
		k, ok1 := r[i].(string)
		val, ok2 := r[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("redis store: spend limits: unexpected reply element %T", r[i])
		}
		if id, ok := strings.CutPrefix(k, "c:"); ok {
			ms, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redis store: spend limit %s: creation time %q", id, val)
			}
			created[id] = time.UnixMilli(ms).UTC()
			continue
		}
		var sl spendlimit.Limit
		if err := json.Unmarshal([]byte(val), &sl); err != nil {
			return nil, fmt.Errorf("redis store: spend limit %s: %w", k, err)
		}
		sl.ID = k
		out = append(out, sl)
	}
	for i := range out {
		if c, ok := created[out[i].ID]; ok {
			out[i].Created = c
		}
	}
	slices.SortFunc(out, func(a, b spendlimit.Limit) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// PutSpendLimit implements spendlimit.Store.
func (l *SpendLimits) PutSpendLimit(ctx context.Context, sl spendlimit.Limit) (spendlimit.Limit, error) {
	if err := l.s.usable(ctx); err != nil {
		return spendlimit.Limit{}, err
	}
	b, err := json.Marshal(sl)
	if err != nil {
		return spendlimit.Limit{}, err
	}
	v, err := l.s.eval(ctx, spendPutScript, spendLimitsKeys, []any{sl.ID, b, sl.Created.UnixMilli(), spendlimit.MaxLimits}, nil)
	if err != nil {
		return spendlimit.Limit{}, l.s.fail(ctx, "writing a spend limit", err)
	}
	switch c := v.(type) {
	case int64:
		return spendlimit.Limit{}, spendlimit.ErrFull
	case string:
		ms, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return spendlimit.Limit{}, fmt.Errorf("redis store: spend limit %s: creation time %q", sl.ID, c)
		}
		sl.Created = time.UnixMilli(ms).UTC()
		return sl, nil
	}
	return spendlimit.Limit{}, fmt.Errorf("redis store: spend limit put: unexpected reply %T", v)
}

// DeleteSpendLimit implements spendlimit.Store.
func (l *SpendLimits) DeleteSpendLimit(ctx context.Context, id string) error {
	if err := l.s.usable(ctx); err != nil {
		return err
	}
	v, err := l.s.eval(ctx, spendDeleteScript, spendLimitsKeys, []any{id}, nil)
	if err != nil {
		return l.s.fail(ctx, "deleting a spend limit", err)
	}
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("redis store: spend limit delete: unexpected reply %T", v)
	}
	if n == 0 {
		return spendlimit.ErrNotFound
	}
	return nil
}
