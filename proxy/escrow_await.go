package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/holds"
	"gatekeeper/trajectory"
)

// The one wait of the escrow. Every client of a held turn (the original
// streamed request, the original non-streamed one, a retry in either form)
// waits through awaitDecision, which returns a typed end; answer maps an
// end to what the agent gets; the writers (escrow_stream.go,
// escrow_retry.go) only write it in their form.

// holdPoll bounds how long a held request waits between looks at its
// approval requests, in case a decision's signal was lost.
const holdPoll = time.Second

// errServerClosing ends a held wait when gatekeeper shuts down: the hold
// stays, and the agent's retry re-attaches on another replica.
var errServerClosing = errors.New("proxy: gatekeeper is shutting down")

// escrowWait is one client waiting on a held turn: the hold it waits on
// now (the next one when a continuation is held again) and the client.
type escrowWait struct {
	hold *approvals.Hold
	c    *escrowClient
}

// awaitEnd is how one step of a wait on a held turn ended.
type awaitEnd uint8

const (
	awaitPending      awaitEnd = iota // undecided after a keepalive period, or held again: the wait goes on
	awaitDecided                      // decided and settled: the reply rendered for the client is in body
	awaitStopped                      // an operator canceled the run: nothing held is delivered
	awaitKilled                       // an operator killed the run: no answer at all
	awaitClosing                      // gatekeeper is shutting down: the hold stays for a retry
	awaitGone                         // the client went away: the hold stays for its retry
	awaitElsewhere                    // another request of the turn took the decided reply
	awaitStoreDown                    // the approvals or record store failed
	awaitUnrenderable                 // the decided reply could not be put in the client's form
)

// awaited is the end of one step of a wait.
type awaited struct {
	end  awaitEnd
	body []byte             // awaitDecided
	rec  *trajectory.Record // awaitStopped: the stopped record
	err  error              // why, for the ends that have a cause
}

// answer is what the agent gets for a wait that ended as a did, when it
// asked for form: an error in its API's format (a status and body, or an
// error event on an open stream), or drop: the connection is dropped with
// no answer. A decided wait has neither: its body is the answer.
func (a awaited) answer(form replyForm) (he *HTTPError, drop bool) {
	switch a.end {
	case awaitStopped:
		return &HTTPError{Code: http.StatusForbidden, Type: errTrajectoryCanceled, NoRetry: true,
			Msg: fmt.Sprintf("trajectory %s was stopped by an operator while a tool call waited for approval; the call was not delivered", a.rec.ID)}, false
	case awaitElsewhere:
		return errHeldDelivered(), false
	case awaitStoreDown:
		return errApprovalsDown(a.err), false
	case awaitUnrenderable:
		return &HTTPError{Code: http.StatusInternalServerError, Type: errUpstream, NoRetry: true, Err: a.err,
			Msg: "gatekeeper could not render the decided reply of this held turn"}, false
	case awaitClosing:
		if form == formJSON {
			return &HTTPError{Code: http.StatusServiceUnavailable, Type: errUpstream, RetryAfter: time.Second,
				Msg: "gatekeeper is restarting while this turn waits for approval; retry to re-attach"}, false
		}
		return nil, true // a stream is dropped: the agent retries on another replica
	case awaitKilled, awaitGone:
		return nil, true
	}
	return nil, false
}

// errApprovalsDown is the agent's answer when the approval machinery cannot
// hold a gated call: the call is not delivered (fail closed), and the agent
// may retry.
func errApprovalsDown(err error) *HTTPError {
	return &HTTPError{Code: http.StatusServiceUnavailable, Type: errUpstream, RetryAfter: 5 * time.Second, Err: err,
		Msg: "a tool call in this reply needs approval and gatekeeper could not hold it for approval; retry shortly"}
}

// errHeldDelivered is what a request of a held turn gets once another
// request of the same turn took the decided reply: at admission, or when
// it loses the delivery claim.
func errHeldDelivered() *HTTPError {
	return &HTTPError{Code: http.StatusConflict, Type: errInvalidRequest, NoRetry: true,
		Msg: "this turn's reply, held for approval, was already delivered to another request of the same turn; continue from it"}
}

