package memory

import (
	"context"
	"fmt"
	"time"

	"gatekeeper/trajectory"
)

var _ trajectory.Links = (*Store)(nil)

// link is one trajectory.Links entry.
type link struct {
	id      string
	expires time.Time
}

// Link implements trajectory.Links.
func (s *Store) Link(ctx context.Context, key, id string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return err
	}
	now := s.now()
	if l, ok := s.links[key]; ok && now.Before(l.expires) {
		return nil
	}
	if s.links == nil {
		s.links = make(map[string]link)
	}
	s.links[key] = link{id: id, expires: now.Add(ttl)}
	return nil
}

// Linked implements trajectory.Links.
func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx); err != nil {
		return "", err
	}
	if l, ok := s.links[key]; ok && s.now().Before(l.expires) {
		return l.id, nil
	}
	return "", fmt.Errorf("%w: no link %q", trajectory.ErrNotFound, key)
}

// sweepLinks drops the links that expired; the caller holds mu.
func (s *Store) sweepLinks(now time.Time) {
	for k, l := range s.links {
		if !now.Before(l.expires) {
			delete(s.links, k)
		}
	}
}
