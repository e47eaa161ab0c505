package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/signin"
)

// revocationKey is a revoked sign-in token's mark, named by the token's
// hash: one key per token, each in its own slot.
func revocationKey(key string) string { return "gk:revoked:" + key }

// revocationClient is the Redis calls Revocations makes.
type revocationClient interface {
	SetArgs(ctx context.Context, key string, value any, a goredis.SetArgs) *goredis.StatusCmd
	Exists(ctx context.Context, keys ...string) *goredis.IntCmd
}

var _ revocationClient = (goredis.UniversalClient)(nil)

// Revocations keeps revoked sign-in tokens in Redis until they would have
// expired, so that every replica refuses them.
type Revocations struct {
	rdb revocationClient
	now func() time.Time
}

var _ signin.Revocations = (*Revocations)(nil)

// NewRevocations is the Revocations kept by client, on clock now (nil:
// time.Now).
func NewRevocations(client goredis.UniversalClient, now func() time.Time) *Revocations {
	if now == nil {
		now = time.Now
	}
	return &Revocations{rdb: client, now: now}
}

// Revoke implements signin.Revocations.
func (r *Revocations) Revoke(ctx context.Context, key string, until time.Time) error {
	if !r.now().Before(until) {
		return nil
	}
	err := r.rdb.SetArgs(ctx, revocationKey(key), 1, goredis.SetArgs{ExpireAt: until}).Err()
	if err != nil {
		return fmt.Errorf("redis: SET revocation: %w", err)
	}
	return nil
}

// Revoked implements signin.Revocations.
func (r *Revocations) Revoked(ctx context.Context, key string) (bool, error) {
	n, err := r.rdb.Exists(ctx, revocationKey(key)).Result()
	if err != nil {
		return false, fmt.Errorf("redis: EXISTS revocation: %w", err)
	}
	return n > 0, nil
}
