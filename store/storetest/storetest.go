// Package storetest is the contract every trajectory.Store must meet, as a
// test suite that each store's tests run against their own implementation.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// Run runs the contract suite. newStore must return an empty store that no
// other test shares; Run closes it when each subtest ends.
func Run(t *testing.T, newStore func(t *testing.T) trajectory.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s trajectory.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateRefused", testCreateRefused},
		{"ParentChildren", testParentChildren},
		{"CreateChildBounded", testCreateChildBounded},
		{"CreateChildAtomic", testCreateChildAtomic},
		{"CopiesIsolated", testCopiesIsolated},
		{"UpdateSaves", testUpdateSaves},
		{"UpdateAtomic", testUpdateAtomic},
		{"UpdateErrorSavesNothing", testUpdateErrorSavesNothing},
		{"UpdateGuards", testUpdateGuards},
		{"UpdateChainSaves", testUpdateChainSaves},
		{"UpdateChainRootOnly", testUpdateChainRootOnly},
		{"UpdateChainRefused", testUpdateChainRefused},
		{"UpdateChainMissing", testUpdateChainMissing},
		{"UpdateChainAtomic", testUpdateChainAtomic},
		{"UpdateChainCopiesIsolated", testUpdateChainCopiesIsolated},
		{"UpdateChainDeepest", testUpdateChainDeepest},
		{"AdmitTwice", testAdmitTwice},
		{"EventsPaging", testEventsPaging},
		{"EventsLimitBounded", testEventsLimitBounded},
		{"ListFilters", testListFilters},
		{"ListLimits", testListLimits},
		{"ListCalling", testListCalling},
		{"TerminalRoundTrip", testTerminalRoundTrip},
		{"JSONFieldNames", testJSONFieldNames},
		{"CanceledContext", testCanceledContext},
		{"Closed", testClosed},
		{"Links", testLinks},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// t0 has no monotonic reading and is in UTC, so a store that serializes
// records gives back exactly what it was handed.
var t0 = time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)

// full is a record with every field set.
func full(id string) *trajectory.Record {
	r := trajectory.New(id, "team-a", t0)
	r.State = trajectory.WaitingTool
	r.Turns = 7
	r.LastStopReason = "tool_use"
	r.UpdatedAt = t0.Add(time.Minute)
	r.Budget = trajectory.Budget{Turns: 200, Tokens: 5000000, WallClockS: 7200, Dollars: 20}
	r.Spend = trajectory.Spend{Turns: 7, InputTokens: 1, CachedInputTokens: 2, CacheWriteTokens: 3, OutputTokens: 4, Dollars: 0.5, WallClockS: 60.5, Estimated: true}
	r.BudgetUsed = 0.035
	r.BindingDimension = "turns"
	r.Pending = trajectory.Pending{
		ToolCalls:  []trajectory.PendingCall{{ID: "toolu_1", Name: "Bash", Deadline: t0.Add(5 * time.Minute)}, {ID: "toolu_2", Name: "Read"}},
		ApprovalID: "appr-1",
		Control:    &trajectory.Control{Kind: trajectory.ControlInterrupt, Message: "wrap up", By: "alice", At: t0},
	}
	r.Thread, r.Provider, r.Model, r.StartedAt = "agent-1", "anthropic", "claude-sonnet-4-5", t0
	r.CreatedBy = trajectory.Creator{Kind: trajectory.CreatorOperator, Name: "ops-alice"}
	r.LostCalls = []string{"c-old"}
	r.SweptCalls = []trajectory.SweptCall{{Call: "c-swept", InputTokens: 31, OutputTokens: 9, Dollars: 0.000228}}
	r.Watch = trajectory.Watch{Calls: []trajectory.Digest{0xfedcba9876543210, 2}, Result: 3, ResultsInRow: 2, ErrorsInRow: 1, IdleTurns: 1,
		Step: trajectory.LoopSteer, StepTurn: 5, Notice: true, Signal: &trajectory.LoopSignal{Kind: trajectory.SignalRepeatedCall,
			Tool: "Bash", Digest: 0xfedcba9876543210, Count: 5, Threshold: 5, Window: 8}}
	return r
}

