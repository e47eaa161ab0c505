package memory

import (
	"context"
	"sync"
	"time"

	"gatekeeper/signin"
)

// Revocations keeps revoked sign-in tokens in this process until they
// would have expired.
type Revocations struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]time.Time
}

var _ signin.Revocations = (*Revocations)(nil)

// NewRevocations is an empty Revocations on clock now (nil: time.Now).
func NewRevocations(now func() time.Time) *Revocations {
	if now == nil {
		now = time.Now
	}
	return &Revocations{now: now, m: make(map[string]time.Time)}
}

// Revoke implements signin.Revocations.
func (r *Revocations) Revoke(ctx context.Context, key string, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for k, u := range r.m { // dropped when due, so the map holds only live marks
		if !now.Before(u) {
			delete(r.m, k)
		}
	}
	if now.Before(until) && until.After(r.m[key]) {
		r.m[key] = until
	}
	return nil
}

// Revoked implements signin.Revocations.
func (r *Revocations) Revoked(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.m[key]
	return ok && r.now().Before(u), nil
}
