package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// testListCalling: listing the records in CALLING_MODEL (what the lost-call
// sweeper does every heartbeat) finds every record that began a call,
// newest first, loses the ones that ended it, and finds a record again
// when it begins its next call.
func testListCalling(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	for i, id := range []string{"a", "b", "c", "b/1"} {
		r := trajectory.New(id, "team-a", t0.Add(time.Duration(i)*time.Minute))
		if id == "b/1" {
			r.ParentID = "b"
		}
		mustCreate(t, s, r)
	}
	born := trajectory.New("d", "team-b", t0.Add(10*time.Minute))
	born.State, born.Call = trajectory.CallingModel, "call-d" // created mid-call
	mustCreate(t, s, born)
	move := func(id string, to trajectory.State) {
		t.Helper()
		if _, err := s.Update(ctx, id, func(r *trajectory.Record) ([]trajectory.Event, error) {
			tr, err := r.Transition(to, "test", t0.Add(time.Hour))
			return trajectory.EventsFor(r.ID, []trajectory.Transition{tr}), err
		}); err != nil {
			t.Fatalf("%s to %s: %v", id, to, err)
		}
	}
	listed := func(f trajectory.Filter) []string {
		t.Helper()
		f.State = trajectory.CallingModel
		recs, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range recs {
			if r.State != trajectory.CallingModel {
				t.Errorf("%s listed in state %s", r.ID, r.State)
			}
			ids = append(ids, r.ID)
		}
		return ids
	}
	for _, id := range []string{"a", "b/1", "c"} {
		move(id, trajectory.CallingModel)
	}
	if got := listed(trajectory.Filter{}); !slices.Equal(got, []string{"d", "b/1", "c", "a"}) {
		t.Errorf("calling: %v, want d b/1 c a", got)
	}
	move("c", trajectory.Ready)
	move("a", trajectory.WaitingTool)
	if got := listed(trajectory.Filter{}); !slices.Equal(got, []string{"d", "b/1"}) {
		t.Errorf("after two calls ended: %v, want d b/1", got)
	}
	move("c", trajectory.CallingModel)
	if got := listed(trajectory.Filter{}); !slices.Equal(got, []string{"d", "b/1", "c"}) {
		t.Errorf("after c's next call: %v, want d b/1 c", got)
	}
	if got := listed(trajectory.Filter{Tenant: "team-a", Limit: 1}); !slices.Equal(got, []string{"b/1"}) {
		t.Errorf("team-a, limit 1: %v, want b/1", got)
	}
}
