package proxy

import (
	"errors"

	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// outcome is what a finished turn reports to its record.
type outcome struct {
	stop      string
	calls     []trajectory.PendingCall
	usage     trajectory.Usage
	estimated bool
	status    int
	upstream  bool // the provider answered with an error status or could not be reached
	// rateLimited: the call was never sent, for want of key capacity.
	rateLimited bool
	detail      string
	model       string // the model the reply names; "" when none
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
		CacheWriteTokens: res.Usage.CacheWriteTokens, OutputTokens: res.Usage.OutputTokens}
	complete := cause == nil && !res.Truncated && len(res.Errors) == 0
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
	if complete {
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
