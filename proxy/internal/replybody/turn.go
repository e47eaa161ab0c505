package replybody

import (
	"context"
	"errors"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/streaming"
	"gatekeeper/telemetry"
)

var (
	// ErrTruncated aborts the agent's connection when the provider's
	// stream ended without its terminal event: a clean end after half a
	// tool call is taken as success by real agents, which then silently
	// drop the call.
	ErrTruncated = errors.New("proxy: upstream stream ended without its terminal event")
	// ErrKilled drops the agent's connection: a killed run gets no more
	// bytes.
	ErrKilled = errors.New("proxy: trajectory killed by an operator")
)

// Turn is the turn whose reply a body reads: what stays the turn's.
type Turn interface {
	// Settle records the turn from its reply, decoded as res, which came
	// with status and ended early for cause (nil: it ended as it should).
	// Only the first record of a turn counts.
	Settle(res *streaming.Result, status int, cause error)
	// SettleError records the turn from the provider's error reply:
	// its status and its body (nil when it passed the body's limit).
	SettleError(status int, body []byte)
	// Stopped is why the turn's call was stopped before its reply ended.
	Stopped() Stop
	// OpenHold holds the reply rep, decoded as res, for its gated calls,
	// and records the turn as held; it returns the hold and the turn's
	// client, which waits on it.
	OpenHold(res *streaming.Result, rep escrow.Reply, gated []escrow.Gated) (*approvals.Hold, *escrow.Client, error)
}

// Stop is why a turn's call was stopped (outcome.Stop), and but for a
// killed run the error event (Type, Msg) the agent's stream ends with.
type Stop struct {
	Kind      outcome.Stop
	Type, Msg string
}

// Reply is what both bodies read a turn's reply with.
type Reply struct {
	Turn    Turn
	Dialect streaming.Dialect
	Span    *telemetry.Turn   // the reply's first byte is marked on it; nil: none
	Extras  *streaming.Extras // the reply's 1-hour cache writes and service tier are read into it
}

// Gates is what a streamed reply of a tenant with gates is held with.
type Gates struct {
	Escrow   *escrow.Keeper
	Input    approvals.Input      // what the gates judge a call on, besides the call
	Withheld func(id string) bool // the call filter withheld the call
	// Ctx is the agent's request: the wait for a decision ends with it.
	Ctx context.Context
}
