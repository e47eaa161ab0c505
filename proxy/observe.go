package proxy

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/chainrule"
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
			t.tt.Event("gatekeeper.transition", attribute.String("gatekeeper.trajectory.id", ev.Trajectory),
				attribute.String("gatekeeper.from", string(ev.From)), attribute.String("gatekeeper.to", string(ev.To)),
				attribute.String("gatekeeper.reason", ev.Reason))
		case trajectory.EventStage:
			from, to := chainrule.StageChange(ev)
			tel.StageChanged(tenant, from, to)
		}
	}
}

// endSpan ends the turn's span and records its metrics.
func (t *turn) endSpan(o outcome, charge meter.Charge) {
	if t.tt == nil {
		return
	}
	e := telemetry.TurnEnd{
		ResponseModel: t.pr.Model, Stop: o.stop,
		InputTokens: o.usage.InputTokens, CachedInputTokens: o.usage.CachedInputTokens,
		CacheWriteTokens: o.usage.CacheWriteTokens, OutputTokens: o.usage.OutputTokens,
		Dollars: charge.Dollars(), Estimated: o.estimated || !charge.Priced && !o.upstream, Status: o.status,
		ApprovalID: o.approvalID,
	}
	if o.model != "" {
		e.ResponseModel = o.model
	}
	if o.stop != "" {
		e.FinishReasons = []string{o.stop} // normalized: the same vocabulary for the three APIs
	}
	switch {
	case o.rateLimited:
		e.ErrorType = apierr.RateLimited // never sent: not the provider's error
	case o.upstream:
		e.ErrorType = "upstream_error"
		if o.status >= 400 {
			e.ErrorType = http.StatusText(o.status)
		}
		t.s.tel.UpstreamError(t.req.up.cfg.Name, e.ErrorType)
	case o.stop == "canceled" || o.stop == "error":
		e.ErrorType = o.stop
	}
	t.tt.End(e)
}
