package admit

import (
	"context"
	"sync"
	"time"

	"gatekeeper/config"
	"gatekeeper/spendlimit"
	"gatekeeper/trajectory"
)

// PersonLimitsTTL is how long a replica keeps the admin API's spend
// limits before reading them again: a limit set on one replica binds on
// every other within it.
const PersonLimitsTTL = 2 * time.Second

// PersonLimits are the spend limits on people: config's, and the admin
// API's read from the store at most once per PersonLimitsTTL.
type PersonLimits struct {
	config []spendlimit.Limit
	store  spendlimit.Store // nil: config's alone
	now    func() time.Time

	mu      sync.Mutex
	read    time.Time // when merged was read from the store
	merged  []spendlimit.Limit
	loading chan struct{} // closed when the read under way ends; nil when none
}

// NewPersonLimits are the limits of id's config and of store (nil for
// none), on the clock now.
func NewPersonLimits(id config.Identity, store spendlimit.Store, now func() time.Time) *PersonLimits {
	if now == nil {
		now = time.Now
	}
	cfg := spendlimit.FromConfig(id.Limits)
	return &PersonLimits{config: cfg, store: store, now: now, merged: cfg}
}

// Caps are the limits binding p, admitted as tenant tenantName.
func (pl *PersonLimits) Caps(ctx context.Context, tenantName string, p *trajectory.Person) (spendlimit.Caps, error) {
	all, err := pl.limits(ctx)
	if err != nil {
		return spendlimit.Caps{}, err
	}
	return spendlimit.For(all, tenantName, p), nil
}

// limits are config's and the store's limits, read again from the store
// once they are older than PersonLimitsTTL. One read at a time: the
// calls that come meanwhile wait for it.
func (pl *PersonLimits) limits(ctx context.Context) ([]spendlimit.Limit, error) {
	if pl.store == nil {
		return pl.config, nil
	}
	for {
		pl.mu.Lock()
		if !pl.read.IsZero() && pl.now().Sub(pl.read) < PersonLimitsTTL {
			m := pl.merged
			pl.mu.Unlock()
			return m, nil
		}
		if wait := pl.loading; wait != nil {
			pl.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		pl.loading = done
		pl.mu.Unlock()
		api, err := pl.store.SpendLimits(ctx)
		pl.mu.Lock()
		pl.loading = nil
		close(done)
		if err != nil {
			pl.mu.Unlock()
			return nil, err
		}
		pl.merged, pl.read = spendlimit.Merge(pl.config, api), pl.now()
		m := pl.merged
		pl.mu.Unlock()
		return m, nil
	}
}
