package approvals

import (
	"context"
	"sync"
	"testing"
	"time"
)

// chanStore is the part of a Store the channels use (Get, Update, Claim),
// kept in maps for the package's own tests; the store contract suite
// covers the real stores, and channels_service_test.go runs the channels
// against the memory store.
type chanStore struct {
	Store // the methods the channels never call panic on the nil interface

	mu     sync.Mutex
	reqs   map[string]*Request
	claims map[string]bool
}

func newChanStore(t testing.TB) *chanStore {
	t.Helper()
	return &chanStore{reqs: map[string]*Request{}, claims: map[string]bool{}}
}

func (s *chanStore) put(t testing.TB, r *Request) *Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[r.ID] = r.Clone()
	return r.Clone()
}

func (s *chanStore) Get(_ context.Context, id string) (*Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.reqs[id]
	if !ok {
		return nil, ErrNotFound
	}
	return r.Clone(), nil
}

func (s *chanStore) Update(_ context.Context, id string, fn func(*Request) error) (*Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.reqs[id]
	if !ok {
		return nil, ErrNotFound
	}
	c := r.Clone()
	if err := fn(c); err != nil {
		return nil, err
	}
	s.reqs[id] = c
	return c.Clone(), nil
}

func (s *chanStore) Claim(_ context.Context, key string, _ time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claims[key] {
		return false, nil
	}
	s.claims[key] = true
	return true, nil
}
