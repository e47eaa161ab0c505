package sweep

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/store/memory"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

type charged struct {
	tenant, call string
	used         tenant.Amount
}

type fixture struct {
	sw      *Sweeper
	store   *memory.Store
	now     time.Time
	mu      sync.Mutex
	charges []charged
}

const beat = 5 * time.Second

func newFixture(t *testing.T, idle time.Duration, limited bool) *fixture {
	t.Helper()
	f := &fixture{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	f.store = memory.New(memory.Options{Clock: f.clock})
	cfg := &config.Config{Tenants: []config.Tenant{{Name: "team-a"}}}
	cfg.Store.Heartbeat = config.Duration(beat)
	cfg.Limits.IdleFinish = config.Duration(idle)
	if limited {
		cfg.Tenants[0].Limits.DollarsPerDay = 10
	}
	f.sw = New(Options{Store: f.store, Config: cfg, Clock: f.clock, Logger: slog.New(slog.DiscardHandler),
		Prices: meter.DefaultTable(), Replica: "r1", Owner: "r1#now",
		Calls:     func() []Call { return nil },
		StaleCall: func(*config.Tenant) time.Duration { return time.Hour },
		Charge: func(_ context.Context, name, call string, used tenant.Amount) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.charges = append(f.charges, charged{name, call, used})
		}})
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// inFlight leaves call in flight on a new root record id, owned by owner,
// with its last beat at lastBeat.
func (f *fixture) inFlight(t *testing.T, id, owner, call string, lastBeat time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := f.store.Create(ctx, trajectory.New(id, "team-a", f.clock().Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	res := trajectory.Reservation{Calls: 1, Tokens: 2000, Micros: 50000}
	if _, err := f.store.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		r := chain[0]
		ts, err := r.BeginTurn(f.clock())
		if err != nil {
			return nil, err
		}
		r.Reserved = r.Reserved.Add(res)
		r.Model, r.Provider = "claude-sonnet-4-5", "anthropic"
		r.Call, r.CallReserved, r.CallOwner, r.CallBeat = call, res, owner, lastBeat
		r.CallInput, r.CallOutput = 1000, 250
		return trajectory.EventsFor(id, ts), nil
	}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) get(t *testing.T, id string) *trajectory.Record {
	t.Helper()
	rec, err := f.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestSilent: a request waits one heartbeat longer than a sweep before
// taking a call for lost; a call that wrote no beat is the requests'
// only, past the stale-call bound.
func TestSilent(t *testing.T) {
	f := newFixture(t, 0, false)
	now := f.clock()
	lost := time.Duration(config.LostBeats) * beat
	rec := func(callBeat time.Time, updated time.Time) *trajectory.Record {
		return &trajectory.Record{State: trajectory.CallingModel, Call: "c1", Tenant: "team-a", CallBeat: callBeat, UpdatedAt: updated}
	}
	tests := []struct {
		name              string
		rec               *trajectory.Record
		sweeping, request bool
	}{
		{"beat just now", rec(now, now), false, false},
		{"silent for the sweep's bound", rec(now.Add(-lost), now), true, false},
		{"silent one beat more", rec(now.Add(-lost-beat), now), true, true},
		{"no beat, recent", rec(time.Time{}, now.Add(-time.Minute)), false, false},
		{"no beat, stale", rec(time.Time{}, now.Add(-time.Hour)), false, true},
		{"not calling", &trajectory.Record{State: trajectory.Ready, Call: "c1", CallBeat: now.Add(-time.Hour)}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.sw.silent(tc.rec, now, true); got != tc.sweeping {
				t.Errorf("silent to a sweep = %v, want %v", got, tc.sweeping)
			}
			if got := f.sw.Silent(tc.rec, now); got != tc.request {
				t.Errorf("silent to a request = %v, want %v", got, tc.request)
			}
		})
	}
}

// TestSweepCalls: a silent call is reclaimed once, charged as estimated
// to the run and to its tenant's ledger, and its record is READY again; a
// call that beat recently is left alone; with own, a call of this
// replica's earlier run is reclaimed however recent its beat, and one of
// this run is not.
func TestSweepCalls(t *testing.T) {
	f := newFixture(t, 0, true)
	ctx := context.Background()
	now := f.clock()
	f.inFlight(t, "silent", "r2#x", "call-silent", now.Add(-time.Hour))
	f.inFlight(t, "alive", "r2#x", "call-alive", now)
	f.inFlight(t, "before", "r1#earlier", "call-before", now)
	f.inFlight(t, "mine", "r1#now", "call-mine", now)

	if n := f.sw.SweepCalls(ctx, false); n != 1 {
		t.Fatalf("first sweep reclaimed %d calls, want 1", n)
	}
	if n := f.sw.SweepCalls(ctx, false); n != 0 {
		t.Fatalf("second sweep reclaimed %d calls, want 0", n)
	}
	r := f.get(t, "silent")
	if r.State != trajectory.Ready || r.Call != "" || r.Reserved != (trajectory.Reservation{}) || r.Spend.OutputTokens != 250 || r.Spend.InputTokens != 1000 {
		t.Errorf("swept record: state %s call %q reserved %+v spend %+v", r.State, r.Call, r.Reserved, r.Spend)
	}
	if a := f.get(t, "alive"); a.State != trajectory.CallingModel {
		t.Errorf("a call that beat was swept: %s", a.State)
	}
	f.mu.Lock()
	if len(f.charges) != 1 || f.charges[0].tenant != "team-a" || f.charges[0].call != "call-silent" || f.charges[0].used.Micros <= 0 || f.charges[0].used.Tokens != 1250 {
		t.Errorf("ledger charges %+v", f.charges)
	}
	f.mu.Unlock()

	if n := f.sw.SweepCalls(ctx, true); n != 1 {
		t.Fatalf("own sweep reclaimed %d calls, want 1 (this replica's earlier run's)", n)
	}
	if b := f.get(t, "before"); b.State != trajectory.Ready {
		t.Errorf("the earlier run's call was not reclaimed: %s", b.State)
	}
	if m := f.get(t, "mine"); m.State != trajectory.CallingModel {
		t.Errorf("this run's own call was reclaimed: %s", m.State)
	}
}

// outage is a store that cannot be reached while it is down: every
// operation of the sweeper fails as Redis's do when it does not answer.
type outage struct {
	trajectory.Store
	mu   sync.Mutex
	down bool
}

var _ trajectory.Store = (*outage)(nil)

func (o *outage) set(down bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = down
}

func (o *outage) err(op string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return fmt.Errorf("%w: %s: dial tcp: connection refused", trajectory.ErrUnavailable, op)
	}
	return nil
}

func (o *outage) Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error) {
	if err := o.err("update"); err != nil {
		return nil, err
	}
	return o.Store.Update(ctx, id, fn)
}