func ev(typ trajectory.EventType, reason string) trajectory.Event {
	return trajectory.Event{At: t0, Type: typ, Reason: reason}
}

// same fails unless got and want encode to the same JSON, the form every
// store must preserve field for field.
func same(t *testing.T, got, want *trajectory.Record) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("record differs:\n got %s\nwant %s", g, w)
	}
}

func mustCreate(t *testing.T, s trajectory.Store, r *trajectory.Record, evs ...trajectory.Event) {
	t.Helper()
	if err := s.Create(context.Background(), r, evs...); err != nil {
		t.Fatalf("Create %q: %v", r.ID, err)
	}
}

func mustGet(t *testing.T, s trajectory.Store, id string) *trajectory.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %q: %v", id, err)
	}
	return r
}

func mustEvents(t *testing.T, s trajectory.Store, id string, after int64, limit int) []trajectory.Event {
	t.Helper()
	evs, err := s.Events(context.Background(), id, after, limit)
	if err != nil {
		t.Fatalf("Events %q: %v", id, err)
	}
	return evs
}

func seqs(evs []trajectory.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func testCreateGet(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	want := full("run-1")
	mustCreate(t, s, want, ev(trajectory.EventCreated, "admin"), ev(trajectory.EventControl, "pause"))
	same(t, mustGet(t, s, "run-1"), want)

	evs := mustEvents(t, s, "run-1", 0, 0)
	if !slices.Equal(seqs(evs), []int64{1, 2}) {
		t.Fatalf("seqs %v, want [1 2]", seqs(evs))
	}
	for i, typ := range []trajectory.EventType{trajectory.EventCreated, trajectory.EventControl} {
		if evs[i].Type != typ || evs[i].Trajectory != "run-1" || !evs[i].At.Equal(t0) {
			t.Errorf("event %d = %+v", i, evs[i])
		}
	}

	if _, err := s.Get(ctx, "run-2"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("Get missing: %v, want ErrNotFound", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func testCreateRefused(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	orig := full("run-1")
	mustCreate(t, s, orig, ev(trajectory.EventCreated, ""))

	again := trajectory.New("run-1", "team-b", t0)
	if err := s.Create(ctx, again, ev(trajectory.EventCreated, "dup")); !errors.Is(err, trajectory.ErrExists) {
		t.Errorf("Create duplicate: %v, want ErrExists", err)
	}
	same(t, mustGet(t, s, "run-1"), orig)
	if n := len(mustEvents(t, s, "run-1", 0, 0)); n != 1 {
		t.Errorf("duplicate Create added events: %d events", n)
	}

	invalid := []struct {
		name string
		rec  *trajectory.Record
	}{
		{"nil", nil},
		{"empty id", trajectory.New("", "team-a", t0)},
		{"unknown state", &trajectory.Record{ID: "x", State: "RUNNING"}},
		{"own parent", &trajectory.Record{ID: "x", ParentID: "x", State: trajectory.Ready}},
		{"children already", &trajectory.Record{ID: "x", State: trajectory.Ready, Children: []string{"y"}}},
	}
	for _, tc := range invalid {
		if err := s.Create(ctx, tc.rec); !errors.Is(err, trajectory.ErrInvalidRecord) {
			t.Errorf("Create %s: %v, want ErrInvalidRecord", tc.name, err)
		}
	}
	if _, err := s.Get(ctx, "x"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("a refused record was saved: %v", err)
	}
}

func testParentChildren(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("root", "team-a", t0))
	for _, id := range []string{"root/a", "root/b"} {
		c := trajectory.New(id, "team-a", t0)
		c.ParentID = "root"
		mustCreate(t, s, c)
	}
	g := trajectory.New("root/a/1", "team-a", t0)
	g.ParentID = "root/a"
	mustCreate(t, s, g)

	if got := mustGet(t, s, "root").Children; !slices.Equal(got, []string{"root/a", "root/b"}) {
		t.Errorf("root children %v", got)
	}
	if got := mustGet(t, s, "root/a"); got.ParentID != "root" || !slices.Equal(got.Children, []string{"root/a/1"}) {
		t.Errorf("root/a parent %q children %v", got.ParentID, got.Children)
	}
	if got := mustGet(t, s, "root/b").Children; len(got) != 0 {
		t.Errorf("root/b children %v", got)
	}

	orphan := trajectory.New("nobody/orphan", "team-a", t0)
	orphan.ParentID = "nobody"
	if err := s.Create(ctx, orphan, ev(trajectory.EventCreated, "")); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("Create with missing parent: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "nobody/orphan"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("orphan saved: %v", err)
	}
	if _, err := s.Events(ctx, "nobody/orphan", 0, 0); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("orphan's events saved: %v", err)
	}

	// A retry of a finished run names the finished run as parent.
	if _, err := s.Update(ctx, "root/b", func(r *trajectory.Record) ([]trajectory.Event, error) {
		_, err := r.Finalize(trajectory.Failed, "upstream_error", t0)
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	retry := trajectory.New("root/b/retry", "team-a", t0)
	retry.ParentID = "root/b"
	mustCreate(t, s, retry)
	if got := mustGet(t, s, "root/b"); got.State != trajectory.Failed || !slices.Equal(got.Children, []string{"root/b/retry"}) {
		t.Errorf("finished parent: state %s children %v", got.State, got.Children)
	}
}

func testCopiesIsolated(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("root", "team-a", t0))
	in := full("root/run-1")
	in.ParentID = "root"
	// want is built apart from in: a clone would share what a shallow
	// copy in the store shares, and change with it.
	want := full("root/run-1")
	want.ParentID = "root"
	data := []byte(`{"n":1}`)
	mustCreate(t, s, in, trajectory.Event{At: t0, Type: trajectory.EventCreated, Data: data})

	mutate := func(r *trajectory.Record) {
		r.State = trajectory.Canceled
		r.Turns = 99
		r.Pending.ToolCalls[0].ID = "mutated"
		r.Pending.Control.Kind = trajectory.ControlKill
		r.Spend.Dollars = 1e9
		r.Children = append(r.Children, "ghost")
		r.LostCalls[0] = "mutated"
		r.SweptCalls[0].OutputTokens = 1e6
	}
	mutate(in)
	data[2] = 'X'
	same(t, mustGet(t, s, "root/run-1"), want)

	mutate(mustGet(t, s, "root/run-1"))
	same(t, mustGet(t, s, "root/run-1"), want)

	var kept *trajectory.Record
	out, err := s.Update(ctx, "root/run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		kept = r
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mutate(out)
	mutate(kept)
	same(t, mustGet(t, s, "root/run-1"), want)

	list, err := s.List(ctx, trajectory.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.ID == "root/run-1" {
			mutate(r)
		}
	}
	same(t, mustGet(t, s, "root/run-1"), want)

	root := mustGet(t, s, "root")
	root.Children[0] = "ghost"
	if got := mustGet(t, s, "root").Children; !slices.Equal(got, []string{"root/run-1"}) {
		t.Errorf("root children %v after mutating a copy", got)
	}

	evs := mustEvents(t, s, "root/run-1", 0, 0)
	evs[0].Data[2] = 'Y'
	evs[0].Type = "mutated"
	if got := mustEvents(t, s, "root/run-1", 0, 0); string(got[0].Data) != `{"n":1}` || got[0].Type != trajectory.EventCreated {
		t.Errorf("stored event changed through a copy: %+v (data %s)", got[0], got[0].Data)
	}
}

func testUpdateSaves(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("run-1", "team-a", t0), ev(trajectory.EventCreated, ""))
	at := t0.Add(time.Second)
	out, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		ts, err := r.BeginTurn(at)
		return trajectory.EventsFor(r.ID, ts), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.State != trajectory.CallingModel || !out.StartedAt.Equal(at) {
		t.Errorf("Update returned state %s started %v", out.State, out.StartedAt)
	}
	same(t, mustGet(t, s, "run-1"), out)
	evs := mustEvents(t, s, "run-1", 0, 0)
	if len(evs) != 2 {
		t.Fatalf("events %+v, want created + transition", evs)
	}
	if e := evs[1]; e.Seq != 2 || e.Type != trajectory.EventTransition || e.From != trajectory.Ready || e.To != trajectory.CallingModel || !e.At.Equal(at) {
		t.Errorf("transition event %+v", e)
	}

	if _, err := s.Update(ctx, "missing", func(*trajectory.Record) ([]trajectory.Event, error) {
		t.Error("fn called for a missing record")
		return nil, nil
	}); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("Update missing: %v, want ErrNotFound", err)
	}
}

func testUpdateAtomic(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("run-1", "team-a", t0))
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
				r.Turns++
				r.Spend.Turns++
				return []trajectory.Event{{At: t0, Type: trajectory.EventTurn, Reason: fmt.Sprint(i)}}, nil
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	r := mustGet(t, s, "run-1")
	if r.Turns != n || r.Spend.Turns != n {
		t.Errorf("after %d concurrent updates: turns %d, spend turns %d", n, r.Turns, r.Spend.Turns)
	}
	evs := mustEvents(t, s, "run-1", 0, 0)
	if !slices.Equal(seqs(evs), span(1, n)) {
		t.Errorf("seqs %v, want 1..%d", seqs(evs), n)
	}
	reasons := map[string]bool{}
	for _, e := range evs {
		reasons[e.Reason] = true
	}
	if len(reasons) != n {
		t.Errorf("%d distinct events saved, want %d", len(reasons), n)
	}
}

func testUpdateErrorSavesNothing(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	want := full("run-1")
	mustCreate(t, s, want, ev(trajectory.EventCreated, ""))
	boom := errors.New("boom")
	out, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.Turns = 1000
		r.State = trajectory.Completed
		return []trajectory.Event{ev(trajectory.EventTurn, "lost")}, boom
	})
	if !errors.Is(err, boom) || out != nil {
		t.Errorf("Update = %v, %v; want nil, boom", out, err)
	}
	same(t, mustGet(t, s, "run-1"), want)
	if n := len(mustEvents(t, s, "run-1", 0, 0)); n != 1 {
		t.Errorf("%d events after a failed update, want 1", n)
	}

	// An illegal transition inside fn comes back typed.
	_, err = s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		_, err := r.BeginTurn(t0)
		return nil, err
	})
	var te *trajectory.TransitionError
	if !errors.As(err, &te) || te.From != trajectory.WaitingTool || te.To != trajectory.CallingModel {
		t.Errorf("illegal transition in Update: %v", err)
	}
	same(t, mustGet(t, s, "run-1"), want)
}

