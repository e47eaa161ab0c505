package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"gatekeeper/approvals"
)

// ApprovalsOptions configures an Approvals store.
type ApprovalsOptions struct {
	// Retention is how long a hold and its requests are kept after their
	// expiry. Zero or less means DefaultApprovalRetention.
	Retention time.Duration
	// Clock decides when a record and a claim are forgotten; default
	// time.Now.
	Clock func() time.Time
}

// DefaultApprovalRetention is how long decided requests stay readable.
const DefaultApprovalRetention = 168 * time.Hour

// Approvals keeps holds and approval requests in memory. It is safe for
// concurrent use; one lock guards everything, so Update's fn runs with the
// store locked and must not call the store.
type Approvals struct {
	retention time.Duration
	now       func() time.Time

	mu       sync.Mutex
	holds    map[string]*approvals.Hold
	holdKeys map[[2]string]string // trajectory, turn key → hold id
	reqs     map[string]*approvals.Request
	claims   map[string]time.Time // key → when the claim lapses
	lastGC   time.Time
}

var _ approvals.Store = (*Approvals)(nil)

// NewApprovals returns an empty store.
func NewApprovals(o ApprovalsOptions) *Approvals {
	if o.Retention <= 0 {
		o.Retention = DefaultApprovalRetention
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Approvals{
		retention: o.Retention, now: o.Clock,
		holds: map[string]*approvals.Hold{}, holdKeys: map[[2]string]string{},
		reqs: map[string]*approvals.Request{}, claims: map[string]time.Time{},
	}
}

// gc forgets holds, requests and claims past their retention, at most once
// a minute so that it costs nothing on a busy path.
func (a *Approvals) gc(now time.Time) {
	if now.Sub(a.lastGC) < time.Minute {
		return
	}
	a.lastGC = now
	for id, h := range a.holds {
		if now.After(h.ExpiresAt.Add(a.retention)) {
			delete(a.holds, id)
			if k := [2]string{h.Trajectory, h.Key}; a.holdKeys[k] == id {
				delete(a.holdKeys, k)
			}
		}
	}
	for id, r := range a.reqs {
		if now.After(r.ExpiresAt.Add(a.retention)) {
			delete(a.reqs, id)
		}
	}
	for k, until := range a.claims {
		if !now.Before(until) {
			delete(a.claims, k)
		}
	}
}

// CreateHold implements approvals.Store.
func (a *Approvals) CreateHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request) (*approvals.Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h.ID == "" {
		return nil, fmt.Errorf("memory approvals: hold without id")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gc(a.now())
	if id, ok := a.holdKeys[[2]string{h.Trajectory, h.Key}]; ok && id != h.Previous {
		return a.holds[id].Clone(), approvals.ErrExists
	}
	if _, ok := a.holds[h.ID]; ok {
		return a.holds[h.ID].Clone(), approvals.ErrExists
	}
	for _, r := range reqs {
		if r.ID == "" {
			return nil, fmt.Errorf("memory approvals: request without id")
		}
		if _, ok := a.reqs[r.ID]; ok {
			return nil, fmt.Errorf("%w: request %q", approvals.ErrExists, r.ID)
		}
	}
	a.holds[h.ID] = h.Clone()
	a.holdKeys[[2]string{h.Trajectory, h.Key}] = h.ID
	for _, r := range reqs {
		a.reqs[r.ID] = r.Clone()
	}
	return h.Clone(), nil
}

// GetHold implements approvals.Store.
func (a *Approvals) GetHold(ctx context.Context, id string) (*approvals.Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.holds[id]
	if !ok {
		return nil, fmt.Errorf("%w: hold %q", approvals.ErrNotFound, id)
	}
	return h.Clone(), nil
}

// FindHold implements approvals.Store.
func (a *Approvals) FindHold(ctx context.Context, trajectory, key string) (*approvals.Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.holdKeys[[2]string{trajectory, key}]
	if !ok {
		return nil, fmt.Errorf("%w: no hold of %q for that turn", approvals.ErrNotFound, trajectory)
	}
	return a.holds[id].Clone(), nil
}

// UpdateHold implements approvals.Store.
func (a *Approvals) UpdateHold(ctx context.Context, id string, fn func(*approvals.Hold) error) (*approvals.Hold, error) {
	return update(ctx, a, a.holds, "hold", id, fn, func(c, h *approvals.Hold) bool {
		return c.ID == h.ID && c.Trajectory == h.Trajectory && c.Key == h.Key
	})
}

// Get implements approvals.Store.
func (a *Approvals) Get(ctx context.Context, id string) (*approvals.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.reqs[id]
	if !ok {
		return nil, fmt.Errorf("%w: request %q", approvals.ErrNotFound, id)
	}
	return r.Clone(), nil
}

// newestFirst orders requests by creation, newest first, then by id.
func newestFirst(x, y *approvals.Request) int {
	return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), cmp.Compare(x.ID, y.ID))
}

