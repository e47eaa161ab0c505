package outcome

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

var now = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)

// calling is a thread record under its run, with call out on the thread.
func calling(t *testing.T, call string) []*trajectory.Record {
	t.Helper()
	held := trajectory.Reservation{Calls: 1, Tokens: 1000}
	root := &trajectory.Record{ID: "run", State: trajectory.Ready, Reserved: held}
	thread := &trajectory.Record{ID: "run/t", ParentID: "run", State: trajectory.Ready, Reserved: held}
	if _, err := thread.BeginTurn(now); err != nil {
		t.Fatal(err)
	}
	thread.Call, thread.CallReserved = call, held
	return []*trajectory.Record{thread, root}
}

func TestSettleChain(t *testing.T) {
	o := Turn{Stop: "end_turn", Status: 200, Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}
	charge := meter.Charge{Micros: 500, Priced: true}
	tests := []struct {
		name      string
		o         Turn
		wantState trajectory.State
		wantTurns int64 // on the run
		wantType  trajectory.EventType
	}{
		{"a reply ends the turn and is charged on the chain", o, trajectory.Ready, 1, trajectory.EventTurn},
		{"a reply with calls waits for their results",
			Turn{Stop: "tool_use", Calls: []trajectory.PendingCall{{ID: "toolu_1", Name: "bash"}}, Usage: o.Usage},
			trajectory.WaitingTool, 1, trajectory.EventTurn},
		{"a held reply awaits its approval",
			Turn{Stop: "tool_use", Calls: []trajectory.PendingCall{{ID: "toolu_1", Name: "bash"}}, Usage: o.Usage, ApprovalID: "ap_1"},
			trajectory.AwaitingApproval, 1, trajectory.EventTurn},
		{"no reply from the provider is not a turn", Turn{Stop: "error", Status: 529, Upstream: true},
			trajectory.Ready, 0, trajectory.EventUpstreamError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chain := calling(t, "c1")
			s := Settle{Call: "c1", ToolDeadline: time.Minute}
			data := tc.o.EventData("c1", "m", "anthropic", time.Second, charge)
			evs, err := s.Chain(chain, tc.o, charge, data, now)
			if err != nil {
				t.Fatal(err)
			}
			thread, root := chain[0], chain[1]
			if len(evs) == 0 || evs[0].Type != tc.wantType {
				t.Fatalf("events %v, want a %s first", evs, tc.wantType)
			}
			if want, _ := data.MarshalJSON(); string(evs[0].Data) != string(want) || evs[0].Trajectory != "run/t" || !evs[0].At.Equal(now) {
				t.Errorf("event %+v, want data %s", evs[0], want)
			}
			if thread.State != tc.wantState || thread.Call != "" || thread.SettledCall != "c1" {
				t.Errorf("thread %s call %q settled %q, want %s, no call, c1 settled", thread.State, thread.Call, thread.SettledCall, tc.wantState)
			}
			for _, r := range chain {
				if r.Reserved != (trajectory.Reservation{}) {
					t.Errorf("%s still reserves %+v", r.ID, r.Reserved)
				}
			}
			if root.Spend.Turns != tc.wantTurns || root.Spend.InputTokens != tc.o.Usage.InputTokens {
				t.Errorf("run spend %+v, want %d turns, %d input tokens", root.Spend, tc.wantTurns, tc.o.Usage.InputTokens)
			}
			if _, err := s.Chain(chain, tc.o, charge, TurnData{}, now); !errors.Is(err, ErrSettled) {
				t.Errorf("settled again: %v, want ErrSettled", err)
			}
		})
	}
}

func TestSettleChainCallGone(t *testing.T) {
	chain := calling(t, "c2")
	if _, err := (Settle{Call: "c1"}).Chain(chain, Turn{Stop: "end_turn"}, meter.Charge{}, TurnData{}, now); !errors.Is(err, ErrCallGone) {
		t.Fatalf("err %v, want ErrCallGone", err)
	}
}

// TestSettleChainLost: the late reply of a call taken for lost is charged
// once, with no state change and no reservation to give back.
func TestSettleChainLost(t *testing.T) {
	chain := calling(t, "c2")
	chain[0].LostCalls = []string{"c0", "c1"}
	o := Turn{Stop: "end_turn", Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}, Detail: "cut"}
	data := TurnData{Call: "c1", Detail: o.Detail}
	s := Settle{Call: "c1"}
	evs, err := s.Chain(chain, o, meter.Charge{Micros: 500}, data, now)
	if err != nil {
		t.Fatal(err)
	}
	thread, root := chain[0], chain[1]
	var got struct {
		Late   bool
		Detail string
	}
	if len(evs) == 0 || evs[0].Type != trajectory.EventTurn || json.Unmarshal(evs[0].Data, &got) != nil || !got.Late ||
		got.Detail != "cut; the call had been taken for lost and its reservation released; its reply arrived later and is charged" {
		t.Fatalf("events %v", evs)
	}
	// The rules may run again on a chain read anew (a retried update):
	// what they were given is as it was.
	if data.Late || data.Detail != "cut" {
		t.Fatalf("data %+v changed by the rules", data)
	}
	again := calling(t, "c2")
	again[0].LostCalls = []string{"c1"}
	if evs2, err := s.Chain(again, o, meter.Charge{Micros: 500}, data, now); err != nil || string(evs2[0].Data) != string(evs[0].Data) {
		t.Fatalf("rules run again wrote %s, %v; want %s", evs2[0].Data, err, evs[0].Data)
	}
	if thread.State != trajectory.CallingModel || thread.Call != "c2" || !slices.Equal(thread.LostCalls, []string{"c0"}) {
		t.Errorf("thread %s call %q lost %v: the call in flight must stay", thread.State, thread.Call, thread.LostCalls)
	}
	if thread.Turns != 1 || root.Spend.Turns != 1 || root.Spend.OutputTokens != 20 || !root.FallbackPriced {
		t.Errorf("thread turns %d, run spend %+v fallback %v", thread.Turns, root.Spend, root.FallbackPriced)
	}
	if root.Reserved.Calls != 1 {
		t.Errorf("run reserves %+v: the call in flight's reservation must stay", root.Reserved)
	}
	if _, err := s.Chain(chain, o, meter.Charge{}, TurnData{}, now); !errors.Is(err, ErrSettled) {
		t.Errorf("charged again: %v, want ErrSettled", err)
	}
}