func testUpdateGuards(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("root", "team-a", t0))
	c := trajectory.New("root/a", "team-a", t0)
	c.ParentID = "root"
	mustCreate(t, s, c)
	tests := []struct {
		name   string
		id     string
		mutate func(*trajectory.Record)
	}{
		{"id changed", "root/a", func(r *trajectory.Record) { r.ID = "other" }},
		{"parent changed", "root/a", func(r *trajectory.Record) { r.ParentID = "" }},
		{"children changed", "root", func(r *trajectory.Record) { r.Children = append(r.Children, "ghost") }},
		{"children dropped", "root", func(r *trajectory.Record) { r.Children = nil }},
		{"state invalid", "root", func(r *trajectory.Record) { r.State = "RUNNING" }},
	}
	for _, tc := range tests {
		before := mustGet(t, s, tc.id)
		_, err := s.Update(ctx, tc.id, func(r *trajectory.Record) ([]trajectory.Event, error) {
			r.Turns = 5
			tc.mutate(r)
			return []trajectory.Event{ev(trajectory.EventTurn, "")}, nil
		})
		if !errors.Is(err, trajectory.ErrInvalidRecord) {
			t.Errorf("%s: Update = %v, want ErrInvalidRecord", tc.name, err)
		}
		same(t, mustGet(t, s, tc.id), before)
		if n := len(mustEvents(t, s, tc.id, 0, 0)); n != 0 {
			t.Errorf("%s: events saved by a refused update", tc.name)
		}
	}
	if _, err := s.Get(ctx, "other"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("renamed record saved: %v", err)
	}
}

