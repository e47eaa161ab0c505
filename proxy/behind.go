package proxy

import (
	"context"
	"time"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/trajectory"
)

// A turn's settle as the write-behind queue (settle.Behind) holds it
// (settle.Turn): the turn's own writes, which the queue orders and
// batches.

var _ settle.KeyGrant = (*keys.Turn)(nil)

// pendingSettle is the turn's settle of o, computed when its reply ended.
// Its rules read the turn when the settle is applied (settleRules).
func (t *turn) pendingSettle(o outcome.Turn, charge meter.Charge, data outcome.TurnData, now time.Time) *settle.Turn {
	return &settle.Turn{Rec: t.recID, Store: t.s.store,
		Rules: func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			return t.settleRules().Chain(chain, o, charge, data, now)
		},
		Observe: t.observe, Keys: t.rate, Used: keyUsed(o),
		Spends:  t.req.rules.ceilings.Spends(t.req.tenant),
		Tenant:  func(ctx context.Context) { t.settleTenant(ctx, charge, o) },
		Retries: t.s.settles, Log: t.log, Attrs: o.Attrs(t.adm.Call, charge), Uncharged: o.Uncharged(),
		Waiting: func() func() { return t.s.waitingSettle(t.recID, t.adm.Call, o.Usage.OutputTokens) }}
}
