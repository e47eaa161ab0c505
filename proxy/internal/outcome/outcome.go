package outcome

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Turn is what a finished turn reports to its record.
type Turn struct {
	Stop  string
	Calls []trajectory.PendingCall
	// Hosted are the calls the provider ran itself (web search, hosted
	// MCP...): recorded with the turn, never gated nor pending.
	Hosted    []trajectory.PendingCall
	Usage     trajectory.Usage
	Estimated bool
	Status    int
	Upstream  bool // the provider answered with an error status or could not be reached
	// RateLimited: the call was never sent, for want of key capacity.
	RateLimited bool
	Detail      string
	Model       string // the model the reply names; "" when none
	// ApprovalID, when set, holds the reply's calls for approval: the
	// record ends the turn AWAITING_APPROVAL.
	ApprovalID string
	// Reply is what the loop watchdog reads of a complete reply; nil when
	// it is off or the reply did not complete.
	Reply *watchdog.Seen
}

// Stop is why a call in flight was stopped before its reply ended, if it
// was: the one set of reasons, told at the edges only (the agent's HTTP
// error in proxy, the end of its reply body in replybody, the turn's
// outcome here).
type Stop int32

const (
	NotStopped Stop = iota
	Canceled        // an operator canceled the run: the stream ends with an error event
	Killed          // an operator killed the run: the agent's connection is dropped
	Deadline        // the call outlived the tenant's call_deadline
	Shutdown        // gatekeeper is stopping and its shutdown grace ran out
)

// Facts is what the turn knows of its call that its outcome reads
// besides the reply.
type Facts struct {
	Stopped    Stop
	ClientGone bool  // the agent went away
	BodyBytes  int64 // the request body's size, for an input the provider did not report
	Extras     streaming.Extras
	Watchdog   config.Watchdog
	// Proposed is a whole reply's calls as the provider sent them, when
	// the call filter withheld some.
	Proposed *watchdog.Seen
	Withheld []streaming.ToolCall // the calls the call filter withheld
}

func (f Facts) withheld(id string) bool {
	for _, c := range f.Withheld {
		if c.ID == id {
			return true
		}
	}
	return false
}

// Of is the outcome of a decoded reply res, answered with status; cause
// is what cut it short, nil when nothing did.
func Of(f Facts, res *streaming.Result, status int, cause error) Turn {
	o := Turn{Status: status, Stop: string(res.StopReason()), Model: res.Model}
	switch {
	case f.Stopped == Canceled || f.Stopped == Killed:
		cause = errors.New("stopped by an operator")
		o.Stop, o.Detail = "canceled", cause.Error()
	case f.Stopped == Deadline:
		cause = errors.New("call deadline exceeded")
		o.Stop, o.Detail = "error", cause.Error()
	case f.Stopped == Shutdown:
		cause = errors.New("stopped by gatekeeper's shutdown past its grace")
		o.Stop, o.Detail = "error", cause.Error()
	case cause != nil && f.ClientGone:
		o.Stop = "canceled"
		o.Detail = "client went away"
	case cause != nil:
		o.Stop = "error"
		o.Detail = cause.Error()
	case res.Truncated:
		o.Stop = "error"
		o.Detail = "upstream stream ended without its terminal event"
	case o.Stop == "":
		o.Stop = "end_turn"
	}
	o.Usage = trajectory.Usage{InputTokens: res.Usage.InputTokens, CachedInputTokens: res.Usage.CachedInputTokens,
		CacheWriteTokens: res.Usage.CacheWriteTokens, OutputTokens: res.Usage.OutputTokens,
		CacheWrite1hTokens: min(f.Extras.CacheWrite1hTokens, res.Usage.CacheWriteTokens), ServiceTier: f.Extras.ServiceTier}
	complete := cause == nil && !res.Truncated && len(res.Errors) == 0
	if len(res.Errors) > 0 && cause == nil && !res.Truncated && res.UsageSeen && !res.UsageFinal {
		// The reply ended in the provider's error event with no closing
		// usage: what it has is the opening placeholder (Anthropic's
		// message_start says output_tokens: 1), never a charge for what
		// streamed. The output is at least the estimate from its bytes.
		if est := EstimateTokens(res.OutputBytes); est > o.Usage.OutputTokens {
			o.Usage.OutputTokens, o.Estimated = est, true
		}
	}
	if cause != nil || res.Truncated || !res.UsageSeen {
		// Charged from what was seen: input from the request when the
		// provider reported none, output estimated from the streamed bytes.
		o.Estimated = true
		if o.Usage.InputTokens+o.Usage.CachedInputTokens+o.Usage.CacheWriteTokens == 0 {
			o.Usage.InputTokens = EstimateTokens(f.BodyBytes)
		}
		if est := EstimateTokens(res.OutputBytes); est > o.Usage.OutputTokens {
			o.Usage.OutputTokens = est
		}
	}
	for _, tc := range res.ToolCalls {
		if tc.Server && tc.Complete {
			id := tc.ID
			if id == "" {
				id = tc.ItemID // Responses hosted items have no call_id
			}
			o.Hosted = append(o.Hosted, trajectory.PendingCall{ID: id, Name: tc.Name})
		}
	}
	if complete {
		o.Reply = watchdog.See(f.Watchdog, res)
		if f.Proposed != nil {
			o.Reply = f.Proposed
		}
		for _, tc := range res.ClientToolCalls() {
			if tc.Complete && tc.Choice == 0 && !f.withheld(tc.ID) {
				o.Calls = append(o.Calls, trajectory.PendingCall{ID: tc.ID, Name: tc.Name})
			}
		}
		if len(o.Calls) == 0 && o.Stop == string(streaming.StopToolUse) && len(f.Withheld) > 0 {
			o.Stop = string(streaming.StopEndTurn) // what the agent received
		}
	}
	return o
}

