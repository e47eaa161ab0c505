package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Recording a turn: its outcome, charged to its thread record and the
// record's ancestors once, when the reply ends (or fails).

// outcome is what a finished turn reports to its record.
type outcome struct {
	stop  string
	calls []trajectory.PendingCall
	// hosted are the calls the provider ran itself (web search, hosted
	// MCP...): recorded with the turn, never gated nor pending.
	hosted    []trajectory.PendingCall
	usage     trajectory.Usage
	estimated bool
	status    int
	upstream  bool // the provider answered with an error status or could not be reached
	// rateLimited: the call was never sent, for want of key capacity.
	rateLimited bool
	detail      string
	model       string // the model the reply names; "" when none
	// approvalID, when set, holds the reply's calls for approval: the
	// record ends the turn AWAITING_APPROVAL.
	approvalID string
	// reply is what the loop watchdog reads of a complete reply; nil when
	// it is off or the reply did not complete.
	reply *watchdog.Seen
}

// failed settles a turn that produced no reply the decoder saw. It is a
// no-op once the turn was recorded.
func (t *turn) failed(err error) {
	o := outcome{stop: "error", upstream: true, estimated: true, detail: err.Error()}
	if t.clientGone() {
		o.stop = "canceled"
	}
	o.usage.InputTokens = estimateTokens(int64(len(t.body)))
	t.settle(o)
}

// settle records the turn's outcome: one of the two points where a turn
// is recorded, the other being holdOpened. Only the first of them
// records; what comes after a recorded turn (a reply body closed after
// its end, a late failure) changes nothing. A turn runs on its request's
// goroutine, and so do its records: no lock is needed.
func (t *turn) settle(o outcome) {
	if t.recorded {
		return
	}
	t.recorded = true
	t.record(o)
}

// holdOpened records a turn whose reply is held for approval (openHold):
// charged, its calls pending on approvalID, the record AWAITING_APPROVAL.
func (t *turn) holdOpened(o outcome, approvalID string) {
	if t.recorded {
		return
	}
	t.recorded = true
	o.approvalID = approvalID
	t.record(o)
}

// record writes the turn's outcome to its thread record (through behind.go
// on Redis, or at once), with a context that outlives the agent: a turn
// whose client went away is still charged.
func (t *turn) record(o outcome) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), 10*time.Second)
	defer cancel()
	t.write(ctx, o)
}

func (t *turn) write(ctx context.Context, o outcome) {
	s := t.s
	now := s.now()
	var charge meter.Charge
	// The model the reply names is the one that ran (an alias resolves to
	// a snapshot, a router picks another); the request's when it names none.
	model := o.model
	if model == "" {
		model = t.pr.Model
	}
	if !o.upstream {
		charge = s.prices.Cost(model, o.usage)
	}
	data := map[string]any{
		"stop": o.stop, "status": o.status, "model": model, "provider": t.req.up.cfg.Name,
		"duration_ms": now.Sub(t.started).Milliseconds(), "estimated": o.estimated,
		"usage": o.usage, "dollars": charge.Dollars(), "call": t.adm.Call,
	}
	if !o.upstream && !charge.Priced {
		data["fallback_priced"] = true
	}
	if len(o.calls) > 0 {
		calls := make([]map[string]string, len(o.calls))
		for i, c := range o.calls {
			calls[i] = map[string]string{"id": c.ID, "name": c.Name}
		}
		data["tool_calls"] = calls
	}
	if len(o.hosted) > 0 {
		calls := make([]map[string]string, len(o.hosted))
		for i, c := range o.hosted {
			calls[i] = map[string]string{"id": c.ID, "name": c.Name}
		}
		data["hosted_calls"] = calls
	}
	if o.detail != "" {
		data["detail"] = o.detail
	}
	t.stageNote(data)
	defer t.endSpan(o, charge)
	// t.log names the trajectory.
	attrs := []slog.Attr{slog.String("call", t.adm.Call), slog.String("stop", o.stop), slog.Int("status", o.status),
		slog.Int64("input_tokens", o.usage.InputTokens), slog.Int64("cached_input_tokens", o.usage.CachedInputTokens),
		slog.Int64("cache_write_tokens", o.usage.CacheWriteTokens), slog.Int64("output_tokens", o.usage.OutputTokens),
		slog.Float64("dollars", charge.Dollars()), slog.Bool("estimated", o.estimated), slog.Int("tool_calls", len(o.calls))}
	p := &pendingSettle{t: t, o: o, charge: charge, data: data, now: now, attrs: attrs}
	if !t.gated && s.behind.Add(p) {
		// Written behind the reply (behind.go). A gated tenant's turns
		// settle at once: a held reply's record must be waiting for its
		// approval before the agent can ask again.
		return
	}
	p.Sides(ctx)
	p.Write(ctx)
}

// Settles that change nothing: errSettled, the record took this call's
// settle already (an attempt whose answer was lost); errCallGone, the
// record holds neither the call nor a trace of its settle (its data was
// lost, or an operator reset it), so the charge has nowhere to go.
var (
	errSettled  = errors.New("proxy: call already settled")
	errCallGone = errors.New("proxy: the call is no longer on its record; its charge is not recorded")
)

