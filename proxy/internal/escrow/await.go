package escrow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/trajectory"
)

// The one wait of the escrow. Every client of a held turn (the original
// streamed request, the original non-streamed one, a retry in either form)
// waits through Await, which returns a typed end; Awaited.Answer maps an
// end to what the agent gets; the writers only write it in their form.

// holdPoll bounds how long a held request waits between looks at its
// approval requests, in case a decision's signal was lost.
const holdPoll = time.Second

// Wait is one client waiting on a held turn: the hold it waits on now
// (the next one when a continuation is held again) and the client.
type Wait struct {
	Hold   *approvals.Hold
	Client *Client
}

// End is how one step of a wait on a held turn ended.
type End uint8

const (
	Pending      End = iota // undecided after a keepalive period, or held again: the wait goes on
	Decided                 // decided and settled: the reply rendered for the client is in Body
	Stopped                 // an operator canceled the run: nothing held is delivered
	Killed                  // an operator killed the run: no answer at all
	Closing                 // gatekeeper is shutting down: the hold stays for a retry
	Gone                    // the client went away: the hold stays for its retry
	Elsewhere               // another request of the turn took the decided reply
	StoreDown               // the approvals or record store failed
	Unrenderable            // the decided reply could not be put in the client's form
	Refused                 // the continuation after a refusal was refused: the *Answer is Err
)

// Awaited is the end of one step of a wait.
type Awaited struct {
	End  End
	Body []byte             // Decided
	Rec  *trajectory.Record // Stopped: the stopped record
	Err  error              // why, for the ends that have a cause
}

// Answer is an error the agent gets in its API's format: a status and a
// body, or an error event on an open stream. Msg is for the agent; Err is
// the detail kept for logs.
type Answer struct {
	Status     int
	Type       string
	Msg        string
	RetryAfter time.Duration // set when the agent should retry
	NoRetry    bool          // a final refusal
	Err        error
}

func (a *Answer) Error() string {
	if a.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", a.Status, a.Type, a.Msg, a.Err)
	}
	return fmt.Sprintf("%d %s: %s", a.Status, a.Type, a.Msg)
}

func (a *Answer) Unwrap() error { return a.Err }

// Answer is what the agent gets for a wait that ended as a did, when it
// asked for form: an error in its API's format, or drop: the connection is
// dropped with no answer. A decided wait has neither: its body is the
// answer.
func (a Awaited) Answer(form Form) (ans *Answer, drop bool) {
	switch a.End {
	case Stopped:
		return &Answer{Status: http.StatusForbidden, Type: apierr.TrajectoryCanceled, NoRetry: true,
			Msg: fmt.Sprintf("trajectory %s was stopped by an operator while a tool call waited for approval; the call was not delivered", a.Rec.ID)}, false
	case Elsewhere:
		return Delivered(), false
	case StoreDown:
		return ApprovalsDown(a.Err), false
	case Refused:
		if ans, ok := errors.AsType[*Answer](a.Err); ok {
			return ans, false
		}
		return ApprovalsDown(a.Err), false
	case Unrenderable:
		return &Answer{Status: http.StatusInternalServerError, Type: apierr.Upstream, NoRetry: true, Err: a.Err,
			Msg: "gatekeeper could not render the decided reply of this held turn"}, false
	case Closing:
		if form == FormJSON {
			return &Answer{Status: http.StatusServiceUnavailable, Type: apierr.Upstream, RetryAfter: time.Second,
				Msg: "gatekeeper is restarting while this turn waits for approval; retry to re-attach"}, false
		}
		return nil, true // a stream is dropped: the agent retries on another replica
	case Killed, Gone:
		return nil, true
	}
	return nil, false
}

// ApprovalsDown is the agent's answer when the approval machinery cannot
// hold a gated call: the call is not delivered (fail closed), and the
// agent may retry.
func ApprovalsDown(err error) *Answer {
	return &Answer{Status: http.StatusServiceUnavailable, Type: apierr.Upstream, RetryAfter: 5 * time.Second, Err: err,
		Msg: "a tool call in this reply needs approval and gatekeeper could not hold it for approval; retry shortly"}
}

// Delivered is what a request of a held turn gets once another request
// of the same turn took the decided reply: at admission, or when it loses
// the delivery claim.
func Delivered() *Answer {
	return &Answer{Status: http.StatusConflict, Type: apierr.InvalidRequest, NoRetry: true,
		Msg: "this turn's reply, held for approval, was already delivered to another request of the same turn; continue from it"}
}

