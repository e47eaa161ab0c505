package proxy

import (
	"fmt"
	"sync/atomic"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/inflight"
	"gatekeeper/trajectory"
)

// Reasons a call in flight is stopped before its reply ends.
type stopKind int32

const (
	stopNone     stopKind = iota
	stopCancel            // an operator canceled the run: end the stream with an error event
	stopKill              // an operator killed the run: drop the agent's connection
	stopDeadline          // the call outlived the tenant's call_deadline
	stopShutdown          // gatekeeper is stopping and its shutdown_grace ran out
)

// Record is the thread record the turn's call runs on.
func (t *turn) Record() string { return t.recID }

// Control stops the turn's call for an operator's cancel or kill.
func (t *turn) Control(k trajectory.ControlKind) {
	switch k {
	case trajectory.ControlCancel:
		t.stop(stopCancel)
	case trajectory.ControlKill:
		t.stop(stopKill)
	}
}

var _ = inflight.New[*turn] // *turn is an inflight.Call

// stop ends the call in flight for why; the first reason wins.
func (t *turn) stop(why stopKind) {
	if atomic.CompareAndSwapInt32((*int32)(&t.stopped), int32(stopNone), int32(why)) {
		t.cancelUp()
	}
}

// stopError is the error type and message the agent gets for a call
// stopped by a cancel or by its deadline.
func (t *turn) stopError() (typ, msg string) {
	if t.stopReason() == stopShutdown {
		return apierr.Upstream, "gatekeeper is shutting down and this call outlived its grace; it was stopped and charged for what streamed; retry"
	}
	if t.stopReason() == stopDeadline {
		return apierr.Upstream, fmt.Sprintf("the call ran past its deadline (call_limits.call_deadline %s) and was stopped",
			t.req.tenant.CallLimits.CallDeadline.Std())
	}
	return apierr.TrajectoryCanceled, fmt.Sprintf("trajectory %s was canceled by an operator; this call was stopped and the run has ended", t.recID)
}

func (t *turn) stopReason() stopKind { return stopKind(atomic.LoadInt32((*int32)(&t.stopped))) }
