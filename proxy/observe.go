package proxy

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
)

// observe reports what a store update wrote to telemetry: state
// transitions (span events and the trajectories-by-state gauge) and budget
// stage changes. It runs after the update succeeded, so an optimistic
// store's retries count once.
func (t *turn) observe(evs []trajectory.Event) {
	tel, tenant := t.s.tel, t.req.tenant.Name
	if tel == nil {
		return
	}
	for _, ev := range evs {
		switch ev.Type {
		case trajectory.EventTransition:
			tel.StateChanged(tenant, string(ev.From), string(ev.To))
			if t.tt.Recording() { // an unsampled turn builds no attributes
				t.tt.Event("gatekeeper.transition", attribute.String("gatekeeper.trajectory.id", ev.Trajectory),
					attribute.String("gatekeeper.from", string(ev.From)), attribute.String("gatekeeper.to", string(ev.To)),
					attribute.String("gatekeeper.reason", ev.Reason))
			}
		case trajectory.EventStage:
			from, to := chainrule.StageChange(ev)
			tel.StageChanged(tenant, from, to)
		}
	}
}

// endSpan ends the turn's span and records its metrics.
func (t *turn) endSpan(o outcome.Turn, charge meter.Charge) {
	if t.tt == nil {
		return
	}
	e := telemetry.TurnEnd{
		ResponseModel: t.pr.Model, Stop: o.Stop,
		InputTokens: o.Usage.InputTokens, CachedInputTokens: o.Usage.CachedInputTokens,
		CacheWriteTokens: o.Usage.CacheWriteTokens, OutputTokens: o.Usage.OutputTokens,
		Dollars: charge.Dollars(), Estimated: o.Estimated || !charge.Priced && !o.Upstream, Status: o.Status,
		ApprovalID: o.ApprovalID,
	}
	if o.Model != "" {
		e.ResponseModel = o.Model
	}
	if o.Stop != "" {
		e.FinishReasons = []string{o.Stop} // normalized: the same vocabulary for the three APIs
	}
	switch {
	case o.RateLimited:
		e.ErrorType = apierr.RateLimited // never sent: not the provider's error
	case o.Upstream:
		e.ErrorType = apierr.Upstream
		if o.Status >= 400 {
			e.ErrorType = http.StatusText(o.Status)
		}
		t.s.tel.UpstreamError(t.req.up.cfg.Name, e.ErrorType)
	case o.Stop == "canceled" || o.Stop == "error":
		e.ErrorType = o.Stop
	}
	t.tt.End(e)
}
