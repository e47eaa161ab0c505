package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// tree creates each id under the parent its id names, each with a created
// event.
func tree(t *testing.T, s trajectory.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r := trajectory.New(id, "team-a", t0)
		if i := strings.LastIndexByte(id, '/'); i > 0 {
			r.ParentID = id[:i]
		}
		mustCreate(t, s, r, ev(trajectory.EventCreated, ""))
	}
}

func chainIDs(chain []*trajectory.Record) []string {
	ids := make([]string, len(chain))
	for i, r := range chain {
		ids[i] = r.ID
	}
	return ids
}

func reasons(evs []trajectory.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Reason
	}
	return out
}

func testUpdateChainSaves(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	tree(t, s, "r", "r/a", "r/a/b")
	if _, err := s.Update(ctx, "r/a", func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.Turns = 1
		return []trajectory.Event{ev(trajectory.EventTurn, "update")}, nil
	}); err != nil {
		t.Fatal(err)
	}

	at := t0.Add(time.Second)
	var seen []string
	out, err := s.UpdateChain(ctx, "r/a/b", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		seen = chainIDs(chain)
		ts, err := chain[0].BeginTurn(at)
		if err != nil {
			return nil, err
		}
		for _, r := range chain[1:] {
			r.Spend.Turns++
			r.AddSpend(trajectory.Usage{OutputTokens: 10}, 0.5, false)
		}
		return append(trajectory.EventsFor(chain[0].ID, ts),
			trajectory.Event{At: at, Type: trajectory.EventTurn, Reason: "unnamed"},
			trajectory.Event{At: at, Trajectory: "r/a", Type: trajectory.EventTurn, Reason: "middle", Data: json.RawMessage(`{"n":2}`)},
			trajectory.Event{At: at, Trajectory: "r", Type: trajectory.EventTurn, Reason: "root-1"},
			trajectory.Event{At: at, Trajectory: "r", Type: trajectory.EventTurn, Reason: "root-2"},
		), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"r/a/b", "r/a", "r"}
	if !slices.Equal(seen, want) {
		t.Errorf("fn got %v, want %v", seen, want)
	}
	if !slices.Equal(chainIDs(out), want) {
		t.Fatalf("UpdateChain returned %v, want %v", chainIDs(out), want)
	}
	if out[0].State != trajectory.CallingModel || !out[0].StartedAt.Equal(at) {
		t.Errorf("r/a/b returned in %s started %v", out[0].State, out[0].StartedAt)
	}
	if out[1].Turns != 1 {
		t.Errorf("r/a returned with turns %d: UpdateChain started from a stale copy", out[1].Turns)
	}
	for i, r := range out {
		same(t, mustGet(t, s, want[i]), r)
		if i > 0 && (r.Spend.Turns != 1 || r.Spend.OutputTokens != 10 || r.Spend.Dollars != 0.5) {
			t.Errorf("%s spend %+v", r.ID, r.Spend)
		}
	}

	logs := []struct {
		id      string
		reasons []string
	}{
		{"r/a/b", []string{"", "turn admitted", "unnamed"}},
		{"r/a", []string{"", "update", "middle"}},
		{"r", []string{"", "root-1", "root-2"}},
	}
	for _, l := range logs {
		evs := mustEvents(t, s, l.id, 0, 0)
		if !slices.Equal(seqs(evs), []int64{1, 2, 3}) || !slices.Equal(reasons(evs), l.reasons) {
			t.Errorf("%s log: seqs %v reasons %q, want 1..3 %q", l.id, seqs(evs), reasons(evs), l.reasons)
		}
		for _, e := range evs {
			if e.Trajectory != l.id {
				t.Errorf("%s log holds an event of %q", l.id, e.Trajectory)
			}
		}
	}
	if e := mustEvents(t, s, "r/a/b", 1, 1); len(e) != 1 || e[0].Type != trajectory.EventTransition || e[0].To != trajectory.CallingModel {
		t.Errorf("r/a/b transition event %+v", e)
	}
	if e := mustEvents(t, s, "r/a", 2, 1); len(e) != 1 || string(e[0].Data) != `{"n":2}` || !e[0].At.Equal(at) {
		t.Errorf("r/a event %+v", e)
	}

	// A shorter chain of the same tree: the root's log goes on from 3.
	out, err = s.UpdateChain(ctx, "r/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		if chain[1].Spend.Turns != 1 {
			return nil, fmt.Errorf("root spend %+v, want the last save's", chain[1].Spend)
		}
		chain[1].Turns++
		return []trajectory.Event{{At: at, Trajectory: "r", Type: trajectory.EventTurn, Reason: "root-3"}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(chainIDs(out), []string{"r/a", "r"}) {
		t.Errorf("chain of r/a: %v", chainIDs(out))
	}
	if evs := mustEvents(t, s, "r", 3, 0); !slices.Equal(seqs(evs), []int64{4}) || evs[0].Reason != "root-3" {
		t.Errorf("root log after the second chain: %+v", evs)
	}
	if n := len(mustEvents(t, s, "r/a", 0, 0)); n != 3 {
		t.Errorf("r/a has %d events, want 3: it got none this time", n)
	}
}

