package trajectory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// legalPairs is the state table written out pair by pair, independently of
// CanTransition's switch, so the two can disagree and fail this test.
func legalPairs() map[[2]State]bool {
	return map[[2]State]bool{
		{Ready, CallingModel}:            true,
		{Ready, Paused}:                  true,
		{Ready, Finalizing}:              true,
		{CallingModel, WaitingTool}:      true,
		{CallingModel, AwaitingApproval}: true,
		{CallingModel, Ready}:            true,
		{CallingModel, Finalizing}:       true,
		{WaitingTool, Ready}:             true,
		{WaitingTool, Finalizing}:        true,
		{AwaitingApproval, WaitingTool}:  true,
		{AwaitingApproval, Ready}:        true,
		{AwaitingApproval, Finalizing}:   true,
		{Paused, Ready}:                  true,
		{Paused, Finalizing}:             true,
		{Finalizing, Completed}:          true,
		{Finalizing, Failed}:             true,
		{Finalizing, Canceled}:           true,
	}
}

// busyRecord has every field set, so "unchanged" covers them all.
func busyRecord(s State) *Record {
	r := New("run-1", "team-a", t0)
	r.State = s
	r.ParentID = "run-0"
	r.Turns = 3
	r.Spend = Spend{Turns: 3, InputTokens: 10, OutputTokens: 5, Dollars: 0.5}
	r.Pending = Pending{
		ToolCalls:  []PendingCall{{ID: "toolu_1", Name: "Bash", Deadline: t0.Add(time.Minute)}},
		ApprovalID: "appr-1",
		Control:    &Control{Kind: ControlPause, At: t0},
	}
	r.Children = []string{"run-1/a"}
	r.StartedAt = t0
	return r
}

func TestTransitionAllPairs(t *testing.T) {
	legal := legalPairs()
	now := t0.Add(time.Hour)
	seen := 0
	for _, from := range States() {
		for _, to := range States() {
			t.Run(string(from)+"->"+string(to), func(t *testing.T) {
				r := busyRecord(from)
				before := r.Clone()
				tr, err := r.Transition(to, "why", now)
				if legal[[2]State{from, to}] {
					seen++
					if err != nil {
						t.Fatalf("legal transition refused: %v", err)
					}
					want := Transition{From: from, To: to, Reason: "why", At: now}
					if tr != want {
						t.Errorf("transition = %+v, want %+v", tr, want)
					}
					if r.State != to || !r.UpdatedAt.Equal(now) {
						t.Errorf("record state %s updated %v, want %s %v", r.State, r.UpdatedAt, to, now)
					}
					if !CanTransition(from, to) {
						t.Errorf("CanTransition(%s, %s) = false", from, to)
					}
					return
				}
				var te *TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("illegal transition: err = %v, want *TransitionError", err)
				}
				if te.ID != "run-1" || te.From != from || te.To != to {
					t.Errorf("error fields = %+v", te)
				}
				if !errors.Is(err, ErrIllegalTransition) {
					t.Error("errors.Is(err, ErrIllegalTransition) = false")
				}
				if got := errors.Is(err, ErrTerminal); got != from.Terminal() {
					t.Errorf("errors.Is(err, ErrTerminal) = %v, want %v", got, from.Terminal())
				}
				if tr != (Transition{}) {
					t.Errorf("refused transition returned %+v", tr)
				}
				if !reflect.DeepEqual(r, before) {
					t.Errorf("record changed by refused transition:\n got %+v\nwant %+v", r, before)
				}
			})
		}
	}
	if seen != len(legal) {
		t.Errorf("walked %d legal pairs, table has %d", seen, len(legal))
	}
}

func TestTerminalAbsorbing(t *testing.T) {
	for _, s := range []State{Completed, Failed, Canceled} {
		t.Run(string(s), func(t *testing.T) {
			r := busyRecord(s)
			before := r.Clone()
			attempts := map[string]error{}
			for _, to := range States() {
				_, err := r.Transition(to, "", t0)
				attempts["Transition "+string(to)] = err
			}
			_, attempts["BeginTurn"] = r.BeginTurn(t0)
			_, attempts["EndTurn"] = r.EndTurn(TurnOutcome{StopReason: "end_turn"}, t0)
			_, _, attempts["AcceptToolResults"] = r.AcceptToolResults([]string{"toolu_1"}, t0)
			_, attempts["Finalize"] = r.Finalize(Completed, "again", t0)
			_, attempts["ApproveHeld"] = r.ApproveHeld(time.Minute, t0)
			_, attempts["RefuseHeld"] = r.RefuseHeld("no", t0)
			for name, err := range attempts {
				if !errors.Is(err, ErrTerminal) {
					t.Errorf("%s: err = %v, want ErrTerminal", name, err)
				}
			}
			if !reflect.DeepEqual(r, before) {
				t.Errorf("terminal record changed:\n got %+v\nwant %+v", r, before)
			}
		})
	}
}

func TestInvalidStates(t *testing.T) {
	tests := []struct {
		name     string
		from, to State
	}{
		{"unknown target", Ready, "RUNNING"},
		{"empty target", Ready, ""},
		{"unknown source", "RUNNING", Ready},
		{"lower-case name", Ready, "calling_model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := busyRecord(tc.from)
			if _, err := r.Transition(tc.to, "", t0); !errors.Is(err, ErrIllegalTransition) {
				t.Errorf("err = %v, want ErrIllegalTransition", err)
			}
			if r.State != tc.from {
				t.Errorf("state = %s, want %s", r.State, tc.from)
			}
		})
	}
}

func TestStateMethods(t *testing.T) {
	tests := []struct {
		s               State
		valid, terminal bool
	}{
		{Ready, true, false},
		{CallingModel, true, false},
		{WaitingTool, true, false},
		{AwaitingApproval, true, false},
		{Paused, true, false},
		{Finalizing, true, false},
		{Completed, true, true},
		{Failed, true, true},
		{Canceled, true, true},
		{"", false, false},
		{"DONE", false, false},
	}
	for _, tc := range tests {
		t.Run("state "+string(tc.s), func(t *testing.T) {
			if tc.s.Valid() != tc.valid || tc.s.Terminal() != tc.terminal {
				t.Errorf("Valid=%v Terminal=%v, want %v %v", tc.s.Valid(), tc.s.Terminal(), tc.valid, tc.terminal)
			}
			got, err := ParseState(string(tc.s))
			if tc.valid && (err != nil || got != tc.s) {
				t.Errorf("ParseState = %q, %v", got, err)
			}
			if !tc.valid && err == nil {
				t.Errorf("ParseState(%q) accepted", tc.s)
			}
		})
	}
	if n := len(States()); n != 9 {
		t.Errorf("States() has %d states, want 9", n)
	}
}

func TestTransitionErrorMessage(t *testing.T) {
	err := error(&TransitionError{ID: "run-1", From: Completed, To: Ready})
	want := `trajectory "run-1": illegal transition COMPLETED -> READY: COMPLETED is terminal`
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	ev := (&TransitionError{ID: "run-1", From: Ready, To: Completed}).Event(t0)
	if ev.Type != EventIllegalTransition || ev.Trajectory != "run-1" || ev.From != Ready || ev.To != Completed || !ev.At.Equal(t0) {
		t.Errorf("audit event = %+v", ev)
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"run-42", true}, {"a.b_c:d-E9", true}, {"", false}, {"a/b", false}, {"a b", false},
		{"a~2", false}, {strings.Repeat("x", 128), true}, {strings.Repeat("x", 129), false}, {"é", false},
	} {
		if got := ValidID(tc.id); got != tc.want {
			t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