// List implements approvals.Store.
func (a *Approvals) List(ctx context.Context, f approvals.Filter) ([]*approvals.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 || limit > approvals.MaxListLimit {
		limit = approvals.MaxListLimit
	}
	a.mu.Lock()
	var out []*approvals.Request
	for _, r := range a.reqs {
		if f.Match(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, newestFirst)
	if len(out) > limit {
		out = out[:limit]
	}
	for i, r := range out {
		out[i] = r.Clone()
	}
	a.mu.Unlock()
	return out, nil
}

// Update implements approvals.Store.
func (a *Approvals) Update(ctx context.Context, id string, fn func(*approvals.Request) error) (*approvals.Request, error) {
	return update(ctx, a, a.reqs, "request", id, fn, func(c, r *approvals.Request) bool {
		return c.ID == r.ID && c.Trajectory == r.Trajectory && c.Root == r.Root && c.CreatedAt.Equal(r.CreatedAt)
	})
}

// update runs fn on a copy of m[id], with the store locked, and keeps the
// copy unless fn fails or changes what identifies it (same says whether it
// did not).
func update[T interface{ Clone() T }](ctx context.Context, a *Approvals, m map[string]T, what, id string, fn func(T) error, same func(c, old T) bool) (T, error) {
	var none T
	if err := ctx.Err(); err != nil {
		return none, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old, ok := m[id]
	if !ok {
		return none, fmt.Errorf("%w: %s %q", approvals.ErrNotFound, what, id)
	}
	c := old.Clone()
	if err := fn(c); err != nil {
		return none, err
	}
	if !same(c, old) {
		return none, fmt.Errorf("memory approvals: update of %s %q changed its identity", what, id)
	}
	m[id] = c.Clone()
	return c, nil
}

// Due implements approvals.Store.
func (a *Approvals) Due(ctx context.Context, t time.Time, limit int) ([]*approvals.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	var out []*approvals.Request
	for _, r := range a.reqs {
		if r.State == approvals.Pending && !r.ExpiresAt.After(t) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y *approvals.Request) int {
		return cmp.Or(x.ExpiresAt.Compare(y.ExpiresAt), cmp.Compare(x.ID, y.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	for i, r := range out {
		out[i] = r.Clone()
	}
	a.mu.Unlock()
	return out, nil
}

// Recent implements approvals.Store.
func (a *Approvals) Recent(ctx context.Context, trajectory, digest string) (*approvals.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var best *approvals.Request
	for _, r := range a.reqs {
		if r.Trajectory == trajectory && r.Digest == digest && (best == nil || newestFirst(r, best) < 0) {
			best = r
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: no request of %q for that call", approvals.ErrNotFound, trajectory)
	}
	return best.Clone(), nil
}

// Claim implements approvals.Store.
func (a *Approvals) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if until, ok := a.claims[key]; ok && now.Before(until) {
		return false, nil
	}
	a.claims[key] = now.Add(ttl)
	return true, nil
}