func testUpdateChainRootOnly(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, full("solo"), ev(trajectory.EventCreated, ""))
	out, err := s.UpdateChain(ctx, "solo", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		if len(chain) != 1 {
			return nil, fmt.Errorf("chain of a root: %v", chainIDs(chain))
		}
		chain[0].Turns++
		return []trajectory.Event{{At: t0, Trajectory: "solo", Type: trajectory.EventTurn, Reason: "named"}, ev(trajectory.EventTurn, "unnamed")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].Turns != 8 {
		t.Fatalf("UpdateChain of a root returned %+v", out)
	}
	same(t, mustGet(t, s, "solo"), out[0])
	if evs := mustEvents(t, s, "solo", 0, 0); !slices.Equal(reasons(evs), []string{"", "named", "unnamed"}) || !slices.Equal(seqs(evs), span(1, 3)) {
		t.Errorf("log %+v", evs)
	}
}

// testUpdateChainRefused runs updates that must save nothing: no record
// of the chain, no event in any log.
func testUpdateChainRefused(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	ids := []string{"r", "r/a", "r/a/b", "r/c"}
	tree(t, s, ids...)
	boom := errors.New("boom")
	tests := []struct {
		name    string
		id      string
		fn      func(chain []*trajectory.Record) ([]trajectory.Event, error)
		wantErr error
	}{
		{"event for a sibling", "r/a/b", withEvents(trajectory.Event{At: t0, Trajectory: "r/c", Type: trajectory.EventTurn}), trajectory.ErrInvalidRecord},
		{"event for a child", "r/a", withEvents(trajectory.Event{At: t0, Trajectory: "r/a/b", Type: trajectory.EventTurn}), trajectory.ErrInvalidRecord},
		{"event for an unknown record", "r/a/b", withEvents(trajectory.Event{At: t0, Trajectory: "ghost", Type: trajectory.EventTurn}), trajectory.ErrInvalidRecord},
		{"fn error", "r/a/b", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			evs, _ := withEvents()(chain)
			chain[0].State = trajectory.Completed
			return evs, boom
		}, boom},
		{"illegal transition", "r/a/b", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			evs, _ := withEvents()(chain)
			// The root never began a turn.
			_, err := chain[len(chain)-1].EndTurn(trajectory.TurnOutcome{StopReason: "end_turn"}, t0)
			return evs, err
		}, trajectory.ErrIllegalTransition},
		{"id changed", "r/a/b", mutating(0, func(r *trajectory.Record) { r.ID = "r/a/z" }), trajectory.ErrInvalidRecord},
		{"ancestor's id changed", "r/a/b", mutating(1, func(r *trajectory.Record) { r.ID = "r/z" }), trajectory.ErrInvalidRecord},
		{"ancestor's parent changed", "r/a/b", mutating(1, func(r *trajectory.Record) { r.ParentID = "" }), trajectory.ErrInvalidRecord},
		{"ancestor's children changed", "r/a/b", mutating(1, func(r *trajectory.Record) { r.Children = append(r.Children, "r/a/ghost") }), trajectory.ErrInvalidRecord},
		{"root's children dropped", "r/a/b", mutating(2, func(r *trajectory.Record) { r.Children = nil }), trajectory.ErrInvalidRecord},
		{"root's state invalid", "r/a/b", mutating(2, func(r *trajectory.Record) { r.State = "RUNNING" }), trajectory.ErrInvalidRecord},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := make(map[string]*trajectory.Record)
			for _, id := range ids {
				before[id] = mustGet(t, s, id)
			}
			out, err := s.UpdateChain(ctx, tc.id, tc.fn)
			if !errors.Is(err, tc.wantErr) || out != nil {
				t.Errorf("UpdateChain = %v, %v; want nil, %v", out, err, tc.wantErr)
			}
			for _, id := range ids {
				same(t, mustGet(t, s, id), before[id])
				if n := len(mustEvents(t, s, id, 0, 0)); n != 1 {
					t.Errorf("%s has %d events after a refused update, want 1", id, n)
				}
			}
		})
	}
	for _, id := range []string{"r/a/z", "r/z", "r/a/ghost"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, trajectory.ErrNotFound) {
			t.Errorf("Get %s: %v, want ErrNotFound", id, err)
		}
	}
}

