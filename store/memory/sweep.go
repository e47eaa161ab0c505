package memory

import (
	"context"
	"maps"
	"strings"
	"time"

	"gatekeeper/trajectory"
)

// sweepEvery runs Sweep until ctx ends.
func (s *Store) sweepEvery(ctx context.Context, every time.Duration) {
	defer close(s.swept)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep drops the runs that expired: a run none of whose records is busy
// (calling the model, paused, held for approval), some idle (READY or
// WAITING_TOOL), none written for IdleRetention; or a run whose records
// all finished, none written for Retention. A run goes whole, so no
// record outlives its parent. It returns how many records went.
func (s *Store) Sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	now := s.now()
	s.sweepLinks(now)
	type tree struct {
		busy, idle bool // a record is busy (calling, paused...), or idle
		newest     time.Time
	}
	trees := make(map[string]*tree)
	for id, e := range s.entries {
		root, _, _ := strings.Cut(id, "/")
		t := trees[root]
		if t == nil {
			t = &tree{}
			trees[root] = t
		}
		switch st := e.rec.State; {
		case st == trajectory.Ready || st == trajectory.WaitingTool:
			t.idle = true
		case !st.Terminal():
			t.busy = true
		}
		if e.touched.After(t.newest) {
			t.newest = e.touched
		}
	}
	gone := func(t *tree) bool {
		age := now.Sub(t.newest)
		switch {
		case t.busy:
			return false
		case t.idle:
			return s.idle > 0 && age >= s.idle
		}
		return s.retention > 0 && age >= s.retention
	}
	n := 0
	for id := range s.entries {
		root, _, _ := strings.Cut(id, "/")
		if gone(trees[root]) {
			delete(s.entries, id)
			n++
		}
	}
	if n > len(s.entries) {
		// A map never shrinks: copy what is left, so that a burst of
		// junk runs leaves no table behind.
		s.entries = maps.Clone(s.entries)
	}
	return n
}
