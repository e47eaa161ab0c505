package trajectory

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

// recordIn returns a started record standing in s the way the lifecycle
// leaves it there: delivered calls in WAITING_TOOL, held calls and an
// approval in AWAITING_APPROVAL, a hold start in PAUSED and
// AWAITING_APPROVAL.
func recordIn(s State) *Record {
	r := New("run-1", "team-a", t0)
	r.State = s
	r.StartedAt = t0
	switch s {
	case WaitingTool:
		r.Pending.ToolCalls = []PendingCall{{ID: "toolu_a", Name: "Bash", Deadline: t0.Add(time.Hour)}, {ID: "toolu_b", Name: "Read"}}
	case AwaitingApproval:
		r.Pending.ToolCalls = []PendingCall{{ID: "toolu_h", Name: "Bash"}}
		r.Pending.ApprovalID = "appr-1"
		r.HeldSince = t0
	case Paused:
		r.HeldSince = t0
	}
	if s.Terminal() {
		r.ExitReason = "earlier"
	}
	return r
}

func TestRequestControl(t *testing.T) {
	const (
		pend  = "pending"
		noop  = "no-op"
		fails = "terminal"
	)
	// want is one case's outcome: "pending", "no-op", "terminal", or the
	// states passed through, in order (a "" exit reason means unchanged).
	type want struct {
		outcome string
		path    []State
		exit    string
		inDoubt []string
	}
	fin := func(exit State, reason string, doubt ...string) want {
		return want{path: []State{Finalizing, exit}, exit: reason, inDoubt: doubt}
	}
	finFrom := func(exit State, reason string) want { return want{path: []State{exit}, exit: reason} }
	to := func(s State) want { return want{path: []State{s}} }
	p, n, e := want{outcome: pend}, want{outcome: noop}, want{outcome: fails}
	table := map[ControlKind]map[State]want{
		ControlPause: {Ready: to(Paused), CallingModel: p, WaitingTool: p, AwaitingApproval: p, Paused: n,
			Finalizing: n, Completed: e, Failed: e, Canceled: e},
		ControlResume: {Ready: n, CallingModel: n, WaitingTool: n, AwaitingApproval: n, Paused: to(Ready),
			Finalizing: n, Completed: e, Failed: e, Canceled: e},
		ControlCancel: {Ready: fin(Canceled, "CANCELED"), CallingModel: p, WaitingTool: fin(Canceled, "CANCELED", "toolu_a", "toolu_b"),
			AwaitingApproval: fin(Canceled, "CANCELED"), Paused: fin(Canceled, "CANCELED"), Finalizing: finFrom(Canceled, "CANCELED"),
			Completed: e, Failed: e, Canceled: e},
		ControlKill: {Ready: fin(Failed, "KILLED"), CallingModel: fin(Failed, "KILLED"), WaitingTool: fin(Failed, "KILLED", "toolu_a", "toolu_b"),
			AwaitingApproval: fin(Failed, "KILLED"), Paused: fin(Failed, "KILLED"), Finalizing: finFrom(Failed, "KILLED"),
			Completed: e, Failed: e, Canceled: e},
		ControlFinish: {Ready: fin(Completed, "FINISHED"), CallingModel: p, WaitingTool: fin(Completed, "FINISHED", "toolu_a", "toolu_b"),
			AwaitingApproval: fin(Completed, "FINISHED"), Paused: fin(Completed, "FINISHED"), Finalizing: finFrom(Completed, "FINISHED"),
			Completed: e, Failed: e, Canceled: e},
		ControlInterrupt: {Ready: p, CallingModel: p, WaitingTool: p, AwaitingApproval: p, Paused: p,
			Finalizing: n, Completed: e, Failed: e, Canceled: e},
	}
	now := t0.Add(time.Minute)
	cases := 0
	for kind, byState := range table {
		for _, from := range States() {
			w, ok := byState[from]
			if !ok {
				t.Fatalf("no expectation for %s in %s", kind, from)
			}
			cases++
			t.Run(string(kind)+" in "+string(from), func(t *testing.T) {
				r := recordIn(from)
				before := r.Clone()
				c := Control{Kind: kind, By: "alice", At: now}
				if kind == ControlInterrupt {
					c.Message = "wrap up"
				}
				ts, doubt, err := r.RequestControl(c, now)
				switch w.outcome {
				case fails:
					if !errors.Is(err, ErrTerminal) {
						t.Fatalf("err = %v, want ErrTerminal", err)
					}
					if !reflect.DeepEqual(r, before) {
						t.Errorf("terminal record changed:\n got %+v\nwant %+v", r, before)
					}
					return
				case noop:
					if err != nil || ts != nil || doubt != nil {
						t.Fatalf("no-op returned %v %v %v", ts, doubt, err)
					}
					if !reflect.DeepEqual(r, before) {
						t.Errorf("no-op changed the record:\n got %+v\nwant %+v", r, before)
					}
					return
				case pend:
					if err != nil || ts != nil || doubt != nil {
						t.Fatalf("pending returned %v %v %v", ts, doubt, err)
					}
					if r.State != from || r.Pending.Control == nil || *r.Pending.Control != c || !r.UpdatedAt.Equal(now) {
						t.Errorf("state %s pending %+v updated %v, want %s %+v %v", r.State, r.Pending.Control, r.UpdatedAt, from, c, now)
					}
					r.Pending.Control, r.UpdatedAt = nil, before.UpdatedAt
					if !reflect.DeepEqual(r, before) {
						t.Errorf("a pending control changed more than Pending.Control:\n got %+v\nwant %+v", r, before)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var path []State
				prev := from
				for _, tr := range ts {
					if tr.From != prev || !tr.At.Equal(now) {
						t.Errorf("transition %+v does not follow %s at %v", tr, prev, now)
					}
					path, prev = append(path, tr.To), tr.To
				}
				if !slices.Equal(path, w.path) || r.State != prev {
					t.Fatalf("path %v ending in %s, want %v", path, r.State, w.path)
				}
				wantExit := before.ExitReason
				if w.exit != "" {
					wantExit = w.exit
				}
				if r.ExitReason != wantExit {
					t.Errorf("exit reason %q, want %q", r.ExitReason, wantExit)
				}
				var ids []string
				for _, pc := range doubt {
					ids = append(ids, pc.ID)
				}
				if !slices.Equal(ids, w.inDoubt) {
					t.Errorf("in doubt %v, want %v", ids, w.inDoubt)
				}
				if len(doubt) > 0 && !reflect.DeepEqual(doubt, before.Pending.ToolCalls) {
					t.Errorf("in-doubt calls %+v, want the pending ones %+v", doubt, before.Pending.ToolCalls)
				}
				if r.State.Terminal() && (r.Pending.ToolCalls != nil || r.Pending.Control != nil || r.Pending.ApprovalID != "") {
					t.Errorf("finalized record keeps pending work %+v", r.Pending)
				}
			})
		}
	}
	if want := 6 * len(States()); cases != want {
		t.Errorf("walked %d cases, want %d", cases, want)
	}
}

func TestRequestControlPendingRank(t *testing.T) {
	ctl := func(k ControlKind, at time.Duration) Control {
		c := Control{Kind: k, By: "alice", At: t0.Add(at)}
		if k == ControlInterrupt {
			c.Message = "note " + at.String()
		}
		return c
	}
	tests := []struct {
		name    string
		state   State
		pending ControlKind // "" for none
		next    ControlKind
		want    ControlKind // the pending kind afterwards, "" for none
		newer   bool        // the pending control is next's, not the earlier one
	}{
		{"pause over nothing", CallingModel, "", ControlPause, ControlPause, true},
		{"cancel over pause", CallingModel, ControlPause, ControlCancel, ControlCancel, true},
		{"finish over pause", CallingModel, ControlPause, ControlFinish, ControlFinish, true},
		{"pause over interrupt", WaitingTool, ControlInterrupt, ControlPause, ControlPause, true},
		{"cancel over finish", CallingModel, ControlFinish, ControlCancel, ControlCancel, true},
		{"pause under cancel", CallingModel, ControlCancel, ControlPause, ControlCancel, false},
		{"finish under cancel", CallingModel, ControlCancel, ControlFinish, ControlCancel, false},
		{"pause under finish", CallingModel, ControlFinish, ControlPause, ControlFinish, false},
		{"interrupt under pause", AwaitingApproval, ControlPause, ControlInterrupt, ControlPause, false},
		{"interrupt under cancel", CallingModel, ControlCancel, ControlInterrupt, ControlCancel, false},
		{"second interrupt replaces the first", WaitingTool, ControlInterrupt, ControlInterrupt, ControlInterrupt, true},
		{"second pause replaces the first", CallingModel, ControlPause, ControlPause, ControlPause, true},
		{"resume withdraws a pause", CallingModel, ControlPause, ControlResume, "", false},
		{"resume leaves a cancel", CallingModel, ControlCancel, ControlResume, ControlCancel, false},
		{"resume leaves an interrupt", WaitingTool, ControlInterrupt, ControlResume, ControlInterrupt, false},
		{"resume in PAUSED keeps the interrupt", Paused, ControlInterrupt, ControlResume, ControlInterrupt, false},
		{"pause in READY keeps the interrupt", Ready, ControlInterrupt, ControlPause, ControlInterrupt, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := recordIn(tc.state)
			var first Control
			if tc.pending != "" {
				first = ctl(tc.pending, time.Second)
				r.Pending.Control = &first
			}
			next := ctl(tc.next, time.Minute)
			if _, _, err := r.RequestControl(next, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			got := r.Pending.Control
			switch {
			case tc.want == "":
				if got != nil {
					t.Fatalf("pending %+v, want none", got)
				}
			case got == nil:
				t.Fatalf("nothing pending, want %s", tc.want)
			case tc.newer && *got != next:
				t.Errorf("pending %+v, want the new %+v", *got, next)
			case !tc.newer && *got != first:
				t.Errorf("pending %+v, want the earlier %+v", *got, first)
			}
		})
	}
}

func TestRequestControlInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Control
	}{
		{"unknown kind", Control{Kind: "suspend"}},
		{"empty kind", Control{}},
		{"interrupt without message", Control{Kind: ControlInterrupt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := recordIn(CallingModel)
			before := r.Clone()
			if _, _, err := r.RequestControl(tc.c, t0); !errors.Is(err, ErrInvalidControl) {
				t.Errorf("err = %v, want ErrInvalidControl", err)
			}
			if !reflect.DeepEqual(r, before) {
				t.Errorf("refused request changed the record")
			}
		})
	}
}