// withEvents changes every record of the chain and adds an event to each
// log, then evs.
func withEvents(evs ...trajectory.Event) func([]*trajectory.Record) ([]trajectory.Event, error) {
	return func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		var out []trajectory.Event
		for _, r := range chain {
			r.Turns = 99
			out = append(out, trajectory.Event{At: t0, Trajectory: r.ID, Type: trajectory.EventTurn})
		}
		return append(out, evs...), nil
	}
}

// mutating is withEvents, then mutate on chain[i].
func mutating(i int, mutate func(*trajectory.Record)) func([]*trajectory.Record) ([]trajectory.Event, error) {
	return func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		evs, _ := withEvents()(chain)
		mutate(chain[i])
		return evs, nil
	}
}

func testUpdateChainMissing(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	tree(t, s, "r")
	for _, id := range []string{"missing", "r/ghost", "nobody/x"} {
		_, err := s.UpdateChain(ctx, id, func([]*trajectory.Record) ([]trajectory.Event, error) {
			t.Errorf("fn called for missing %s", id)
			return nil, nil
		})
		if !errors.Is(err, trajectory.ErrNotFound) {
			t.Errorf("UpdateChain %s: %v, want ErrNotFound", id, err)
		}
		// The missing record is named: for nobody/x, the first one looked up.
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
			t.Errorf("UpdateChain %s: %q does not name the missing record", id, err)
		}
	}
	if n := len(mustEvents(t, s, "r", 0, 0)); n != 1 {
		t.Errorf("root has %d events, want 1", n)
	}
}

