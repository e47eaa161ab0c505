package proxy

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// A turn's settle as the write-behind queue (settle.Behind) holds it: the
// turn's own writes, which the queue orders and batches.

var _ settle.Pending = (*pendingSettle)(nil)

// pendingSettle is one turn's settle, computed when its reply ended.
type pendingSettle struct {
	t      *turn
	o      outcome.Turn
	charge meter.Charge
	data   map[string]any
	now    time.Time
	attrs  []slog.Attr
}

// apply is the settle's step on the turn's chain, inside a store update.
func (p *pendingSettle) apply(chain []*trajectory.Record) ([]trajectory.Event, error) {
	return p.t.settleRules().Chain(chain, p.o, p.charge, p.data, p.now)
}

// Sides settles the turn's key grant and its tenant's ledger.
func (p *pendingSettle) Sides(ctx context.Context) {
	p.t.rate.Settle(ctx, keyUsed(p.o))
	p.t.settleTenant(ctx, p.charge, p.o)
}

// TenantSide reports a settle with a tenant ledger to settle.
func (p *pendingSettle) TenantSide() bool {
	return p.t.s.ceilings.Spends(p.t.req.tenant)
}

// SettleTenant charges the turn to its tenant's ledger.
func (p *pendingSettle) SettleTenant(ctx context.Context) { p.t.settleTenant(ctx, p.charge, p.o) }

// HasSides reports a settle with a key grant or a tenant ledger to settle.
func (p *pendingSettle) HasSides() bool {
	return p.t.rate.Grant() != nil || p.TenantSide()
}

// Key is the settle of the turn's key grant.
func (p *pendingSettle) Key() ratelimit.Settlement { return p.t.rate.Settlement(keyUsed(p.o)) }

// Record is the turn's thread record.
func (p *pendingSettle) Record() string { return p.t.recID }

// Write saves the settle in its own update.
func (p *pendingSettle) Write(ctx context.Context) {
	p.wrote(ctx, p.save(ctx))
}

// Finish reports the outcome of a flush's update of the settle.
func (p *pendingSettle) Finish(ctx context.Context, evs []trajectory.Event, err error) {
	p.wrote(ctx, p.saved(evs, err))
}

// save writes the settle in its own update: what write and its retries
// send.
func (p *pendingSettle) save(ctx context.Context) error {
	var evs []trajectory.Event
	_, err := p.t.s.store.UpdateChain(ctx, p.t.recID, p.Update(&evs))
	return p.saved(evs, err)
}

// Update is the settle as a store update's fn; evs receives its events.
func (p *pendingSettle) Update(evs *[]trajectory.Event) func([]*trajectory.Record) ([]trajectory.Event, error) {
	return func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		var err error
		*evs, err = p.apply(chain)
		return *evs, err
	}
}

// saved is what an update's err says of the settle: nil when it was
// saved (its events are observed) or an earlier attempt, whose answer was
// lost, saved it.
func (p *pendingSettle) saved(evs []trajectory.Event, err error) error {
	if errors.Is(err, outcome.ErrSettled) {
		return nil
	}
	if err == nil {
		p.t.observe(evs)
	}
	return err
}

// wrote logs a settle that was saved; one the store could not take (it
// is out) is retried in the background, any other failure logged with
// the figures.
func (p *pendingSettle) wrote(ctx context.Context, err error) {
	t := p.t
	if err != nil {
		if errors.Is(err, trajectory.ErrUnavailable) {
			// The reply went out; its charge must not be lost.
			t.s.settles.Retry(t.log, settle.WriteCharge, p.save, p.attrs)
			return
		}
		p.lost(ctx, err)
		return
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "turn", p.attrs...)
}

// done reports a settle that an admission's update applied (err nil) or
// found already applied or gone.
func (p *pendingSettle) done(ctx context.Context, evs []trajectory.Event, err error) {
	switch {
	case err == nil:
		p.t.observe(evs)
		p.t.log.LogAttrs(ctx, slog.LevelInfo, "turn", p.attrs...)
	case errors.Is(err, outcome.ErrSettled):
	default:
		p.lost(ctx, err)
	}
}

func (p *pendingSettle) lost(ctx context.Context, err error) {
	p.t.log.LogAttrs(ctx, slog.LevelError, "charge not recorded", append(p.attrs, slog.String("error", err.Error()))...)
}
