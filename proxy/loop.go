package proxy

import (
	"slices"
	"time"

	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// The loop watchdog (README.md, Loop watchdog): per thread, it reads the
// calls each reply proposes (at the turn's settle) and the results each
// request brings (at its admission) into the thread record's Watch, in
// the store update the turn makes anyway, and escalates one step per turn
// while a signal holds: steer, restrict, then pause or fail.

// loopTurn is what the watchdog decided for one request of a thread.
type loopTurn struct {
	step     trajectory.LoopStep // the thread's step; "" when none
	notice   string              // appended to the request
	restrict bool                // only read-only tools
}

// watchLimits are the watchdog's thresholds for the turn's tenant; false
// when its watchdog is off.
func (t *turn) watchLimits() (trajectory.WatchLimits, bool) {
	return chainrule.WatchLimits(t.s.cfg.WatchdogFor(t.req.tenant))
}

// watchRequest runs at admission, on the thread record (READY, its pending
// calls just answered by accepted): it reads the results the thread was
// waiting on, escalates when they show a loop, and applies the thread's
// step to this request: a notice, the restriction, or a pause or the
// run's end in place of the call. A retried request's results are no
// longer pending, so they are never counted twice.
func (t *turn) watchRequest(rec *trajectory.Record, accepted []string, now time.Time) ([]trajectory.Event, error) {
	t.loop = loopTurn{}
	l, on := t.watchLimits()
	if !on {
		return nil, nil
	}
	var seen []trajectory.SeenResult
	for _, r := range t.pr.ToolResults {
		if slices.Contains(accepted, r.ID) {
			seen = append(seen, trajectory.SeenResult{Digest: trajectory.Digest(r.Digest), Error: r.IsError})
		}
	}
	var evs []trajectory.Event
	if len(seen) > 0 {
		var err error
		if evs, err = chainrule.Escalate(rec, l, rec.Watch.ObserveResults(l, seen), now); err != nil {
			return nil, err
		}
	}
	w := &rec.Watch
	t.loop.step = w.Step
	switch {
	case rec.State.Terminal():
		return evs, nil
	case w.Step == trajectory.LoopPause && rec.State == trajectory.Ready:
		tr, err := rec.Transition(trajectory.Paused, "loop", now)
		if err != nil {
			return nil, err
		}
		rec.PauseReason = trajectory.PauseLoop
		return append(evs, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...), nil
	}
	if w.Notice || w.Restricts() {
		t.loop.notice = notice.Loop(w, t.req.tenant.ReadOnlyTools)
		w.Notice = false
	}
	t.loop.restrict = w.Restricts()
	return evs, nil
}

// watchReply runs at a turn's settle, on the thread record: it reads the
// calls the reply proposed and whether it said anything, and escalates
// when they show a loop. A pause waits for the thread's next request; a
// failure ends the run now.
func (t *turn) watchReply(rec *trajectory.Record, o outcome, now time.Time) ([]trajectory.Event, error) {
	l, on := t.watchLimits()
	if !on || o.reply == nil || rec.State.Terminal() || rec.State == trajectory.Finalizing {
		return nil, nil
	}
	return chainrule.Escalate(rec, l, rec.Watch.ObserveReply(l, o.reply.calls, o.reply.text), now)
}

// replySeen is what the watchdog reads of a reply: the calls it proposed
// (withheld ones too) and whether it carried any text.
type replySeen struct {
	calls []trajectory.SeenCall
	text  bool
}

// seeReply digests a complete reply's calls for the watchdog; nil when the
// tenant's watchdog is off, so a turn that is not watched pays nothing.
func (t *turn) seeReply(res *streaming.Result) *replySeen {
	if _, on := t.watchLimits(); !on {
		return nil
	}
	r := &replySeen{text: res.TextBytes > 0}
	for _, tc := range res.ToolCalls {
		if tc.Server || !tc.Complete || tc.Choice != 0 {
			continue
		}
		r.calls = append(r.calls, trajectory.SeenCall{Name: tc.Name, Digest: trajectory.Digest(streaming.CallDigest(tc.Name, tc.Arguments))})
	}
	return r
}