// Await is one step of w's wait: it waits at most approvals.keepalive for
// every request of the hold to be decided, then settles the hold and
// renders the decided reply for the client. When the continuation after a
// refusal is held again, w waits on the next hold and the step ends
// Pending. A client gone by the time the hold is decided does not take
// the reply: it stays for the client's retry.
func (e *Keeper) Await(ctx context.Context, w *Wait) Awaited {
	reqs, done, err := e.waitDecisions(ctx, w.Hold, e.keepalive)
	var stopped *runStopped
	switch {
	case errors.As(err, &stopped) && stopped.kill:
		return Awaited{End: Killed, Err: err}
	case errors.As(err, &stopped):
		return Awaited{End: Stopped, Rec: stopped.rec, Err: err}
	case ctx.Err() != nil:
		// Even when the decision came at the same time: a client that is
		// gone must not claim the delivery its retry is coming for.
		return Awaited{End: Gone, Err: ctx.Err()}
	case errors.Is(err, errServerClosing):
		return Awaited{End: Closing, Err: err}
	case err != nil:
		return Awaited{End: StoreDown, Err: err}
	case !done:
		return Awaited{End: Pending}
	}
	// Once decided, the client going away does not stop the settling.
	sctx := context.WithoutCancel(ctx)
	log := w.Client.Log
	dr, err := e.settle(sctx, w.Hold, reqs, w.Client)
	switch {
	case errors.Is(err, errDelivered):
		return Awaited{End: Elsewhere, Err: err}
	case err != nil:
		log.LogAttrs(sctx, slog.LevelError, "settling a held turn failed", slog.String("hold", w.Hold.ID), slog.String("error", err.Error()))
		return Awaited{End: StoreDown, Err: err}
	case dr.Next != nil:
		w.Hold = dr.Next // the continuation made a gated call of its own
		return Awaited{End: Pending}
	case dr.Refused != nil:
		return Awaited{End: Refused, Err: dr.Refused}
	}
	out, err := Render(e.dialect(w.Client.API), dr, w.Client)
	if err != nil {
		// The hold was delivered and is not sent again.
		log.LogAttrs(sctx, slog.LevelError, "rendering the decided reply failed", slog.String("hold", w.Hold.ID), slog.String("error", err.Error()))
		return Awaited{End: Unrenderable, Err: err}
	}
	return Awaited{End: Decided, Body: out}
}

// AwaitJSON waits until the decision and returns the decided reply as one
// JSON body, or the *Answer the agent gets. A client that went away gets
// its context's error; a killed run's, no answer (http.ErrAbortHandler).
func (e *Keeper) AwaitJSON(ctx context.Context, w *Wait) ([]byte, error) {
	for {
		a := e.Await(ctx, w)
		switch a.End {
		case Pending:
			continue
		case Decided:
			return a.Body, nil
		case Gone:
			return nil, a.Err
		}
		ans, drop := a.Answer(FormJSON)
		if drop {
			return nil, http.ErrAbortHandler
		}
		return nil, ans
	}
}

// runStopped ends a held wait when an operator canceled or killed the
// run: the hold's requests are withdrawn.
type runStopped struct {
	rec  *trajectory.Record
	kill bool
}

func (e *runStopped) Error() string {
	return fmt.Sprintf("proxy: trajectory %s was stopped (%s) while a call was held", e.rec.ID, e.rec.State)
}

// waitDecisions waits at most d for every request of h to be decided:
// woken by the decision's signal for the hold's record, looking again
// every holdPoll, and expiring what is due. It returns the requests and
// whether all are decided; an error when ctx ends (the client went away:
// the hold stays for a retry), the server closes, the run was stopped by
// an operator (the requests are withdrawn) or the stores fail.
func (e *Keeper) waitDecisions(ctx context.Context, h *approvals.Hold, d time.Duration) ([]*approvals.Request, bool, error) {
	deadline := time.Now().Add(d)
	for {
		// Listen before looking, so that a decision between the look and
		// the wait still wakes it.
		woken, stop := e.signals.Wait(h.Trajectory)
		reqs, done, err := e.lookHold(ctx, h)
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
		case <-e.closing:
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
func (e *Keeper) lookHold(ctx context.Context, h *approvals.Hold) ([]*approvals.Request, bool, error) {
	rec, err := e.records.Get(ctx, h.Trajectory)
	if err != nil {
		return nil, false, err
	}
	if rec.State.Terminal() || rec.State == trajectory.Finalizing {
		// A canceled or killed run: nothing held will be delivered.
		e.withdraw(context.WithoutCancel(ctx), h, "the run was stopped by an operator", e.log)
		return nil, false, &runStopped{rec: rec, kill: rec.ExitReason == trajectory.ExitKilled}
	}
	now := e.now()
	reqs, done, err := holdRequests(ctx, e.store, h)
	if err != nil || done {
		return reqs, done, err
	}
	for _, r := range reqs {
		if !r.Decided() && !now.Before(r.ExpiresAt) {
			// Silence is denial: expire what is due now rather than wait
			// for the service's sweep.
			e.svc.Sweep(ctx)
			return holdRequests(ctx, e.store, h)
		}
	}
	return reqs, false, nil
}
