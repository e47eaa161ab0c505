package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/approvals"
)

// List implements approvals.Store: it walks the narrowest index the filter
// names (a trajectory's or a root's, or every slot's index of all requests
// or of a state, walked as one), newest first, reading a page of requests
// per round trip and checking every filter on the requests themselves.
func (a *Approvals) List(ctx context.Context, f approvals.Filter) ([]*approvals.Request, error) {
	limit := f.Limit
	if limit <= 0 || limit > approvals.MaxListLimit {
		limit = approvals.MaxListLimit
	}
	// keys are the indexes walked; indexOf names the one holding a
	// member of root tag, for dropping stale entries.
	var keys []string
	var indexOf func(tag string) string
	switch {
	case f.Root != "":
		tag, err := tagOf(f.Root)
		if err != nil {
			return nil, nil
		}
		keys, indexOf = []string{rootIndex(tag)}, rootIndex
	case f.Trajectory != "":
		tag, err := tagOf(f.Trajectory)
		if err != nil {
			return nil, nil
		}
		keys, indexOf = []string{trajIndex(tag, f.Trajectory)}, func(tag string) string { return trajIndex(tag, f.Trajectory) }
	default:
		shards, err := a.dir.shards(ctx, a.rdb)
		if err != nil {
			return nil, aprFail("SMEMBERS "+approvalSlots, err)
		}
		keys = make([]string, len(shards))
		for i, sh := range shards {
			if f.State != "" {
				keys[i] = shardState(sh, f.State)
			} else {
				keys[i] = shardAll(sh)
			}
		}
		indexOf = allIndex
		if f.State != "" {
			indexOf = func(tag string) string { return stateIndex(tag, f.State) }
		}
	}
	walk := newLexMerge(a.rdb, keys, min(max(4*listPage/max(len(keys), 1), 8), listPage))
	var out []*approvals.Request
	members := make([]string, 0, listPage)
	for page := 0; page < maxListPages && len(out) < limit; page++ {
		members = members[:0]
		for len(members) < listPage {
			m, _, ok, err := walk.next(ctx)
			if err != nil {
				return nil, aprFail("ZRANGE approvals indexes", err)
			}
			if !ok {
				break
			}
			members = append(members, m)
		}
		if len(members) == 0 {
			break
		}
		reqs, err := a.load(ctx, indexOf, members, memberParts)
		if err != nil {
			return nil, err
		}
		for _, r := range reqs {
			if f.Match(r) && len(out) < limit {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// load reads the requests index members name, in order, in one round trip;
// it drops the members whose request is gone from their index, which
// indexOf names by the member's root tag.
func (a *Approvals) load(ctx context.Context, indexOf func(tag string) string, members []string, parse func(string) (id, tag string, ok bool)) ([]*approvals.Request, error) {
	if len(members) == 0 {
		return nil, nil
	}
	type item struct {
		id     string
		tag    string
		member string
		cmd    *goredis.StringCmd
	}
	items := make([]item, 0, len(members))
	pipe := a.rdb.Pipeline()
	for _, m := range members {
		id, tag, ok := parse(m)
		if !ok {
			continue
		}
		items = append(items, item{id: id, tag: tag, member: m, cmd: pipe.Get(ctx, aprKey(tag, id))})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, aprFail("GET requests", err)
	}
	var out []*approvals.Request
	gone := a.rdb.Pipeline()
	for _, it := range items {
		b, err := it.cmd.Bytes()
		if errors.Is(err, goredis.Nil) {
			gone.ZRem(ctx, indexOf(it.tag), it.member)
			continue
		}
		if err != nil {
			return nil, aprFail("GET request", err)
		}
		r, err := decodeRequest(it.id, b)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if gone.Len() > 0 {
		// Best effort: a later read drops them if this fails.
		_, _ = gone.Exec(ctx)
	}
	return out, nil
}

// Due implements approvals.Store from every slot's expiry index, checking
// each request's state and expiry as read.
func (a *Approvals) Due(ctx context.Context, t time.Time, limit int) ([]*approvals.Request, error) {
	if limit <= 0 {
		limit = approvals.MaxListLimit
	}
	shards, err := a.dir.shards(ctx, a.rdb)
	if err != nil {
		return nil, aprFail("SMEMBERS "+approvalSlots, err)
	}
	// The last key is the due index of earlier versions, which may still
	// list requests made before an upgrade.
	keys := make([]string, 0, len(shards)+1)
	for _, sh := range shards {
		keys = append(keys, shardDue(sh))
	}
	keys = append(keys, legacyDue)
	pipe := a.rdb.Pipeline()
	cmds := make([]*goredis.StringSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ZRangeArgs(ctx, goredis.ZRangeArgs{
			Key: k, Start: "-inf", Stop: strconv.FormatInt(t.UnixMicro(), 10), ByScore: true, Count: int64(limit),
		})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, aprFail("ZRANGE due indexes", err)
	}
	var members []string
	for _, c := range cmds[:len(shards)] {
		members = append(members, c.Val()...)
	}
	reqs, err := a.load(ctx, dueIndex, members, dueParts)
	if err != nil {
		return nil, err
	}
	legacy, err := a.load(ctx, func(string) string { return legacyDue }, cmds[len(shards)].Val(), dueParts)
	if err != nil {
		return nil, err
	}
	reqs = append(reqs, legacy...)
	out := reqs[:0]
	for _, r := range reqs {
		if r.State == approvals.Pending && !r.ExpiresAt.After(t) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(x, y *approvals.Request) int { return x.ExpiresAt.Compare(y.ExpiresAt) })
	return out[:min(len(out), limit)], nil
}

// Recent implements approvals.Store.
func (a *Approvals) Recent(ctx context.Context, trajectory, digest string) (*approvals.Request, error) {
	tag, err := tagOf(trajectory)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", approvals.ErrNotFound, err)
	}
	id, err := a.rdb.Get(ctx, recentKey(tag, trajectory, digest)).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("%w: no request of %q for that call", approvals.ErrNotFound, trajectory)
	}
	if err != nil {
		return nil, aprFail("GET recent", err)
	}
	return a.getRequest(ctx, a.rdb, tag, id)
}

// Claim implements approvals.Store with SET NX PX: the first caller of a
// key wins on every replica.
func (a *Approvals) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	ok, err := a.rdb.SetNX(ctx, claimKey(key), 1, max(ttl, time.Millisecond)).Result()
	if err != nil {
		return false, aprFail("SET NX claim", err)
	}
	return ok, nil
}
