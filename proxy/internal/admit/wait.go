package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gatekeeper/internal/clock"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/trajectory"
)

// BusyElsewhereMax bounds how long an admission looks again at a thread
// whose call another replica admitted, before it forks a sibling: that
// call's reply may have ended with its settle still waiting behind it.
const BusyElsewhereMax = 200 * time.Millisecond

// PausePoll bounds how long a paused request waits between looks at its
// record, in case a resume signal was lost.
const PausePoll = time.Second

// Resumes wakes the requests waiting on a paused record when it is
// resumed.
type Resumes interface {
	// Wait is woken by a resume of id; stop ends the wait.
	Wait(id string) (woken <-chan struct{}, stop func())
}

// Waiter paces the attempts at admitting one call on one record: while
// another replica's call is on the thread (its settle may be waiting
// behind its reply), while the calls in flight hold the rest of the
// budget (up to WaitMax), and while the record is paused (until resumed,
// or PauseHold). A Waiter serves one request.
type Waiter struct {
	Tenant string
	Store  trajectory.Store
	// BusyStep is the first wait before looking again at a thread busy
	// with another replica's call; zero when settles are written at once,
	// and such a thread is not waited for.
	BusyStep  time.Duration
	PauseHold time.Duration // limits.pause_hold
	Resumes   Resumes

	budgetSince, pausedSince time.Time
	budgetWait               time.Duration
	waitedOther              time.Duration // looking again at a thread busy with another replica's call
	busyTries                int
}

// Wait is what an attempt's answer asks (err, or the admission paused; a
// busy record's call admitted elsewhere): again when, having waited, the
// attempt is to be made again on record id; else the error the admission
// ends with, nil when it ends as the attempt answered.
func (w *Waiter) Wait(ctx context.Context, id string, err error, paused, busyElsewhere bool) (again bool, _ error) {
	switch {
	case errors.Is(err, ErrBusy) && busyElsewhere && w.BusyStep > 0 && w.waitedOther < BusyElsewhereMax:
		// Another replica's call, whose settle may be waiting behind
		// its reply there for a window, or for its flush on a busy
		// replica: the thread is looked at again, backing off, for
		// BusyElsewhereMax before a sibling is forked for it.
		step := w.BusyStep << min(w.busyTries, 6)
		w.busyTries++
		w.waitedOther += step
		if clock.Sleep(ctx, step) != nil {
			return false, ctx.Err()
		}
		deadline.Refill(ctx)
		// The store's update refuses from this replica's copy of the
		// record without asking Redis; a read makes the copy current.
		if _, err := w.Store.Get(ctx, id); err != nil && !errors.Is(err, trajectory.ErrNotFound) {
			return false, err
		}
		return true, nil
	case errors.Is(err, ErrWait):
		if w.budgetSince.IsZero() {
			w.budgetSince = time.Now()
			w.budgetWait = 5 * time.Millisecond
		}
		if time.Since(w.budgetSince) > WaitMax || clock.Sleep(ctx, w.budgetWait) != nil {
			return false, &Refusal{Kind: Contended, RetryAfter: 5 * time.Second,
				Msg: "the calls this run has in flight hold the rest of its budget; retry when they finish", Err: err}
		}
		w.budgetWait = min(w.budgetWait*2, WaitStep)
		deadline.Refill(ctx)
		return true, nil
	case errors.Is(err, ErrPaused) || err == nil && paused:
		// Held, not forwarded, until an operator resumes the run: a
		// resume signal wakes the wait, a poll covers a lost one.
		if w.pausedSince.IsZero() {
			w.pausedSince = time.Now()
		}
		left := w.PauseHold - time.Since(w.pausedSince)
		if left <= 0 {
			return false, &Refusal{Kind: Paused, RetryAfter: 30 * time.Second,
				Msg: fmt.Sprintf("trajectory %s is paused (by an operator, by the loop watchdog, or until its budget is raised); retry later", trajectory.Unscoped(id, w.Tenant))}
		}
		woken, stop := w.Resumes.Wait(id)
		defer stop()
		select {
		case <-woken:
		case <-time.After(min(left, PausePoll)):
		case <-ctx.Done():
			return false, ctx.Err()
		}
		deadline.Refill(ctx)
		return true, nil
	}
	return false, err
}