func testEventsPaging(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("run-1", "team-a", t0))
	if err := s.AppendEvents(ctx, "run-1"); err != nil {
		t.Fatalf("AppendEvents with no events: %v", err)
	}
	for i := range 25 {
		e := trajectory.Event{
			At: t0.Add(time.Duration(i) * time.Second), Trajectory: "ignored", Type: trajectory.EventTransition,
			From: trajectory.Ready, To: trajectory.CallingModel, Reason: fmt.Sprint("r", i), Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
		}
		if err := s.AppendEvents(ctx, "run-1", e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		after int64
		limit int
		want  []int64
	}{
		{"first page", 0, 10, span(1, 10)},
		{"second page", 10, 10, span(11, 20)},
		{"last page short", 20, 10, span(21, 25)},
		{"past the end", 25, 10, nil},
		{"far past the end", 1000, 10, nil},
		{"default limit", 0, 0, span(1, 25)},
		{"negative limit", 3, -1, span(4, 25)},
		{"one", 7, 1, []int64{8}},
	}
	for _, tc := range tests {
		got := mustEvents(t, s, "run-1", tc.after, tc.limit)
		if !slices.Equal(seqs(got), tc.want) {
			t.Errorf("%s: seqs %v, want %v", tc.name, seqs(got), tc.want)
		}
		for _, e := range got {
			i := e.Seq - 1
			if e.Trajectory != "run-1" || e.Reason != fmt.Sprint("r", i) || string(e.Data) != fmt.Sprintf(`{"i":%d}`, i) ||
				!e.At.Equal(t0.Add(time.Duration(i)*time.Second)) || e.From != trajectory.Ready || e.To != trajectory.CallingModel {
				t.Errorf("%s: event %+v (data %s)", tc.name, e, e.Data)
			}
		}
	}
	if err := s.AppendEvents(ctx, "missing", ev(trajectory.EventTurn, "")); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("AppendEvents missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Events(ctx, "missing", 0, 0); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("Events missing: %v, want ErrNotFound", err)
	}
}