func TestTakeControl(t *testing.T) {
	r := recordIn(WaitingTool)
	if c := r.TakeControl(); c != nil {
		t.Fatalf("took %+v from a record with nothing pending", c)
	}
	want := Control{Kind: ControlPause, By: "alice", At: t0}
	if _, _, err := r.RequestControl(want, t0); err != nil {
		t.Fatal(err)
	}
	c := r.TakeControl()
	if c == nil || *c != want {
		t.Fatalf("took %+v, want %+v", c, want)
	}
	if r.Pending.Control != nil {
		t.Errorf("still pending: %+v", r.Pending.Control)
	}
	if c := r.TakeControl(); c != nil {
		t.Errorf("took %+v twice", c)
	}
}

func TestWallClockExcludesHolds(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step func(t *testing.T, r *Record)
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	begin := func(s int) step {
		return func(t *testing.T, r *Record) { _, err := r.BeginTurn(at(s)); must(t, err) }
	}
	end := func(s int, approval string, ids ...string) step {
		return func(t *testing.T, r *Record) {
			_, err := r.EndTurn(TurnOutcome{StopReason: "end_turn", ToolCalls: calls(ids...), ApprovalID: approval}, at(s))
			must(t, err)
		}
	}
	control := func(s int, k ControlKind) step {
		return func(t *testing.T, r *Record) { _, _, err := r.RequestControl(Control{Kind: k}, at(s)); must(t, err) }
	}
	approve := func(s int) step {
		return func(t *testing.T, r *Record) { _, err := r.ApproveHeld(time.Minute, at(s)); must(t, err) }
	}
	results := func(s int, ids ...string) step {
		return func(t *testing.T, r *Record) { _, _, err := r.AcceptToolResults(ids, at(s)); must(t, err) }
	}
	charge := func(s int) step { return func(t *testing.T, r *Record) { r.ChargeWallClock(at(s)) } }
	started := func(s int) step { return func(t *testing.T, r *Record) { r.StartedAt = at(s) } }
	tests := []struct {
		name      string
		steps     []step
		wall      float64 // Spend.WallClockS after the steps
		waited    float64 // WaitedS
		heldSince int     // -1: not held
		waitedAt  int     // Waited is checked at this second...
		waitedNow float64 // ...to be this many seconds
	}{
		{"no hold", []step{begin(1), end(5, ""), charge(20)}, 19, 0, -1, 20, 0},
		{"pause counts nothing", []step{begin(1), end(5, ""), control(10, ControlPause), charge(100)}, 9, 0, 10, 100, 90},
		{"pause then resume", []step{begin(1), end(5, ""), control(10, ControlPause), control(110, ControlResume), charge(120)}, 19, 100, -1, 130, 100},
		{"approval wait", []step{begin(1), end(5, "appr-1", "toolu_a"), approve(65), results(70, "toolu_a"), charge(70)}, 9, 60, -1, 70, 60},
		{"cancel while paused charges up to the pause", []step{begin(1), end(5, ""), control(10, ControlPause), control(50, ControlCancel)}, 9, 40, -1, 60, 40},
		{"two holds add up", []step{begin(0), end(1, "appr-1", "x"), approve(11), results(12, "x"), control(12, ControlPause),
			control(32, ControlResume), charge(40)}, 10, 30, -1, 40, 30},
		{"a hold before the first turn is not counted", []step{control(1, ControlPause), control(50, ControlResume), begin(60), charge(70)}, 10, 0, -1, 70, 0},
		{"a hold counts from the start that came during it", []step{control(1, ControlPause), started(20), control(30, ControlResume), charge(40)}, 10, 10, -1, 40, 10},
		{"a stale clock never shrinks the charge", []step{begin(1), end(5, ""), charge(50), control(60, ControlPause), control(200, ControlResume), charge(100)}, 49, 140, -1, 100, 140},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New("run-1", "team-a", t0)
			for _, s := range tc.steps {
				s(t, r)
			}
			if r.Spend.WallClockS != tc.wall || r.WaitedS != tc.waited {
				t.Errorf("wall clock %vs waited %vs, want %v %v", r.Spend.WallClockS, r.WaitedS, tc.wall, tc.waited)
			}
			wantHeld := time.Time{}
			if tc.heldSince >= 0 {
				wantHeld = at(tc.heldSince)
			}
			if !r.HeldSince.Equal(wantHeld) {
				t.Errorf("held since %v, want %v", r.HeldSince, wantHeld)
			}
			if got := r.Waited(at(tc.waitedAt)).Seconds(); got != tc.waitedNow {
				t.Errorf("Waited = %vs, want %vs", got, tc.waitedNow)
			}
		})
	}
}