func (o *outage) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	if err := o.err("update chain"); err != nil {
		return nil, err
	}
	return o.Store.UpdateChain(ctx, id, fn)
}

func (o *outage) List(ctx context.Context, f trajectory.Filter) ([]*trajectory.Record, error) {
	if err := o.err("list"); err != nil {
		return nil, err
	}
	return o.Store.List(ctx, f)
}

// TestSweepAfterOutage: a call that beat at T, with the store down from
// T+1s to T+5 beats, is not swept by the sweep right after the store is
// back, but by the one LostBeats beats later: no replica could beat while
// the store was down, so silence counts from when it answered again, be
// it the sweep's list or one of this replica's beats that saw it first. A
// request still takes the call for lost on its plain bound. Without an
// outage the call is swept LostBeats beats after its beat.
func TestSweepAfterOutage(t *testing.T) {
	tests := []struct {
		name    string
		outage  bool
		ownCall bool // this replica beats for a call of its own, so a beat is its first store operation each tick
		sweptAt int  // the beat after T whose sweep charges the call
	}{
		{"no outage", false, false, config.LostBeats},
		{"back by the sweep's list", true, false, 5 + config.LostBeats},
		{"back by a beat", true, true, 5 + config.LostBeats},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 0, true)
			ctx := context.Background()
			st := &outage{Store: f.store}
			f.sw.o.Store = st
			start := f.clock()
			f.inFlight(t, "live", "r2#x", "c1", start)
			if tc.ownCall {
				f.inFlight(t, "mine", "r1#now", "c2", start)
				f.sw.o.Calls = func() []Call { return []Call{{Record: "mine", ID: "c2", Output: 10}} }
			}
			f.advance(time.Second)
			st.set(tc.outage)
			for k := 1; k <= 5+config.LostBeats; k++ {
				f.advance(start.Add(time.Duration(k) * beat).Sub(f.clock()))
				if k == 5 {
					st.set(false)
				}
				f.sw.Beat(ctx)
				n := f.sw.SweepCalls(ctx, false)
				want := 0
				if k == tc.sweptAt {
					want = 1
				}
				if n != want {
					t.Fatalf("sweep at T+%d beats reclaimed %d calls, want %d", k, n, want)
				}
				if tc.outage && k == 5 && !f.sw.Silent(f.get(t, "live"), f.clock()) {
					t.Errorf("a request at T+5 beats does not take the call for lost: its bound is the plain one")
				}
				if k >= tc.sweptAt {
					break
				}
			}
			if r := f.get(t, "live"); r.State != trajectory.Ready || r.Call != "" {
				t.Errorf("the call was not swept: state %s call %q", r.State, r.Call)
			}
			if tc.ownCall {
				if m := f.get(t, "mine"); m.State != trajectory.CallingModel {
					t.Errorf("this replica's own call was swept: %s", m.State)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.charges) != 1 || f.charges[0].call != "c1" {
				t.Errorf("ledger charges %+v, want one for c1", f.charges)
			}
		})
	}
}