func testEventsLimitBounded(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("run-1", "team-a", t0))
	evs := make([]trajectory.Event, trajectory.MaxListLimit+5)
	for i := range evs {
		evs[i] = ev(trajectory.EventTurn, "")
	}
	if err := s.AppendEvents(ctx, "run-1", evs...); err != nil {
		t.Fatal(err)
	}
	if got := mustEvents(t, s, "run-1", 0, 0); len(got) != trajectory.DefaultListLimit {
		t.Errorf("default page has %d events, want %d", len(got), trajectory.DefaultListLimit)
	}
	got := mustEvents(t, s, "run-1", 0, 10*trajectory.MaxListLimit)
	if !slices.Equal(seqs(got), span(1, trajectory.MaxListLimit)) {
		t.Errorf("oversized page: %d events, want seqs 1..%d", len(got), trajectory.MaxListLimit)
	}
}

func testListFilters(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	type spec struct {
		id, parent, tenant string
		state              trajectory.State
		used               float64
	}
	specs := []spec{
		{"a", "", "team-a", trajectory.Ready, 0.1},
		{"b", "", "team-b", trajectory.WaitingTool, 0.9},
		{"a/1", "a", "team-a", trajectory.WaitingTool, 0.5},
		{"a/2", "a", "team-a", trajectory.Completed, 0.95},
		{"c", "", "team-a", trajectory.Paused, 0},
	}
	for i, sp := range specs { // created in order: later is newer
		r := trajectory.New(sp.id, sp.tenant, t0.Add(time.Duration(i)*time.Minute))
		r.ParentID, r.State, r.BudgetUsed = sp.parent, sp.state, sp.used
		mustCreate(t, s, r)
	}
	root, parentA, nobody := "", "a", "zzz"
	tests := []struct {
		name string
		f    trajectory.Filter
		want []string
	}{
		{"all, newest first", trajectory.Filter{}, []string{"c", "a/2", "a/1", "b", "a"}},
		{"by state", trajectory.Filter{State: trajectory.WaitingTool}, []string{"a/1", "b"}},
		{"terminal state", trajectory.Filter{State: trajectory.Completed}, []string{"a/2"}},
		{"by tenant", trajectory.Filter{Tenant: "team-b"}, []string{"b"}},
		{"by tenants", trajectory.Filter{Tenants: []string{"team-c", "team-b"}}, []string{"b"}},
		{"tenant outside tenants", trajectory.Filter{Tenant: "team-a", Tenants: []string{"team-b"}}, nil},
		{"tenants and state", trajectory.Filter{Tenants: []string{"team-a"}, State: trajectory.WaitingTool}, []string{"a/1"}},
		{"by budget used", trajectory.Filter{MinBudgetUsed: 0.5}, []string{"a/2", "a/1", "b"}},
		{"roots", trajectory.Filter{ParentID: &root}, []string{"c", "b", "a"}},
		{"children of a", trajectory.Filter{ParentID: &parentA}, []string{"a/2", "a/1"}},
		{"children of nobody", trajectory.Filter{ParentID: &nobody}, nil},
		{"combined", trajectory.Filter{Tenant: "team-a", State: trajectory.WaitingTool, MinBudgetUsed: 0.2}, []string{"a/1"}},
		{"limit keeps newest", trajectory.Filter{Limit: 2}, []string{"c", "a/2"}},
		{"no match", trajectory.Filter{Tenant: "team-z"}, nil},
	}
	for _, tc := range tests {
		got, err := s.List(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, ids, tc.want)
		}
	}
	// Listed records are whole: children included.
	got, err := s.List(ctx, trajectory.Filter{Tenant: "team-a", ParentID: &root, State: trajectory.Ready})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !slices.Equal(got[0].Children, []string{"a/1", "a/2"}) {
		t.Errorf("listed record a: %+v", got)
	}
}

