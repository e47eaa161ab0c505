package trajectory

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

func calls(ids ...string) []PendingCall {
	out := make([]PendingCall, len(ids))
	for i, id := range ids {
		out[i] = PendingCall{ID: id, Name: "tool_" + id}
	}
	return out
}

// waiting returns a record that made one turn ending in the given calls.
func waiting(t *testing.T, ids ...string) *Record {
	t.Helper()
	r := New("run-1", "team-a", t0)
	if _, err := r.BeginTurn(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	o := TurnOutcome{StopReason: "tool_use", ToolCalls: calls(ids...), ToolDeadline: 5 * time.Minute}
	if _, err := r.EndTurn(o, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTurnWithToolCalls(t *testing.T) {
	r := New("run-1", "team-a", t0)
	begin := t0.Add(time.Second)
	ts, err := r.BeginTurn(begin)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Transition{{Ready, CallingModel, "turn admitted", begin}}; !reflect.DeepEqual(ts, want) {
		t.Errorf("BeginTurn transitions = %+v, want %+v", ts, want)
	}
	if !r.StartedAt.Equal(begin) {
		t.Errorf("StartedAt = %v, want %v", r.StartedAt, begin)
	}

	end := t0.Add(3 * time.Second)
	o := TurnOutcome{
		StopReason:   "tool_use",
		ToolCalls:    []PendingCall{{ID: "toolu_a", Name: "Bash"}, {ID: "toolu_b", Name: "Read"}},
		Usage:        Usage{InputTokens: 100, CachedInputTokens: 1000, CacheWriteTokens: 50, OutputTokens: 20},
		Dollars:      0.25,
		ToolDeadline: 10 * time.Minute,
	}
	ts, err = r.EndTurn(o, end)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Transition{{CallingModel, WaitingTool, "tool_use", end}}; !reflect.DeepEqual(ts, want) {
		t.Errorf("EndTurn transitions = %+v, want %+v", ts, want)
	}
	wantPending := []PendingCall{
		{ID: "toolu_a", Name: "Bash", Deadline: end.Add(10 * time.Minute)},
		{ID: "toolu_b", Name: "Read", Deadline: end.Add(10 * time.Minute)},
	}
	if !reflect.DeepEqual(r.Pending.ToolCalls, wantPending) {
		t.Errorf("pending = %+v, want %+v", r.Pending.ToolCalls, wantPending)
	}
	o.ToolCalls[0].ID = "mutated"
	if r.Pending.ToolCalls[0].ID != "toolu_a" {
		t.Error("record shares the outcome's ToolCalls slice")
	}
	wantSpend := Spend{Turns: 1, InputTokens: 100, CachedInputTokens: 1000, CacheWriteTokens: 50, OutputTokens: 20, Dollars: 0.25, WallClockS: 2}
	if r.Spend != wantSpend || r.Turns != 1 || r.LastStopReason != "tool_use" {
		t.Errorf("after EndTurn: turns %d stop %q spend %+v, want 1 tool_use %+v", r.Turns, r.LastStopReason, r.Spend, wantSpend)
	}
	if r.Spend.Tokens() != 1170 {
		t.Errorf("Spend.Tokens() = %d, want 1170", r.Spend.Tokens())
	}

	next := t0.Add(time.Minute)
	rc, ts, err := r.AcceptToolResults([]string{"toolu_b", "toolu_a"}, next)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ResultCheck{Accepted: []string{"toolu_b", "toolu_a"}}); !reflect.DeepEqual(rc, want) {
		t.Errorf("check = %+v, want %+v", rc, want)
	}
	if want := []Transition{{WaitingTool, Ready, "tool results", next}}; !reflect.DeepEqual(ts, want) {
		t.Errorf("AcceptToolResults transitions = %+v, want %+v", ts, want)
	}
	if r.State != Ready || len(r.Pending.ToolCalls) != 0 {
		t.Errorf("after results: state %s pending %v", r.State, r.Pending.ToolCalls)
	}

	if _, err := r.BeginTurn(next.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if !r.StartedAt.Equal(begin) {
		t.Errorf("second turn moved StartedAt to %v", r.StartedAt)
	}
}

func TestAcceptToolResults(t *testing.T) {
	tests := []struct {
		name    string
		pending []string
		got     []string
		want    ResultCheck
	}{
		{"all answered", []string{"a", "b"}, []string{"a", "b"}, ResultCheck{Accepted: []string{"a", "b"}}},
		{"unknown reported", []string{"a"}, []string{"a", "forged"}, ResultCheck{Accepted: []string{"a"}, Unknown: []string{"forged"}}},
		{"partial answer", []string{"a", "b", "c"}, []string{"b"}, ResultCheck{Accepted: []string{"b"}, Unanswered: []string{"a", "c"}}},
		{"no results at all", []string{"a"}, nil, ResultCheck{Unanswered: []string{"a"}}},
		{"repeated result", []string{"a"}, []string{"a", "a"}, ResultCheck{Accepted: []string{"a"}, Unknown: []string{"a"}}},
		{"mixed", []string{"a", "b"}, []string{"x", "b"}, ResultCheck{Accepted: []string{"b"}, Unknown: []string{"x"}, Unanswered: []string{"a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := waiting(t, tc.pending...)
			rc, ts, err := r.AcceptToolResults(tc.got, t0.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rc, tc.want) {
				t.Errorf("check = %+v, want %+v", rc, tc.want)
			}
			if len(ts) != 1 || r.State != Ready || r.Pending.ToolCalls != nil {
				t.Errorf("transitions %+v, state %s, pending %v", ts, r.State, r.Pending.ToolCalls)
			}
		})
	}
}

func TestAcceptToolResultsOutsideWaitingTool(t *testing.T) {
	for _, s := range []State{Ready, CallingModel, AwaitingApproval, Paused, Finalizing} {
		t.Run(string(s), func(t *testing.T) {
			r := busyRecord(s)
			before := r.Clone()
			ids := []string{"toolu_1", "late"}
			rc, ts, err := r.AcceptToolResults(ids, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rc, ResultCheck{Unknown: ids}) || ts != nil {
				t.Errorf("check %+v transitions %+v, want every id unknown, none", rc, ts)
			}
			if !reflect.DeepEqual(r, before) {
				t.Errorf("record changed")
			}
		})
	}
}

func TestEndTurnWithoutToolCalls(t *testing.T) {
	tests := []struct {
		name string
		stop string
	}{
		{"end_turn", "end_turn"},
		{"max_tokens", "max_tokens"},
		{"refusal", "refusal"},
		{"upstream error", "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New("run-1", "team-a", t0)
			if _, err := r.BeginTurn(t0); err != nil {
				t.Fatal(err)
			}
			o := TurnOutcome{StopReason: tc.stop, Usage: Usage{OutputTokens: 7}, Estimated: tc.stop == "error"}
			ts, err := r.EndTurn(o, t0.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != 1 || ts[0].To != Ready || r.State != Ready {
				t.Errorf("transitions %+v state %s, want -> READY", ts, r.State)
			}
			if r.LastStopReason != tc.stop || r.Spend.OutputTokens != 7 || r.Spend.Estimated != o.Estimated {
				t.Errorf("stop %q spend %+v", r.LastStopReason, r.Spend)
			}
			if r.Pending.ToolCalls != nil {
				t.Errorf("pending %v after a turn without calls", r.Pending.ToolCalls)
			}
		})
	}
}

func TestEstimatedSticks(t *testing.T) {
	r := New("run-1", "team-a", t0)
	for i, est := range []bool{true, false} {
		if _, err := r.BeginTurn(t0); err != nil {
			t.Fatal(err)
		}
		if _, err := r.EndTurn(TurnOutcome{StopReason: "end_turn", Estimated: est}, t0); err != nil {
			t.Fatal(err)
		}
		if !r.Spend.Estimated {
			t.Fatalf("turn %d: Estimated cleared", i)
		}
	}
	if r.Turns != 2 || r.Spend.Turns != 2 {
		t.Errorf("turns %d/%d, want 2/2", r.Turns, r.Spend.Turns)
	}
}

func TestTurnRefusedOutOfOrder(t *testing.T) {
	tests := []struct {
		name string
		from State
		call func(r *Record) error
	}{
		{"EndTurn from READY", Ready, func(r *Record) error {
			_, err := r.EndTurn(TurnOutcome{StopReason: "end_turn"}, t0)
			return err
		}},
		{"EndTurn from WAITING_TOOL", WaitingTool, func(r *Record) error {
			_, err := r.EndTurn(TurnOutcome{StopReason: "end_turn"}, t0)
			return err
		}},
		{"BeginTurn from WAITING_TOOL", WaitingTool, func(r *Record) error {
			_, err := r.BeginTurn(t0)
			return err
		}},
		{"BeginTurn from PAUSED", Paused, func(r *Record) error {
			_, err := r.BeginTurn(t0)
			return err
		}},
		{"BeginTurn while calling", CallingModel, func(r *Record) error {
			_, err := r.BeginTurn(t0)
			return err
		}},
		{"ApproveHeld from WAITING_TOOL", WaitingTool, func(r *Record) error {
			_, err := r.ApproveHeld(time.Minute, t0)
			return err
		}},
		{"ApproveHeld while calling", CallingModel, func(r *Record) error {
			_, err := r.ApproveHeld(time.Minute, t0)
			return err
		}},
		{"RefuseHeld while calling", CallingModel, func(r *Record) error {
			_, err := r.RefuseHeld("denied", t0)
			return err
		}},
		{"EndTurn with calls from AWAITING_APPROVAL", AwaitingApproval, func(r *Record) error {
			_, err := r.EndTurn(TurnOutcome{StopReason: "tool_use", ToolCalls: calls("a")}, t0)
			return err
		}},
		{"RefuseHeld from READY", Ready, func(r *Record) error {
			_, err := r.RefuseHeld("denied", t0)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := busyRecord(tc.from)
			before := r.Clone()
			err := tc.call(r)
			var te *TransitionError
			if !errors.As(err, &te) || te.From != tc.from {
				t.Fatalf("err = %v, want *TransitionError from %s", err, tc.from)
			}
			if !reflect.DeepEqual(r, before) {
				t.Errorf("record changed:\n got %+v\nwant %+v", r, before)
			}
		})
	}
}

func TestHeldForApproval(t *testing.T) {
	hold := func(t *testing.T) *Record {
		t.Helper()
		r := New("run-1", "team-a", t0)
		if _, err := r.BeginTurn(t0); err != nil {
			t.Fatal(err)
		}
		o := TurnOutcome{StopReason: "tool_use", ToolCalls: calls("rm"), ApprovalID: "appr-9", ToolDeadline: time.Minute}
		ts, err := r.EndTurn(o, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 || r.State != AwaitingApproval || r.Pending.ApprovalID != "appr-9" {
			t.Fatalf("transitions %+v state %s approval %q", ts, r.State, r.Pending.ApprovalID)
		}
		if len(r.Pending.ToolCalls) != 1 || !r.Pending.ToolCalls[0].Deadline.IsZero() {
			t.Fatalf("held calls %+v, want one without deadline", r.Pending.ToolCalls)
		}
		return r
	}
	t.Run("approved", func(t *testing.T) {
		r := hold(t)
		at := t0.Add(time.Hour)
		ts, err := r.ApproveHeld(2*time.Minute, at)
		if err != nil {
			t.Fatal(err)
		}
		if want := []Transition{{AwaitingApproval, WaitingTool, "approved", at}}; !reflect.DeepEqual(ts, want) {
			t.Errorf("transitions %+v, want %+v", ts, want)
		}
		want := []PendingCall{{ID: "rm", Name: "tool_rm", Deadline: at.Add(2 * time.Minute)}}
		if !reflect.DeepEqual(r.Pending.ToolCalls, want) || r.Pending.ApprovalID != "" {
			t.Errorf("pending %+v approval %q", r.Pending.ToolCalls, r.Pending.ApprovalID)
		}
		rc, _, err := r.AcceptToolResults([]string{"rm"}, at.Add(time.Minute))
		if err != nil || !reflect.DeepEqual(rc.Accepted, []string{"rm"}) {
			t.Errorf("results after approval: %+v, %v", rc, err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := hold(t)
		ts, err := r.RefuseHeld("expired", t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 || ts[0].To != Ready || ts[0].Reason != "expired" {
			t.Errorf("transitions %+v", ts)
		}
		if r.Pending.ToolCalls != nil || r.Pending.ApprovalID != "" {
			t.Errorf("pending %+v after refusal", r.Pending)
		}
	})
}

func TestFinalize(t *testing.T) {
	tests := []struct {
		name  string
		from  State
		exit  State
		steps []State // states passed through, in order
	}{
		{"completed from READY", Ready, Completed, []State{Finalizing, Completed}},
		{"budget halt while calling", CallingModel, Failed, []State{Finalizing, Failed}},
		{"cancel while waiting for tools", WaitingTool, Canceled, []State{Finalizing, Canceled}},
		{"cancel while held", AwaitingApproval, Canceled, []State{Finalizing, Canceled}},
		{"kill while paused", Paused, Failed, []State{Finalizing, Failed}},
		{"finish an interrupted exit", Finalizing, Completed, []State{Completed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := busyRecord(tc.from)
			at := t0.Add(90 * time.Second)
			ts, err := r.Finalize(tc.exit, "BUDGET_EXCEEDED", at)
			if err != nil {
				t.Fatal(err)
			}
			var got []State
			for _, tr := range ts {
				got = append(got, tr.To)
				if tr.Reason != "BUDGET_EXCEEDED" || !tr.At.Equal(at) {
					t.Errorf("transition %+v", tr)
				}
			}
			if !slices.Equal(got, tc.steps) || ts[0].From != tc.from {
				t.Errorf("path %v from %s, want %v from %s", got, ts[0].From, tc.steps, tc.from)
			}
			if r.State != tc.exit || r.ExitReason != "BUDGET_EXCEEDED" {
				t.Errorf("state %s exit %q", r.State, r.ExitReason)
			}
			if !reflect.DeepEqual(r.Pending, Pending{}) {
				t.Errorf("pending not cleared: %+v", r.Pending)
			}
			if r.Spend.WallClockS != 90 {
				t.Errorf("wall clock %v, want 90", r.Spend.WallClockS)
			}
		})
	}
}

func TestFinalizeRefused(t *testing.T) {
	tests := []struct {
		name string
		from State
		exit State
		is   error
	}{
		{"non-terminal exit", Ready, Paused, ErrIllegalTransition},
		{"exit to READY", CallingModel, Ready, ErrIllegalTransition},
		{"unknown exit", Ready, "DONE", ErrIllegalTransition},
		{"already completed", Completed, Canceled, ErrTerminal},
		{"already canceled", Canceled, Canceled, ErrTerminal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := busyRecord(tc.from)
			before := r.Clone()
			ts, err := r.Finalize(tc.exit, "x", t0)
			if !errors.Is(err, tc.is) || ts != nil {
				t.Fatalf("Finalize = %v, %v; want %v", ts, err, tc.is)
			}
			if !reflect.DeepEqual(r, before) {
				t.Errorf("record changed")
			}
		})
	}
}

func TestAddSpend(t *testing.T) {
	r := busyRecord(Ready)
	before := r.Clone()
	r.AddSpend(Usage{InputTokens: 1, CachedInputTokens: 2, CacheWriteTokens: 3, OutputTokens: 4}, 1.5, true)
	want := before.Spend
	want.InputTokens++
	want.CachedInputTokens += 2
	want.CacheWriteTokens += 3
	want.OutputTokens += 4
	want.Dollars += 1.5
	want.Estimated = true
	if r.Spend != want {
		t.Errorf("spend %+v, want %+v", r.Spend, want)
	}
	if r.State != before.State || r.Turns != before.Turns || !r.UpdatedAt.Equal(before.UpdatedAt) {
		t.Error("AddSpend changed more than spend")
	}
}

func TestCloneIsolated(t *testing.T) {
	r := busyRecord(WaitingTool)
	c := r.Clone()
	c.Children[0] = "x"
	c.Pending.ToolCalls[0].ID = "x"
	c.Pending.Control.Kind = ControlKill
	if r.Children[0] == "x" || r.Pending.ToolCalls[0].ID == "x" || r.Pending.Control.Kind == ControlKill {
		t.Errorf("clone shares memory with the original: %+v", r)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		rec  *Record
		ok   bool
	}{
		{"fresh", New("a", "t", t0), true},
		{"nil", nil, false},
		{"empty id", New("", "t", t0), false},
		{"own parent", &Record{ID: "a", ParentID: "a", State: Ready}, false},
		{"bad state", &Record{ID: "a", State: "NOPE"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rec.Validate()
			if tc.ok != (err == nil) {
				t.Errorf("Validate = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidRecord) {
				t.Errorf("err %v is not ErrInvalidRecord", err)
			}
		})
	}
}
