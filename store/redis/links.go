package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/trajectory"
)

var _ trajectory.Links = (*Store)(nil)

// linkKey holds the id a trajectory.Links key links to. It has no hash
// tag: links spread over a cluster's slots.
func linkKey(key string) string { return "gk:link:" + key }

// Link implements trajectory.Links with SET NX PX: the first link of a key
// wins on every replica.
func (s *Store) Link(ctx context.Context, key, id string, ttl time.Duration) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := s.rdb.SetNX(ctx, linkKey(key), id, max(ttl, time.Millisecond)).Err(); err != nil {
		return s.fail(ctx, "SET NX link", err)
	}
	return nil
}

// Linked implements trajectory.Links with one GET.
func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	if err := s.usable(ctx); err != nil {
		return "", err
	}
	id, err := s.rdb.Get(ctx, linkKey(key)).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return "", fmt.Errorf("%w: no link %q", trajectory.ErrNotFound, key)
	case err != nil:
		return "", s.fail(ctx, "GET link", err)
	}
	return id, nil
}