func testListLimits(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	n := trajectory.MaxListLimit + 5
	for i := range n {
		mustCreate(t, s, trajectory.New(fmt.Sprintf("run-%04d", i), "team-a", t0.Add(time.Duration(i)*time.Second)))
	}
	tests := []struct {
		name  string
		limit int
		want  int
	}{
		{"default", 0, trajectory.DefaultListLimit},
		{"negative", -1, trajectory.DefaultListLimit},
		{"explicit", 7, 7},
		{"oversized", 10 * trajectory.MaxListLimit, trajectory.MaxListLimit},
	}
	for _, tc := range tests {
		got, err := s.List(ctx, trajectory.Filter{Limit: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tc.want {
			t.Errorf("%s: %d records, want %d", tc.name, len(got), tc.want)
			continue
		}
		if newest := fmt.Sprintf("run-%04d", n-1); got[0].ID != newest {
			t.Errorf("%s: first %s, want %s", tc.name, got[0].ID, newest)
		}
	}
	// Equal creation times still give one stable order.
	mustCreate(t, s, trajectory.New("tie-b", "team-t", t0))
	mustCreate(t, s, trajectory.New("tie-a", "team-t", t0))
	for range 3 {
		got, err := s.List(ctx, trajectory.Filter{Tenant: "team-t"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != "tie-a" || got[1].ID != "tie-b" {
			t.Fatalf("ties: %v, want tie-a then tie-b", got)
		}
	}
}

func testTerminalRoundTrip(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	exits := []struct {
		exit   trajectory.State
		reason string
	}{
		{trajectory.Completed, "finished"},
		{trajectory.Failed, "BUDGET_EXCEEDED"},
		{trajectory.Canceled, "canceled by alice"},
	}
	for _, x := range exits {
		id := "run-" + string(x.exit)
		mustCreate(t, s, full(id))
		at := t0.Add(time.Hour)
		out, err := s.Update(ctx, id, func(r *trajectory.Record) ([]trajectory.Event, error) {
			ts, err := r.Finalize(x.exit, x.reason, at)
			return trajectory.EventsFor(r.ID, ts), err
		})
		if err != nil {
			t.Fatal(err)
		}
		got := mustGet(t, s, id)
		same(t, got, out)
		if got.State != x.exit || got.ExitReason != x.reason || got.Pending.ToolCalls != nil || got.Pending.Control != nil {
			t.Errorf("%s after round trip: %+v", x.exit, got)
		}
		if evs := mustEvents(t, s, id, 0, 0); len(evs) != 2 || evs[1].To != x.exit {
			t.Errorf("%s: events %+v", x.exit, evs)
		}
		_, err = s.Update(ctx, id, func(r *trajectory.Record) ([]trajectory.Event, error) {
			_, err := r.BeginTurn(at.Add(time.Second))
			return nil, err
		})
		if !errors.Is(err, trajectory.ErrTerminal) {
			t.Errorf("%s: turn on a finished record: %v, want ErrTerminal", x.exit, err)
		}
		same(t, mustGet(t, s, id), got)
	}
}

func testJSONFieldNames(t *testing.T, s trajectory.Store) {
	mustCreate(t, s, trajectory.New("root", "team-a", t0))
	r := trajectory.New("root/a", "team-a", t0)
	r.ParentID = "root"
	mustCreate(t, s, r)

	tests := []struct {
		id    string
		nulls []string
		want  map[string]string // key: JSON it must hold
	}{
		{"root", []string{"parent_id", "exit_reason"}, map[string]string{
			"children": `["root/a"]`, "state": `"READY"`, "stage": `"nominal"`,
			"pending": `{"tool_calls":[],"approval_id":null,"control":null}`,
		}},
		{"root/a", []string{"exit_reason"}, map[string]string{"parent_id": `"root"`, "children": `[]`}},
	}
	wantKeys := []string{"binding_dimension", "budget", "budget_used", "children", "created_at", "exit_reason", "id", "last_stop_reason",
		"parent_id", "pending", "spend", "stage", "state", "tenant", "turns", "updated_at"}
	for _, tc := range tests {
		b, err := json.Marshal(mustGet(t, s, tc.id))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("%s: keys %v, want %v", tc.id, keys, wantKeys)
		}
		for _, k := range tc.nulls {
			if string(m[k]) != "null" {
				t.Errorf("%s: %s = %s, want null", tc.id, k, m[k])
			}
		}
		for k, v := range tc.want {
			if string(m[k]) != v {
				t.Errorf("%s: %s = %s, want %s", tc.id, k, m[k], v)
			}
		}
		var spend map[string]json.RawMessage
		if err := json.Unmarshal(m["spend"], &spend); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"turns", "input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "dollars", "wall_clock_s", "estimated"} {
			if _, ok := spend[k]; !ok {
				t.Errorf("%s: spend lacks %s", tc.id, k)
			}
		}
	}
}

func testCanceledContext(t *testing.T, s trajectory.Store) {
	tree(t, s, "run-1", "run-1/a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Get(ctx, "run-1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get: %v, want context.Canceled", err)
	}
	if _, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.Turns = 9
		return nil, nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("Update: %v, want context.Canceled", err)
	}
	if _, err := s.UpdateChain(ctx, "run-1/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		chain[1].Turns = 9
		return nil, nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("UpdateChain: %v, want context.Canceled", err)
	}
	if got := mustGet(t, s, "run-1"); got.Turns != 0 {
		t.Errorf("an update with a canceled context saved turns=%d", got.Turns)
	}
}

func testClosed(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("run-1", "team-a", t0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, trajectory.ErrClosed) {
		t.Errorf("Ping after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Get(ctx, "run-1"); !errors.Is(err, trajectory.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if err := s.Create(ctx, trajectory.New("run-2", "team-a", t0)); !errors.Is(err, trajectory.ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
	if _, err := s.UpdateChain(ctx, "run-1", func([]*trajectory.Record) ([]trajectory.Event, error) {
		t.Error("fn ran on a closed store")
		return nil, nil
	}); !errors.Is(err, trajectory.ErrClosed) {
		t.Errorf("UpdateChain after Close: %v, want ErrClosed", err)
	}
}
