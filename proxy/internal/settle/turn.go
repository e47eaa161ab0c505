package settle

import (
	"context"
	"errors"
	"log/slog"

	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

var _ Pending = (*Turn)(nil)

// KeyGrant is a turn's side of its provider key's scheduling, as its
// settle writes it.
type KeyGrant interface {
	Grant() *ratelimit.Grant
	Settle(ctx context.Context, used ratelimit.Cost)
	Settlement(used ratelimit.Cost) ratelimit.Settlement
	Leave(used ratelimit.Cost) ratelimit.Settlement
}

// Turn is one turn's settle, computed when its reply ended: its step on
// the turn's chain and its sides (the key grant, the tenant's ledger).
// What it writes and reports is the turn's, through its fields.
type Turn struct {
	Rec   string           // the turn's thread record
	Store trajectory.Store // where Write saves it
	// Rules is the settle's step on the turn's chain, inside a store
	// update.
	Rules func(chain []*trajectory.Record) ([]trajectory.Event, error)
	// Observe sees the events of a saved settle.
	Observe func([]trajectory.Event)
	Keys    KeyGrant       // the turn's key grant
	Used    ratelimit.Cost // what the turn used of its key
	// Spends reports a tenant ledger to settle; Tenant charges the turn
	// to it.
	Spends  bool
	Tenant  func(context.Context)
	Retries *Retrier // retries a settle the store could not take
	Log     *slog.Logger
	Attrs   []slog.Attr // the turn's log fields, with its figures
	// Uncharged says why the turn charges nothing (the provider refused
	// the call or was never reached); "" for a turn charged.
	Uncharged string
	// Waiting, when not nil, is told that the settle waits for the store
	// (its retries begin) and returns what to call once they are over:
	// the replica's heartbeat goes on for the call meanwhile, so that no
	// sweep takes a call whose real charge is on its way for lost.
	Waiting func() (over func())
}

// Apply is the settle's step on the turn's chain, inside a store update.
func (p *Turn) Apply(chain []*trajectory.Record) ([]trajectory.Event, error) {
	return p.Rules(chain)
}

// Sides settles the turn's key grant and its tenant's ledger.
func (p *Turn) Sides(ctx context.Context) {
	p.Keys.Settle(ctx, p.Used)
	p.Tenant(ctx)
}

// TenantSide reports a settle with a tenant ledger to settle.
func (p *Turn) TenantSide() bool { return p.Spends }

// SettleTenant charges the turn to its tenant's ledger.
func (p *Turn) SettleTenant(ctx context.Context) { p.Tenant(ctx) }

// HasSides reports a settle with a key grant or a tenant ledger to settle.
func (p *Turn) HasSides() bool {
	return p.Keys.Grant() != nil || p.TenantSide()
}

// Key is the settle of the turn's key grant.
func (p *Turn) Key() ratelimit.Settlement { return p.Keys.Settlement(p.Used) }

// LeaveKey takes the turn's grant out of its key's scheduling, for its
// settle to ride in an admission's update, and returns that settle.
func (p *Turn) LeaveKey() ratelimit.Settlement { return p.Keys.Leave(p.Used) }

// Record is the turn's thread record.
func (p *Turn) Record() string { return p.Rec }

// Write saves the settle in its own update.
func (p *Turn) Write(ctx context.Context) {
	p.wrote(ctx, p.save(ctx))
}

// Finish reports the outcome of a flush's update of the settle.
func (p *Turn) Finish(ctx context.Context, evs []trajectory.Event, err error) {
	p.wrote(ctx, p.saved(evs, err))
}

// save writes the settle in its own update: what Write and its retries
// send.
func (p *Turn) save(ctx context.Context) error {
	var evs []trajectory.Event
	_, err := p.Store.UpdateChain(ctx, p.Rec, p.Update(&evs))
	return p.saved(evs, err)
}

// Update is the settle as a store update's fn; evs receives its events.
func (p *Turn) Update(evs *[]trajectory.Event) func([]*trajectory.Record) ([]trajectory.Event, error) {
	return func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		var err error
		*evs, err = p.Apply(chain)
		return *evs, err
	}
}

// saved is what an update's err says of the settle: nil when it was
// saved (its events are observed) or an earlier attempt, whose answer was
// lost, saved it.
func (p *Turn) saved(evs []trajectory.Event, err error) error {
	if errors.Is(err, outcome.ErrSettled) {
		return nil
	}
	if err == nil {
		p.Observe(evs)
	}
	return err
}

// wrote logs a settle that was saved; one the store could not take (it
// is out) is retried in the background, any other failure logged with
// the figures.
func (p *Turn) wrote(ctx context.Context, err error) {
	if err != nil {
		if errors.Is(err, trajectory.ErrUnavailable) {
			// The reply went out; its charge must not be lost.
			var over func()
			if p.Waiting != nil {
				over = p.Waiting()
			}
			p.Retries.RetryThen(p.Log, WriteCharge, p.save, p.Attrs, over)
			return
		}
		p.lost(ctx, err)
		return
	}
	p.logSaved(ctx)
}

// logSaved logs a settle saved: "turn" for a charge written, "turn not
// charged" with its reason for a call the provider refused or never saw,
// whose settle only ended the call.
func (p *Turn) logSaved(ctx context.Context) {
	if p.Uncharged != "" {
		p.Log.LogAttrs(ctx, slog.LevelInfo, "turn not charged", append(p.Attrs, slog.String("reason", p.Uncharged))...)
		return
	}
	p.Log.LogAttrs(ctx, slog.LevelInfo, "turn", p.Attrs...)
}

// Done reports a settle that an admission's update applied (err nil) or
// found already applied or gone.
func (p *Turn) Done(ctx context.Context, evs []trajectory.Event, err error) {
	switch {
	case err == nil:
		p.Observe(evs)
		p.logSaved(ctx)
	case errors.Is(err, outcome.ErrSettled):
	default:
		p.lost(ctx, err)
	}
}

func (p *Turn) lost(ctx context.Context, err error) {
	p.Log.LogAttrs(ctx, slog.LevelError, "charge not recorded", append(p.Attrs, slog.String("error", err.Error()))...)
}
