package admit

import (
	"fmt"
	"time"
)

// Kind is what a refusal asks of the agent.
type Kind int

const (
	// Exhausted: a budget or a ceiling has no room for the call; retrying
	// does not help (402 budget_exceeded).
	Exhausted Kind = iota + 1
	// Contended: other calls hold the room the call needs; it may be
	// retried after RetryAfter (429 rate_limited).
	Contended
	// OperatorsOnly: the tenant's runs are started by operators, and none
	// started this one (403 permission_error).
	OperatorsOnly
	// Unavailable: the store or the ledger failed; admission fails closed
	// (Err says how).
	Unavailable
	// RunEnded: the run has finished; only a new run may go on (403
	// trajectory_canceled).
	RunEnded
	// Paused: the run stayed paused for as long as a request waits; it
	// may be retried after RetryAfter (503 trajectory_paused).
	Paused
)

// Refusal is a call admission refused. Msg is for the agent; Err is the
// detail kept for logs.
type Refusal struct {
	Kind       Kind
	Msg        string
	RetryAfter time.Duration
	Err        error
}

func (r *Refusal) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("admit: refused (%d): %s: %v", r.Kind, r.Msg, r.Err)
	}
	return fmt.Sprintf("admit: refused (%d): %s", r.Kind, r.Msg)
}

func (r *Refusal) Unwrap() error { return r.Err }

// unavailable is a store failure as admission's refusal.
func unavailable(err error) error { return &Refusal{Kind: Unavailable, Err: err} }