// TestAnswered: only an unreachable store marks it down; the first answer
// after that, an error reply included, is when it came back; an error
// once the caller's context ended says nothing; and while the store is
// down a sweep finds no call silent.
func TestAnswered(t *testing.T) {
	unavailable := fmt.Errorf("%w: list: i/o timeout", trajectory.ErrUnavailable)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	type step struct {
		ctx context.Context
		err error
	}
	tests := []struct {
		name  string
		steps []step
		down  bool
		back  bool // backAt is the clock's time
	}{
		{"never down", []step{{context.Background(), nil}}, false, false},
		{"down", []step{{context.Background(), nil}, {context.Background(), unavailable}}, true, false},
		{"back", []step{{context.Background(), unavailable}, {context.Background(), nil}}, false, true},
		{"back by an error reply", []step{{context.Background(), unavailable}, {context.Background(), trajectory.ErrNotFound}}, false, true},
		{"caller gone", []step{{context.Background(), unavailable}, {ended, context.Canceled}}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 0, false)
			for _, st := range tc.steps {
				f.sw.answered(st.ctx, st.err)
			}
			if f.sw.down != tc.down || f.sw.backAt.Equal(f.clock()) != tc.back {
				t.Errorf("down %v back at %v, want down %v and back at the clock's time %v", f.sw.down, f.sw.backAt, tc.down, tc.back)
			}
			rec := &trajectory.Record{State: trajectory.CallingModel, Call: "c1", CallBeat: f.clock().Add(-time.Hour)}
			if got := f.sw.silent(rec, f.clock().Add(time.Hour), true); got == tc.down {
				t.Errorf("silent to a sweep = %v with the store down %v", got, tc.down)
			}
		})
	}
}

// TestBeat: a beat writes the call's time and streamed output; a call
// that settled meanwhile is left alone.
func TestBeat(t *testing.T) {
	f := newFixture(t, 0, false)
	ctx := context.Background()
	f.inFlight(t, "run", "r1#now", "c1", f.clock())
	f.advance(beat)
	f.sw.o.Calls = func() []Call {
		return []Call{{Record: "run", ID: "c1", Output: 777}, {Record: "run", ID: "gone", Output: 1}}
	}
	f.sw.Beat(ctx)
	r := f.get(t, "run")
	if !r.CallBeat.Equal(f.clock()) || r.CallOutput != 777 {
		t.Errorf("after the beat: beat %v output %d, want %v and 777", r.CallBeat, r.CallOutput, f.clock())
	}
}

// TestSweepIdle: a READY run whose last turn ended its task is finished
// once it has been idle for limits.idle_finish, not before.
func TestSweepIdle(t *testing.T) {
	f := newFixture(t, time.Minute, false)
	ctx := context.Background()
	rec := trajectory.New("idle", "team-a", f.clock())
	rec.LastStopReason = "end_turn"
	if err := f.store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if n := f.sw.SweepIdle(ctx); n != 0 {
		t.Fatalf("finished %d runs idle for no time", n)
	}
	f.advance(2 * time.Minute)
	if n := f.sw.SweepIdle(ctx); n != 1 {
		t.Fatalf("finished %d runs, want 1", n)
	}
	if r := f.get(t, "idle"); r.State != trajectory.Completed || r.ExitReason != exitIdle {
		t.Errorf("idle run: %s %q", r.State, r.ExitReason)
	}
}

// TestLoopsEnd: the background loops return when their context ends, and
// the start's sweep is reported done.
func TestLoopsEnd(t *testing.T) {
	f := newFixture(t, time.Minute, false)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.sw.WatchCalls(ctx) }()
	go func() { defer wg.Done(); f.sw.FinishIdle(ctx) }()
	select {
	case <-f.sw.Swept():
	case <-time.After(5 * time.Second):
		t.Fatal("the start's sweep never finished")
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loops did not return after their context ended")
	}
}
