package proxy

import (
	"fmt"
	"sync/atomic"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/inflight"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/trajectory"
)

// Record is the thread record the turn's call runs on.
func (t *turn) Record() string { return t.recID }

// Control stops the turn's call for an operator's cancel or kill.
func (t *turn) Control(k trajectory.ControlKind) {
	switch k {
	case trajectory.ControlCancel:
		t.stop(outcome.Canceled)
	case trajectory.ControlKill:
		t.stop(outcome.Killed)
	}
}

var _ = inflight.New[*turn] // *turn is an inflight.Call

// stop ends the call in flight for why; the first reason wins.
func (t *turn) stop(why outcome.Stop) {
	if atomic.CompareAndSwapInt32((*int32)(&t.stopped), int32(outcome.NotStopped), int32(why)) {
		t.cancelUp()
	}
}

// stopError is the error type and message the agent gets for a call
// stopped by a cancel or by its deadline.
func (t *turn) stopError() (typ, msg string) {
	if t.stopReason() == outcome.Shutdown {
		return apierr.Upstream, "gatekeeper is shutting down and this call outlived its grace; it was stopped and charged for what streamed; retry"
	}
	if t.stopReason() == outcome.Deadline {
		return apierr.Upstream, fmt.Sprintf("the call ran past its deadline (call_limits.call_deadline %s) and was stopped",
			t.req.tenant.CallLimits.CallDeadline.Std())
	}
	return apierr.TrajectoryCanceled, fmt.Sprintf("trajectory %s was canceled by an operator; this call was stopped and the run has ended", t.recID)
}

func (t *turn) stopReason() outcome.Stop { return outcome.Stop(atomic.LoadInt32((*int32)(&t.stopped))) }