// testUpdateChainAtomic charges the root from many children at once, with
// Updates of the root in between: no increment may be lost.
func testUpdateChainAtomic(t *testing.T, s trajectory.Store) {
	const children, perChild, rootUpdates = 8, 25, 25
	ids := []string{"r"}
	for i := range children {
		ids = append(ids, fmt.Sprintf("r/%d", i))
	}
	tree(t, s, ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, children*perChild+rootUpdates)
	for c := range children {
		wg.Go(func() {
			for i := range perChild {
				_, err := s.UpdateChain(ctx, ids[c+1], func(chain []*trajectory.Record) ([]trajectory.Event, error) {
					root := chain[len(chain)-1]
					root.Turns++
					chain[0].Turns++
					return []trajectory.Event{
						ev(trajectory.EventTurn, fmt.Sprintf("%d-%d", c, i)),
						{At: t0, Trajectory: root.ID, Type: trajectory.EventTurn, Reason: fmt.Sprintf("%d-%d", c, i)},
					}, nil
				})
				errs <- err
			}
		})
	}
	wg.Go(func() {
		for i := range rootUpdates {
			_, err := s.Update(ctx, "r", func(r *trajectory.Record) ([]trajectory.Event, error) {
				r.Turns++
				return []trajectory.Event{ev(trajectory.EventTurn, fmt.Sprint("root-", i))}, nil
			})
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	const total = children*perChild + rootUpdates
	if r := mustGet(t, s, "r"); r.Turns != total {
		t.Errorf("root turns %d, want %d", r.Turns, total)
	}
	evs := mustEvents(t, s, "r", 1, trajectory.MaxListLimit)
	if !slices.Equal(seqs(evs), span(2, total+1)) {
		t.Errorf("root log: %d events, want seqs 2..%d", len(evs), total+1)
	}
	distinct := map[string]bool{}
	for _, e := range evs {
		distinct[e.Reason] = true
	}
	if len(distinct) != total {
		t.Errorf("root log holds %d distinct events, want %d", len(distinct), total)
	}
	for _, id := range ids[1:] {
		if r := mustGet(t, s, id); r.Turns != perChild {
			t.Errorf("%s turns %d, want %d", id, r.Turns, perChild)
		}
		if evs := mustEvents(t, s, id, 0, 0); !slices.Equal(seqs(evs), span(1, perChild+1)) {
			t.Errorf("%s log seqs %v, want 1..%d", id, seqs(evs), perChild+1)
		}
	}
}

func testUpdateChainCopiesIsolated(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, full("root"))
	in := full("root/a")
	in.ParentID = "root"
	mustCreate(t, s, in)
	want := []*trajectory.Record{mustGet(t, s, "root/a"), mustGet(t, s, "root")}

	mutate := func(r *trajectory.Record) {
		r.State = trajectory.Canceled
		r.Turns = 99
		r.Pending.ToolCalls[0].ID = "mutated"
		r.Pending.Control.Kind = trajectory.ControlKill
		r.Children = append(r.Children, "ghost")
	}
	var kept []*trajectory.Record
	out, err := s.UpdateChain(ctx, "root/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		kept = chain
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		mutate(out[i])
		mutate(kept[i])
	}
	for _, w := range want {
		same(t, mustGet(t, s, w.ID), w)
	}
	// A later update starts from what was saved, not from fn's copies.
	if _, err := s.UpdateChain(ctx, "root/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		for i, r := range chain {
			if r.Turns != want[i].Turns || r.State != want[i].State {
				return nil, fmt.Errorf("%s reached fn as turns %d state %s", r.ID, r.Turns, r.State)
			}
		}
		return nil, nil
	}); err != nil {
		t.Error(err)
	}
}

func testUpdateChainDeepest(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	ids := []string{"d"}
	for len(ids) < trajectory.MaxDepth {
		ids = append(ids, fmt.Sprintf("%s/%d", ids[len(ids)-1], len(ids)))
	}
	tree(t, s, ids...)
	deepest := ids[len(ids)-1]
	out, err := s.UpdateChain(ctx, deepest, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		for _, r := range chain {
			r.Turns++
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(ids)
	if !slices.Equal(chainIDs(out), ids) {
		t.Errorf("chain of the deepest record: %v, want %v", chainIDs(out), ids)
	}
	for _, id := range ids {
		if r := mustGet(t, s, id); r.Turns != 1 {
			t.Errorf("%s turns %d, want 1", id, r.Turns)
		}
	}
	deeper := trajectory.New(deepest+"/x", "team-a", t0)
	deeper.ParentID = deepest
	if err := s.Create(ctx, deeper); !errors.Is(err, trajectory.ErrInvalidRecord) {
		t.Errorf("Create below MaxDepth: %v, want ErrInvalidRecord", err)
	}
}
