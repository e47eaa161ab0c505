package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// RunIdle runs the contract of a store's idle retention: newStore must
// return an empty store that drops idle runs after idle (real time).
// Idle runs (every record READY or WAITING_TOOL, or finished) go whole
// once no record was written for idle; a run with a busy record, a
// finished run and a run written to stay.
func RunIdle(t *testing.T, idle time.Duration, newStore func(t *testing.T) trajectory.Store) {
	ctx := context.Background()
	s := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond)
	create := func(id, parent string) {
		t.Helper()
		r := trajectory.New(id, "team-a", now)
		r.ParentID = parent
		if err := s.Create(ctx, r, trajectory.Event{At: now, Type: trajectory.EventCreated, To: r.State}); err != nil {
			t.Fatalf("Create(%s): %v", id, err)
		}
	}
	update := func(id string, fn func(r *trajectory.Record) error) {
		t.Helper()
		if _, err := s.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			return nil, fn(chain[0])
		}); err != nil {
			t.Fatalf("UpdateChain(%s): %v", id, err)
		}
	}
	exists := func(id string) bool {
		t.Helper()
		_, err := s.Get(ctx, id)
		if err != nil && !errors.Is(err, trajectory.ErrNotFound) {
			t.Fatalf("Get(%s): %v", id, err)
		}
		return err == nil
	}
	create("idle", "")
	create("idle/child", "idle")
	update("idle/child", func(r *trajectory.Record) error { r.Turns++; return nil })
	create("busy", "")
	create("busy/child", "busy")
	update("busy/child", func(r *trajectory.Record) error { _, err := r.BeginTurn(now); return err })
	create("done", "")
	update("done", func(r *trajectory.Record) error { _, err := r.Finalize(trajectory.Completed, "", now); return err })
	create("kept", "")

	deadline := time.Now().Add(20 * idle)
	for exists("idle") || exists("idle/child") {
		if time.Now().After(deadline) {
			t.Fatalf("an idle run is still there %v after its last write (idle retention %v)", 20*idle, idle)
		}
		// Writes keep a run.
		update("kept", func(r *trajectory.Record) error { r.Turns++; return nil })
		time.Sleep(idle / 10)
	}
	for _, id := range []string{"busy", "busy/child", "done", "kept"} {
		if !exists(id) {
			t.Errorf("%s went with the idle run", id)
		}
	}
	if _, err := s.Events(ctx, "idle/child", 0, 10); err == nil {
		evs, _ := s.Events(ctx, "idle/child", 0, 10)
		if len(evs) > 0 {
			t.Errorf("the expired record's events are still there: %v", evs)
		}
	}
}
