package memory

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrSessionsFull is PutSession's answer when the store holds its maximum
// of live sessions: a new sign-in waits for one to end.
var ErrSessionsFull = errors.New("memory: too many console sessions")

// DefaultMaxSessions bounds the live sessions of a Sessions store.
const DefaultMaxSessions = 100_000

// Sessions keeps console sign-in sessions in this process: short-lived
// opaque values under keys, each gone at its expiry.
type Sessions struct {
	now func() time.Time
	max int

	mu   sync.Mutex
	byID map[string]session
}

type session struct {
	data    []byte
	expires time.Time
}

// NewSessions returns an empty store holding at most max live sessions
// (DefaultMaxSessions when max <= 0); now is its clock (nil: time.Now).
func NewSessions(max int, now func() time.Time) *Sessions {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if now == nil {
		now = time.Now
	}
	return &Sessions{now: now, max: max, byID: map[string]session{}}
}

// PutSession keeps data under key for ttl.
func (s *Sessions) PutSession(_ context.Context, key string, data []byte, ttl time.Duration) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[key]; !ok && len(s.byID) >= s.max {
		for k, v := range s.byID {
			if !now.Before(v.expires) {
				delete(s.byID, k)
			}
		}
		if len(s.byID) >= s.max {
			return ErrSessionsFull
		}
	}
	s.byID[key] = session{data: append([]byte(nil), data...), expires: now.Add(ttl)}
	return nil
}

// GetSession returns key's data; false when there is none or it expired.
func (s *Sessions) GetSession(_ context.Context, key string) ([]byte, bool, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[key]
	if !ok {
		return nil, false, nil
	}
	if !now.Before(v.expires) {
		delete(s.byID, key)
		return nil, false, nil
	}
	return append([]byte(nil), v.data...), true, nil
}

// DeleteSession forgets key.
func (s *Sessions) DeleteSession(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, key)
	return nil
}
