package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sessions keeps console sign-in sessions in Redis, so that every replica
// knows every session: one key per session, expiring with it.
type Sessions struct {
	rdb goredis.UniversalClient
}

// NewSessions returns a store over client (shared with the record store;
// its owner closes it).
func NewSessions(client goredis.UniversalClient) *Sessions { return &Sessions{rdb: client} }

// sessionKey holds one session; key is already a hash of the session id.
func sessionKey(key string) string { return "gk:console:session:" + key }

// PutSession keeps data under key for ttl.
func (s *Sessions) PutSession(ctx context.Context, key string, data []byte, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, sessionKey(key), data, ttl).Err(); err != nil {
		return fmt.Errorf("redis: console session: %w", err)
	}
	return nil
}

// GetSession returns key's data; false when there is none or it expired.
func (s *Sessions) GetSession(ctx context.Context, key string) ([]byte, bool, error) {
	b, err := s.rdb.Get(ctx, sessionKey(key)).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("redis: console session: %w", err)
	}
	return b, true, nil
}

// DeleteSession forgets key.
func (s *Sessions) DeleteSession(ctx context.Context, key string) error {
	if err := s.rdb.Del(ctx, sessionKey(key)).Err(); err != nil {
		return fmt.Errorf("redis: console session: %w", err)
	}
	return nil
}