// Failed is the outcome of a call that produced no reply the decoder saw,
// for err: charged its request's input, estimated from bodyBytes.
func Failed(err error, clientGone bool, bodyBytes int64) Turn {
	o := Turn{Stop: "error", Upstream: true, Estimated: true, Detail: err.Error()}
	if clientGone {
		o.Stop = "canceled"
	}
	o.Usage.InputTokens = EstimateTokens(bodyBytes)
	return o
}

// Undelivered is the outcome of a reply the provider produced, and
// billed, that the agent does not get, for cause: charged from its usage,
// or estimated from the request's bodyBytes and the reply's replyBytes, as
// a turn that ended in an error with no call pending. res may be nil.
func Undelivered(res *streaming.Result, bodyBytes, replyBytes int64, cause error) Turn {
	if res == nil {
		res = &streaming.Result{}
	}
	o := Turn{Stop: "error", Status: http.StatusOK, Model: res.Model, Detail: "reply not delivered: " + cause.Error(),
		Usage: trajectory.Usage{InputTokens: res.Usage.InputTokens, CachedInputTokens: res.Usage.CachedInputTokens,
			CacheWriteTokens: res.Usage.CacheWriteTokens, OutputTokens: res.Usage.OutputTokens}}
	if !res.UsageSeen {
		o.Estimated = true
		if o.Usage.InputTokens+o.Usage.CachedInputTokens+o.Usage.CacheWriteTokens == 0 {
			o.Usage.InputTokens = EstimateTokens(bodyBytes)
		}
		o.Usage.OutputTokens = max(o.Usage.OutputTokens, EstimateTokens(replyBytes))
	}
	return o
}

// RateLimited is the outcome of a call that never got key capacity,
// answered status for cause: not a turn of the run, and not charged.
func RateLimited(status int, cause error) Turn {
	return Turn{Stop: "error", Upstream: true, RateLimited: true, Status: status, Estimated: true,
		Detail: "rate limited: " + cause.Error()}
}

// EstimateTokens is the usual four bytes a token.
func EstimateTokens(n int64) int64 { return (n + 3) / 4 }

// Ran is the model that ran: the one the reply names (an alias resolves
// to a snapshot, a router picks another), else requested.
func (o Turn) Ran(requested string) string {
	if o.Model == "" {
		return requested
	}
	return o.Model
}

// Price is what the turn costs at prices for model; a call the provider
// refused or never answered costs nothing.
func (o Turn) Price(prices *meter.Table, model string) meter.Charge {
	if o.Upstream {
		return meter.Charge{}
	}
	return prices.Cost(model, o.Usage)
}

// Uncharged says why the turn charges nothing: the provider refused the
// call (its status), the call got no key capacity, or no reply of the
// provider came; "" for a turn that is charged.
func (o Turn) Uncharged() string {
	switch {
	case !o.Upstream:
		return ""
	case o.RateLimited:
		return "no key capacity; the call was not sent"
	case o.Status > 0:
		return fmt.Sprintf("the provider answered %d", o.Status)
	case o.Detail != "":
		return "no reply from the provider: " + o.Detail
	}
	return "no reply from the provider"
}

// EventData is what a turn's event says of it: call is its id, model the
// one that ran, provider the provider's name, took how long it took.
func (o Turn) EventData(call, model, provider string, took time.Duration, charge meter.Charge) TurnData {
	return TurnData{Stop: o.Stop, Status: o.Status, Model: model, Provider: provider,
		DurationMS: took.Milliseconds(), Estimated: o.Estimated, Usage: o.Usage, Dollars: charge.Dollars(), Call: call,
		FallbackPriced: !o.Upstream && !charge.Priced, ToolCalls: o.Calls, HostedCalls: o.Hosted, Detail: o.Detail}
}

// Attrs are the turn's log fields, for call priced charge.
func (o Turn) Attrs(call string, charge meter.Charge) []slog.Attr {
	return []slog.Attr{slog.String("call", call), slog.String("stop", o.Stop), slog.Int("status", o.Status),
		slog.Int64("input_tokens", o.Usage.InputTokens), slog.Int64("cached_input_tokens", o.Usage.CachedInputTokens),
		slog.Int64("cache_write_tokens", o.Usage.CacheWriteTokens), slog.Int64("output_tokens", o.Usage.OutputTokens),
		slog.Float64("dollars", charge.Dollars()), slog.Bool("estimated", o.Estimated), slog.Int("tool_calls", len(o.Calls))}
}
