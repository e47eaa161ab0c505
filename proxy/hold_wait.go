package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// holdPoll bounds how long a held request waits between looks at its
// approval requests, in case a decision's signal was lost.
const holdPoll = time.Second

// errServerClosing ends a held wait when gatekeeper shuts down: the hold
// stays, and the agent's retry re-attaches on another replica.
var errServerClosing = errors.New("proxy: gatekeeper is shutting down")

// errRunStopped ends a held wait when an operator canceled or killed the
// run: the hold's requests are withdrawn.
type errRunStopped struct {
	rec  *trajectory.Record
	kill bool
}

func (e *errRunStopped) Error() string {
	return fmt.Sprintf("proxy: trajectory %s was stopped (%s) while a call was held", e.rec.ID, e.rec.State)
}

// holdStep waits at most d for every request of h to be decided: woken by
// the decision's signal for the hold's record, looking again every
// holdPoll, and expiring what is due. It returns the requests and whether
// all are decided; an error when ctx ends (the client went away: the hold
// stays for a retry), the server closes, the run was stopped by an
// operator (the requests are withdrawn) or the stores fail.
func (s *Server) holdStep(ctx context.Context, h *approvals.Hold, d time.Duration) ([]*approvals.Request, bool, error) {
	deadline := time.Now().Add(d)
	for {
		// Listen before looking, so that a decision between the look and
		// the wait still wakes it.
		woken, stop := s.live.wait(h.Trajectory)
		reqs, done, err := s.holdLook(ctx, h)
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

// holdLook reads the hold's requests and its record once.
func (s *Server) holdLook(ctx context.Context, h *approvals.Hold) ([]*approvals.Request, bool, error) {
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
	reqs, done, err := s.holdLookRequests(ctx, h)
	if err != nil || done {
		return reqs, done, err
	}
	for _, r := range reqs {
		if !r.Decided() && !now.Before(r.ExpiresAt) {
			// Silence is denial: expire what is due now rather than wait
			// for the service's sweep.
			s.esc.svc.Sweep(ctx)
			return s.holdLookRequests(ctx, h)
		}
	}
	return reqs, false, nil
}

// holdLookRequests reads the hold's requests and whether all are decided.
func (s *Server) holdLookRequests(ctx context.Context, h *approvals.Hold) ([]*approvals.Request, bool, error) {
	reqs := make([]*approvals.Request, 0, len(h.Requests))
	done := true
	for _, id := range h.Requests {
		r, err := s.esc.store.Get(ctx, id)
		if err != nil {
			return nil, false, err
		}
		done = done && r.Decided()
		reqs = append(reqs, r)
	}
	return reqs, done, nil
}

// stoppedError is what the agent gets for a held turn whose run an
// operator stopped.
func stoppedError(e *errRunStopped) *HTTPError {
	return &HTTPError{Code: http.StatusForbidden, Type: errTrajectoryCanceled, NoRetry: true,
		Msg: fmt.Sprintf("trajectory %s was stopped by an operator while a tool call waited for approval; the call was not delivered", e.rec.ID)}
}
