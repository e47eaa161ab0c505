package watchdog

import (
	"slices"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Step is what the watchdog decided for one request of a thread.
type Step struct {
	Step     trajectory.LoopStep // the thread's step; "" when none
	Notice   string              // appended to the request
	Restrict bool                // only read-only tools
}

// Request runs at admission, on the thread record rec (READY, its
// pending calls just answered by accepted), under the tenant's watchdog
// w: it reads the results the thread was waiting on, escalates when they
// show a loop, and applies the thread's step to this request: a notice
// (naming the tenant's readOnly tools), the restriction, or a pause or the
// run's end in place of the call. A retried request's results are no
// longer pending, so they are never counted twice.
func Request(w config.Watchdog, rec *trajectory.Record, results []streaming.ToolResult, accepted, readOnly []string, now time.Time) (Step, []trajectory.Event, error) {
	l, on := chainrule.WatchLimits(w)
	if !on {
		return Step{}, nil, nil
	}
	var seen []trajectory.SeenResult
	for _, r := range results {
		if slices.Contains(accepted, r.ID) {
			seen = append(seen, trajectory.SeenResult{Digest: trajectory.Digest(r.Digest), Error: r.IsError})
		}
	}
	var evs []trajectory.Event
	if len(seen) > 0 {
		var err error
		if evs, err = chainrule.Escalate(rec, l, rec.Watch.ObserveResults(l, seen), now); err != nil {
			return Step{}, nil, err
		}
	}
	wt := &rec.Watch
	s := Step{Step: wt.Step}
	switch {
	case rec.State.Terminal():
		return s, evs, nil
	case wt.Step == trajectory.LoopPause && rec.State == trajectory.Ready:
		tr, err := rec.Transition(trajectory.Paused, "loop", now)
		if err != nil {
			return s, nil, err
		}
		rec.PauseReason = trajectory.PauseLoop
		return s, append(evs, trajectory.EventsFor(rec.ID, []trajectory.Transition{tr})...), nil
	}
	if wt.Notice || wt.Restricts() {
		s.Notice = notice.Loop(wt, readOnly)
		wt.Notice = false
	}
	s.Restrict = wt.Restricts()
	return s, evs, nil
}

// Reply runs at a turn's settle, on the thread record: it reads the calls
// the reply proposed and whether it said anything (seen; nil when the
// turn was not watched or its reply was not read whole), and escalates
// when they show a loop. A pause waits for the thread's next request; a
// failure ends the run now.
func Reply(w config.Watchdog, rec *trajectory.Record, seen *Seen, now time.Time) ([]trajectory.Event, error) {
	l, on := chainrule.WatchLimits(w)
	if !on || seen == nil || rec.State.Terminal() || rec.State == trajectory.Finalizing {
		return nil, nil
	}
	return chainrule.Escalate(rec, l, rec.Watch.ObserveReply(l, seen.Calls, seen.Text), now)
}

// Seen is what the watchdog reads of a reply: the calls it proposed
// (withheld ones too) and whether it carried any text.
type Seen struct {
	Calls []trajectory.SeenCall
	Text  bool
}

// See digests a complete reply's calls for the watchdog; nil when the
// tenant's watchdog w is off, so a turn that is not watched pays nothing.
func See(w config.Watchdog, res *streaming.Result) *Seen {
	if !w.On() {
		return nil
	}
	r := &Seen{Text: res.TextBytes > 0}
	for _, tc := range res.ToolCalls {
		if tc.Server || !tc.Complete || tc.Choice != 0 {
			continue
		}
		r.Calls = append(r.Calls, trajectory.SeenCall{Name: tc.Name, Digest: trajectory.Digest(streaming.CallDigest(tc.Name, tc.Arguments))})
	}
	return r
}