// awaitDecision is one step of client w's wait: it waits at most
// approvals.keepalive for every request of the hold to be decided, then
// settles the hold and renders the decided reply for the client. When the
// continuation after a refusal is held again, w waits on the next hold
// and the step ends pending.
func (s *Server) awaitDecision(ctx context.Context, w *escrowWait) awaited {
	reqs, done, err := s.waitDecisions(ctx, w.hold, s.esc.keepalive)
	var stopped *errRunStopped
	switch {
	case errors.As(err, &stopped) && stopped.kill:
		return awaited{end: awaitKilled, err: errKilled}
	case errors.As(err, &stopped):
		return awaited{end: awaitStopped, rec: stopped.rec, err: err}
	case err != nil && ctx.Err() != nil:
		return awaited{end: awaitGone, err: ctx.Err()}
	case errors.Is(err, errServerClosing):
		return awaited{end: awaitClosing, err: err}
	case err != nil:
		return awaited{end: awaitStoreDown, err: err}
	case !done:
		return awaited{end: awaitPending}
	}
	// Once decided, the client going away does not stop the settling.
	sctx := context.WithoutCancel(ctx)
	dr, err := s.settleHold(sctx, w.hold, reqs, w.c)
	switch {
	case errors.Is(err, errDelivered):
		return awaited{end: awaitElsewhere, err: err}
	case err != nil:
		w.c.log.LogAttrs(sctx, slog.LevelError, "settling a held turn failed", slog.String("hold", w.hold.ID), slog.String("error", err.Error()))
		return awaited{end: awaitStoreDown, err: err}
	case dr.next != nil:
		w.hold = dr.next // the continuation made a gated call of its own
		return awaited{end: awaitPending}
	}
	out, err := render(w.c.req.api, dr, w.c)
	if err != nil {
		// The hold was delivered and is not sent again.
		w.c.log.LogAttrs(sctx, slog.LevelError, "rendering the decided reply failed", slog.String("hold", w.hold.ID), slog.String("error", err.Error()))
		return awaited{end: awaitUnrenderable, err: err}
	}
	return awaited{end: awaitDecided, body: out}
}

// errRunStopped ends a held wait when an operator canceled or killed the
// run: the hold's requests are withdrawn.
type errRunStopped struct {
	rec  *trajectory.Record
	kill bool
}

func (e *errRunStopped) Error() string {
	return fmt.Sprintf("proxy: trajectory %s was stopped (%s) while a call was held", e.rec.ID, e.rec.State)
}

// waitDecisions waits at most d for every request of h to be decided:
// woken by the decision's signal for the hold's record, looking again
// every holdPoll, and expiring what is due. It returns the requests and
// whether all are decided; an error when ctx ends (the client went away:
// the hold stays for a retry), the server closes, the run was stopped by
// an operator (the requests are withdrawn) or the stores fail.
func (s *Server) waitDecisions(ctx context.Context, h *approvals.Hold, d time.Duration) ([]*approvals.Request, bool, error) {
	deadline := time.Now().Add(d)
	for {
		// Listen before looking, so that a decision between the look and
		// the wait still wakes it.
		woken, stop := s.live.Wait(h.Trajectory)
		reqs, done, err := s.lookHold(ctx, h)
		if err != nil || done {
			stop()
			return reqs, done, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			stop()
			return reqs, false, nil
		}
		timer := time.NewTimer(min(left, holdPoll))
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.closing:
			err = errServerClosing
		}
		timer.Stop()
		stop()
		if err != nil {
			return reqs, false, err
		}
	}
}

// lookHold reads the hold's requests and its record once.
func (s *Server) lookHold(ctx context.Context, h *approvals.Hold) ([]*approvals.Request, bool, error) {
	rec, err := s.store.Get(ctx, h.Trajectory)
	if err != nil {
		return nil, false, err
	}
	if rec.State.Terminal() || rec.State == trajectory.Finalizing {
		// A canceled or killed run: nothing held will be delivered.
		s.withdrawHold(context.WithoutCancel(ctx), h, "the run was stopped by an operator", s.log)
		return nil, false, &errRunStopped{rec: rec, kill: rec.ExitReason == trajectory.ExitKilled}
	}
	now := s.now()
	reqs, done, err := holds.Requests(ctx, s.esc.store, h)
	if err != nil || done {
		return reqs, done, err
	}
	for _, r := range reqs {
		if !r.Decided() && !now.Before(r.ExpiresAt) {
			// Silence is denial: expire what is due now rather than wait
			// for the service's sweep.
			s.esc.svc.Sweep(ctx)
			return holds.Requests(ctx, s.esc.store, h)
		}
	}
	return reqs, false, nil
}
