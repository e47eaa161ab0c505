package chainrule

import (
	"testing"
	"time"

	"gatekeeper/meter"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

var now = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)

// chain is a thread record under its run, both READY.
func chain(onExhaust string) []*trajectory.Record {
	root := &trajectory.Record{ID: "run", State: trajectory.Ready, Budget: trajectory.Budget{Turns: 1, OnExhaust: onExhaust}}
	thread := &trajectory.Record{ID: "run/t", ParentID: "run", State: trajectory.Ready}
	return []*trajectory.Record{thread, root}
}

func TestExhaust(t *testing.T) {
	tests := []struct {
		name       string
		onExhaust  string
		wantState  trajectory.State
		wantPaused bool
	}{
		{"fail ends both records", "", trajectory.Failed, false},
		{"pause pauses both records", trajectory.OnExhaustPause, trajectory.Paused, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := chain(tc.onExhaust)
			evs, paused, err := Exhaust(c, meter.Decision{BindingID: "run", Binding: meter.Turns}, now)
			if err != nil {
				t.Fatal(err)
			}
			if paused != tc.wantPaused || len(evs) == 0 {
				t.Fatalf("paused %v with %d events, want %v with some", paused, len(evs), tc.wantPaused)
			}
			for _, rec := range c {
				if rec.State != tc.wantState || rec.BindingDimension != string(meter.Turns) {
					t.Errorf("%s is %s binding %q, want %s binding turns", rec.ID, rec.State, rec.BindingDimension, tc.wantState)
				}
				if tc.wantState == trajectory.Failed && rec.ExitReason != ExitBudgetExceeded {
					t.Errorf("%s exit reason %q, want %s", rec.ID, rec.ExitReason, ExitBudgetExceeded)
				}
				if tc.wantPaused && rec.PauseReason != trajectory.PauseBudget {
					t.Errorf("%s pause reason %q, want the budget's", rec.ID, rec.PauseReason)
				}
			}
		})
	}
}

func TestReclaim(t *testing.T) {
	c := chain("")
	if _, err := c[0].BeginTurn(now); err != nil {
		t.Fatal(err)
	}
	held := trajectory.Reservation{Calls: 1, Tokens: 100, Micros: 500}
	for _, rec := range c {
		rec.Reserved = held
	}
	c[0].Call, c[0].CallReserved, c[0].CallOwner = "call-1", held, "replica#1"
	evs, err := Reclaim(c, now.Add(time.Minute), "call lost: no reply was recorded")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 2 || evs[0].Type != trajectory.EventUpstreamError {
		t.Fatalf("events %v: want the lost call's event, then the transition", evs)
	}
	if c[0].State != trajectory.Ready || c[0].Call != "" || c[0].CallOwner != "" || c[0].CallReserved != (trajectory.Reservation{}) {
		t.Fatalf("thread after reclaim: %s, call %q, owner %q, reserved %+v", c[0].State, c[0].Call, c[0].CallOwner, c[0].CallReserved)
	}
	for _, rec := range c {
		if rec.Reserved != (trajectory.Reservation{}) {
			t.Errorf("%s still reserves %+v", rec.ID, rec.Reserved)
		}
	}
}

func TestCountTruncation(t *testing.T) {
	rec := &trajectory.Record{ID: "run", State: trajectory.Ready}
	steps := []struct {
		stop       string
		wantInRow  int64
		wantFailed bool
	}{
		{string(streaming.StopMaxTokens), 1, false},
		{"end_turn", 0, false},
		{string(streaming.StopMaxTokens), 1, false},
		{string(streaming.StopMaxTokens), 2, true},
	}
	for i, st := range steps {
		if _, err := CountTruncation(rec, st.stop, 2, now); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if rec.TruncationsInRow != st.wantInRow || (rec.State == trajectory.Failed) != st.wantFailed {
			t.Fatalf("step %d (%s): %d in a row, %s; want %d, failed %v", i, st.stop, rec.TruncationsInRow, rec.State, st.wantInRow, st.wantFailed)
		}
	}
	if rec.Truncations != 3 || rec.ExitReason != ExitTruncationLoop {
		t.Fatalf("%d truncations, exit %q; want 3, %s", rec.Truncations, rec.ExitReason, ExitTruncationLoop)
	}
}

func TestAfterTurn(t *testing.T) {
	tests := []struct {
		name     string
		canceled bool
		pending  trajectory.ControlKind
		want     trajectory.State
	}{
		{"nothing pending", false, "", trajectory.Ready},
		{"stopped by a cancel", true, "", trajectory.Canceled},
		{"pending cancel", false, trajectory.ControlCancel, trajectory.Canceled},
		{"pending finish", false, trajectory.ControlFinish, trajectory.Completed},
		{"pending pause", false, trajectory.ControlPause, trajectory.Paused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &trajectory.Record{ID: "run", State: trajectory.Ready}
			if tc.pending != "" {
				rec.Pending.Control = &trajectory.Control{Kind: tc.pending, By: "op"}
			}
			evs, err := AfterTurn(rec, tc.canceled, now)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != tc.want {
				t.Fatalf("state %s, want %s", rec.State, tc.want)
			}
			if (tc.want == trajectory.Ready) != (len(evs) == 0) {
				t.Fatalf("%d events for a record now %s", len(evs), rec.State)
			}
		})
	}
}

func TestSetStage(t *testing.T) {
	rec := &trajectory.Record{ID: "run", Stage: string(meter.Nominal)}
	if evs := SetStage(rec, 0.5, meter.Dollars, meter.Nominal, now); len(evs) != 0 {
		t.Fatalf("an unchanged stage gave %d events", len(evs))
	}
	evs := SetStage(rec, 0.9, meter.Dollars, meter.Restrict, now)
	if len(evs) != 1 || evs[0].Type != trajectory.EventStage || rec.Stage != string(meter.Restrict) || rec.BudgetUsed != 0.9 {
		t.Fatalf("a new stage gave %v; record at %s, %v used", evs, rec.Stage, rec.BudgetUsed)
	}
	if from, to := StageChange(evs[0]); from != string(meter.Nominal) || to != string(meter.Restrict) {
		t.Fatalf("the stage event reads %q to %q", from, to)
	}
}

func TestKeepSwept(t *testing.T) {
	var swept []trajectory.SweptCall
	for i := range MaxLostCalls + 2 {
		swept = KeepSwept(swept, trajectory.SweptCall{Call: string(rune('a' + i))})
	}
	if len(swept) != MaxLostCalls || swept[0].Call != "c" || swept[MaxLostCalls-1].Call != "j" {
		t.Errorf("kept %v, want the last %d", swept, MaxLostCalls)
	}
}
