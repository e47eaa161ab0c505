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
// names, newest first, reading a page of requests per round trip and
// checking every filter on the requests themselves.
func (a *Approvals) List(ctx context.Context, f approvals.Filter) ([]*approvals.Request, error) {
	limit := f.Limit
	if limit <= 0 || limit > approvals.MaxListLimit {
		limit = approvals.MaxListLimit
	}
	index := allIndex
	switch {
	case f.Root != "":
		if _, err := tagOf(f.Root); err != nil {
			return nil, nil
		}
		index = rootIndex(f.Root)
	case f.Trajectory != "":
		tag, err := tagOf(f.Trajectory)
		if err != nil {
			return nil, nil
		}
		index = trajIndex(tag, f.Trajectory)
	case f.State != "":
		index = stateIndex(f.State)
	}
	var out []*approvals.Request
	for page := int64(0); page < maxListPages && len(out) < limit; page++ {
		members, err := a.rdb.ZRange(ctx, index, page*listPage, (page+1)*listPage-1).Result()
		if err != nil {
			return nil, aprFail("ZRANGE "+index, err)
		}
		reqs, err := a.load(ctx, index, members, memberParts)
		if err != nil {
			return nil, err
		}
		for _, r := range reqs {
			if (f.State == "" || r.State == f.State) && (f.Trajectory == "" || r.Trajectory == f.Trajectory) &&
				(f.Root == "" || r.Root == f.Root) && len(out) < limit {
				out = append(out, r)
			}
		}
		if len(members) < listPage {
			break
		}
	}
	return out, nil
}

// load reads the requests index members name, in order, in one round trip;
// it drops from index the members whose request is gone.
func (a *Approvals) load(ctx context.Context, index string, members []string, parse func(string) (id, tag string, ok bool)) ([]*approvals.Request, error) {
	if len(members) == 0 {
		return nil, nil
	}
	type item struct {
		id     string
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
		items = append(items, item{id: id, member: m, cmd: pipe.Get(ctx, aprKey(tag, id))})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, aprFail("GET requests", err)
	}
	var out []*approvals.Request
	var gone []any
	for _, it := range items {
		b, err := it.cmd.Bytes()
		if errors.Is(err, goredis.Nil) {
			gone = append(gone, it.member)
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
	if len(gone) > 0 {
		// Best effort: a later read drops them if this fails.
		_ = a.rdb.ZRem(ctx, index, gone...).Err()
	}
	return out, nil
}

// Due implements approvals.Store from the expiry index, checking each
// request's state and expiry as read.
func (a *Approvals) Due(ctx context.Context, t time.Time, limit int) ([]*approvals.Request, error) {
	if limit <= 0 {
		limit = approvals.MaxListLimit
	}
	members, err := a.rdb.ZRangeArgs(ctx, goredis.ZRangeArgs{
		Key: dueIndex, Start: "-inf", Stop: strconv.FormatInt(t.UnixMicro(), 10), ByScore: true, Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, aprFail("ZRANGE "+dueIndex, err)
	}
	reqs, err := a.load(ctx, dueIndex, members, dueParts)
	if err != nil {
		return nil, err
	}
	out := reqs[:0]
	for _, r := range reqs {
		if r.State == approvals.Pending && !r.ExpiresAt.After(t) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(x, y *approvals.Request) int { return x.ExpiresAt.Compare(y.ExpiresAt) })
	return out, nil
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