// settleChain ends the turn on its thread record and moves the call's
// reservation to spend on every record of the chain, in one atomic update.
// The call id makes it idempotent: a settle retried after a lost reply
// finds the call gone and changes nothing.
func (t *turn) settleChain(chain []*trajectory.Record, o outcome, charge meter.Charge, data map[string]any, now time.Time) ([]trajectory.Event, error) {
	rec := chain[0]
	if rec.Call == "" || rec.Call != t.adm.Call {
		if i := slices.Index(rec.LostCalls, t.adm.Call); i >= 0 {
			return t.settleLost(chain, i, o, charge, data, now), nil
		}
		if rec.SettledCall == t.adm.Call {
			return nil, errSettled
		}
		return nil, errCallGone
	}
	rec.SettledCall = t.adm.Call
	dollars := charge.Dollars()
	typ := trajectory.EventTurn
	if o.upstream {
		typ = trajectory.EventUpstreamError
	}
	evs := []trajectory.Event{chainrule.Event(rec.ID, now, typ, data)}
	switch {
	case rec.State != trajectory.CallingModel:
		// The run was stopped while the call was out (a sibling's call
		// halted it, or an operator): charged, with no state change.
		if !o.upstream {
			rec.CountTurn(trajectory.TurnOutcome{StopReason: o.stop, Usage: o.usage, Dollars: dollars, Estimated: o.estimated})
		}
	case o.upstream:
		// No reply from the model: the call is not a turn of the run.
		tr, err := rec.Transition(trajectory.Ready, "upstream_error", now)
		if err != nil {
			return nil, err
		}
		rec.LastStopReason = o.stop
		evs = append(evs, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...)
	default:
		ts, err := rec.EndTurn(trajectory.TurnOutcome{StopReason: o.stop, ToolCalls: o.calls, Usage: o.usage,
			Dollars: dollars, Estimated: o.estimated, ToolDeadline: t.s.cfg.Limits.ToolDeadline.Std(), ApprovalID: o.approvalID}, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	}
	if !o.upstream {
		tevs, err := chainrule.CountTruncation(rec, o.stop, t.req.tenant.MaxTruncations, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, tevs...)
		wevs, err := watchdog.Reply(t.s.cfg.WatchdogFor(t.req.tenant), rec, o.reply, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, wevs...)
	}
	cevs, err := t.afterTurn(rec, now)
	if err != nil {
		return nil, err
	}
	evs = append(evs, cevs...)
	released := rec.CallReserved
	chainrule.ClearCall(rec)
	for i, l := range chain {
		l.Reserved = l.Reserved.Release(released)
		if i > 0 && !o.upstream {
			// A descendant's model call is a turn of the whole run.
			l.AddSpend(o.usage, dollars, o.estimated)
			l.Spend.Turns++
		}
		if !o.upstream && !charge.Priced {
			l.FallbackPriced = true
		}
		l.ChargeWallClock(now)
	}
	ls := chainrule.Levels(chain, now, true)
	return append(evs, chainrule.ReadStages(chain, ls, meter.Check(ls, t.s.stages), t.s.stages, now)...), nil
}

// maxLostCalls bounds the lost calls a record remembers; an older one's
// reply, should it still come, goes uncharged and is logged.
const maxLostCalls = 8

// keepLost adds a reclaimed call to a record's lost calls.
func keepLost(lost []string, call string) []string {
	if call == "" {
		return lost
	}
	lost = append(lost, call)
	if len(lost) > maxLostCalls {
		lost = slices.Delete(lost, 0, len(lost)-maxLostCalls)
	}
	return lost
}

// settleLost charges the late reply of a call its thread took for lost
// (chain[0].LostCalls[i]): the reservation went back when it was
// reclaimed, so only the spend is added, on every record of the chain,
// with no state change. Taking the id off the list makes it idempotent.
func (t *turn) settleLost(chain []*trajectory.Record, i int, o outcome, charge meter.Charge, data map[string]any, now time.Time) []trajectory.Event {
	rec := chain[0]
	rec.LostCalls = slices.Delete(rec.LostCalls, i, i+1)
	rec.SettledCall = t.adm.Call
	data["late"] = true
	detail, _ := data["detail"].(string)
	data["detail"] = strings.TrimPrefix(detail+"; ", "; ") +
		"the call had been taken for lost and its reservation released; its reply arrived later and is charged"
	typ := trajectory.EventTurn
	if o.upstream {
		typ = trajectory.EventUpstreamError
	}
	evs := []trajectory.Event{chainrule.Event(rec.ID, now, typ, data)}
	if o.upstream {
		return evs
	}
	dollars := charge.Dollars()
	rec.Turns++
	for _, l := range chain {
		l.AddSpend(o.usage, dollars, o.estimated)
		l.Spend.Turns++
		if !charge.Priced {
			l.FallbackPriced = true
		}
	}
	ls := chainrule.Levels(chain, now, true)
	return append(evs, chainrule.ReadStages(chain, ls, meter.Check(ls, t.s.stages), t.s.stages, now)...)
}

// chargeUndelivered records a reply the provider produced, and billed,
// that the agent does not get (it could not be checked or held): charged
// from its usage, or estimated from the request and the reply's size, as a
// turn that ended in an error with no call pending.
func (t *turn) chargeUndelivered(res *streaming.Result, replyBytes int64, cause error) {
	if res == nil {
		res = &streaming.Result{}
	}
	o := outcome{stop: "error", status: http.StatusOK, model: res.Model, detail: "reply not delivered: " + cause.Error(),
		usage: trajectory.Usage{InputTokens: res.Usage.InputTokens, CachedInputTokens: res.Usage.CachedInputTokens,
			CacheWriteTokens: res.Usage.CacheWriteTokens, OutputTokens: res.Usage.OutputTokens}}
	if !res.UsageSeen {
		o.estimated = true
		if o.usage.InputTokens+o.usage.CachedInputTokens+o.usage.CacheWriteTokens == 0 {
			o.usage.InputTokens = estimateTokens(int64(len(t.body)))
		}
		o.usage.OutputTokens = max(o.usage.OutputTokens, estimateTokens(replyBytes))
	}
	t.settle(o)
}

// outcomeOf turns a decoded reply into an outcome.
func (t *turn) outcomeOf(res *streaming.Result, status int, cause error) outcome {
	o := outcome{status: status, stop: string(res.StopReason()), model: res.Model}
	switch why := t.stopReason(); {
	case why == stopCancel || why == stopKill:
		cause = errors.New("stopped by an operator")
		o.stop, o.detail = "canceled", cause.Error()
	case why == stopDeadline:
		cause = errors.New("call deadline exceeded")
		o.stop, o.detail = "error", cause.Error()
	case why == stopShutdown:
		cause = errors.New("stopped by gatekeeper's shutdown past its grace")
		o.stop, o.detail = "error", cause.Error()
	case cause != nil && t.clientGone():
		o.stop = "canceled"
		o.detail = "client went away"
	case cause != nil:
		o.stop = "error"
		o.detail = cause.Error()
	case res.Truncated:
		o.stop = "error"
		o.detail = "upstream stream ended without its terminal event"
	case o.stop == "":
		o.stop = "end_turn"
	}
	o.usage = trajectory.Usage{InputTokens: res.Usage.InputTokens, CachedInputTokens: res.Usage.CachedInputTokens,
		CacheWriteTokens: res.Usage.CacheWriteTokens, OutputTokens: res.Usage.OutputTokens,
		CacheWrite1hTokens: min(t.extras.CacheWrite1hTokens, res.Usage.CacheWriteTokens), ServiceTier: t.extras.ServiceTier}
	complete := cause == nil && !res.Truncated && len(res.Errors) == 0
	if len(res.Errors) > 0 && cause == nil && !res.Truncated && res.UsageSeen && !res.UsageFinal {
		// The reply ended in the provider's error event with no closing
		// usage: what it has is the opening placeholder (Anthropic's
		// message_start says output_tokens: 1), never a charge for what
		// streamed. The output is at least the estimate from its bytes.
		if est := estimateTokens(res.OutputBytes); est > o.usage.OutputTokens {
			o.usage.OutputTokens, o.estimated = est, true
		}
	}
	if cause != nil || res.Truncated || !res.UsageSeen {
		// Charged from what was seen: input from the request when the
		// provider reported none, output estimated from the streamed bytes.
		o.estimated = true
		if o.usage.InputTokens+o.usage.CachedInputTokens+o.usage.CacheWriteTokens == 0 {
			o.usage.InputTokens = estimateTokens(int64(len(t.body)))
		}
		if est := estimateTokens(res.OutputBytes); est > o.usage.OutputTokens {
			o.usage.OutputTokens = est
		}
	}
	for _, tc := range res.ToolCalls {
		if tc.Server && tc.Complete {
			id := tc.ID
			if id == "" {
				id = tc.ItemID // Responses hosted items have no call_id
			}
			o.hosted = append(o.hosted, trajectory.PendingCall{ID: id, Name: tc.Name})
		}
	}
	if complete {
		o.reply = watchdog.See(t.s.cfg.WatchdogFor(t.req.tenant), res)
		if t.proposed != nil {
			o.reply = t.proposed
		}
		for _, tc := range res.ClientToolCalls() {
			if tc.Complete && tc.Choice == 0 && !t.withheld(tc.ID) {
				o.calls = append(o.calls, trajectory.PendingCall{ID: tc.ID, Name: tc.Name})
			}
		}
		if len(o.calls) == 0 && o.stop == string(streaming.StopToolUse) && t.filter != nil && len(t.filter.Withheld()) > 0 {
			o.stop = string(streaming.StopEndTurn) // what the agent received
		}
	}
	return o
}

// estimateTokens is the usual four bytes a token.
func estimateTokens(n int64) int64 { return (n + 3) / 4 }

func (t *turn) clientGone() bool { return t.ctx.Err() != nil }
