package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/telemetry"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// strand leaves call in flight on record id (created under parent, "" for
// a root) as a replica named owner would, with its last beat at beat, and
// the reservation res on the whole chain.
func (e *env) strand(t *testing.T, id, parent, owner, call string, beat time.Time, res trajectory.Reservation) {
	t.Helper()
	ctx := context.Background()
	rec := trajectory.New(id, "team-a", beat.Add(-time.Minute))
	rec.ParentID = parent
	if err := e.store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		r := chain[0]
		ts, err := r.BeginTurn(beat)
		if err != nil {
			return nil, err
		}
		for _, l := range chain {
			l.Reserved = l.Reserved.Add(res)
		}
		r.Model, r.Provider = "claude-sonnet-4-5", "anthropic"
		r.Call, r.CallReserved, r.CallOwner, r.CallBeat = call, res, owner, beat
		r.CallInput, r.CallOutput = 1000, 250
		return trajectory.EventsFor(id, ts), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestSweeperReclaimsSilentCalls: a call whose replica stopped beating is
// reclaimed wherever it is in the tree (a sibling thread here), charged as
// estimated from its input estimate and the output of its last beat, with
// an event, and its reservation goes back on the whole chain. A second
// sweep, as another replica's, finds nothing: charged once. A call that
// beat recently is left alone.
func TestSweeperReclaimsSilentCalls(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.px.StartSwept()
	ctx := context.Background()
	res := trajectory.Reservation{Calls: 1, Tokens: 9000, Micros: 120000}
	now := e.clk.Now()
	root := trajectory.New("swept", "team-a", now.Add(-time.Hour))
	if err := e.store.Create(ctx, root); err != nil {
		t.Fatal(err)
	}
	e.strand(t, "swept/~2", "swept", "replica-gone", "call-lost", now.Add(-time.Hour), res)
	e.strand(t, "swept/~3", "swept", "replica-alive", "call-alive", now.Add(time.Hour), res)

	if n := e.px.SweepCalls(ctx, false); n != 1 {
		t.Fatalf("first sweep reclaimed %d calls, want 1", n)
	}
	if n := e.px.SweepCalls(ctx, false); n != 0 {
		t.Fatalf("second sweep reclaimed %d calls, want 0", n)
	}
	lost := e.record(t, "swept/~2")
	if lost.State != trajectory.Ready || lost.Call != "" || lost.Reserved != (trajectory.Reservation{}) || lost.Turns != 1 ||
		lost.Spend.InputTokens != 1000 || lost.Spend.OutputTokens != 250 || !lost.Spend.Estimated || lost.Spend.Dollars <= 0 {
		t.Errorf("swept record: %s call %q reserved %+v turns %d spend %+v", lost.State, lost.Call, lost.Reserved, lost.Turns, lost.Spend)
	}
	if r := e.record(t, "swept"); r.Reserved != res || r.Spend.Turns != 1 || r.Spend.OutputTokens != 250 {
		t.Errorf("root: reserved %+v (the live call's alone), spend %+v", r.Reserved, r.Spend)
	}
	if alive := e.record(t, "swept/~3"); alive.State != trajectory.CallingModel || alive.Call != "call-alive" {
		t.Errorf("a beating call was swept: %s %q", alive.State, alive.Call)
	}
	found := 0
	for _, ev := range e.events(t, "swept/~2") {
		if ev.Type == trajectory.EventTurn && strings.Contains(string(ev.Data), `"call":"call-lost"`) &&
			strings.Contains(string(ev.Data), `"estimated":true`) {
			found++
		}
	}
	if found != 1 {
		t.Errorf("%d estimated turn events for the swept call, want 1", found)
	}
}

// TestSweeperReclaimsOwnCallsAtStart: a replica that restarts reclaims the
// calls an earlier run of it left in flight, however recent their last
// beat, and none it admitted itself.
func TestSweeperReclaimsOwnCallsAtStart(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.px.StartSwept()
	ctx := context.Background()
	res := trajectory.Reservation{Calls: 1, Tokens: 9000, Micros: 120000}
	e.strand(t, "restarted", "", e.px.Replica()+"#an-earlier-run", "call-before", e.clk.Now(), res)
	e.strand(t, "this-run", "", e.px.Owner(), "call-now", e.clk.Now(), res)
	e.strand(t, "other", "", "replica-other", "call-other", e.clk.Now(), res)
	if n := e.px.SweepCalls(ctx, true); n != 1 {
		t.Fatalf("start sweep reclaimed %d calls, want 1", n)
	}
	if r := e.record(t, "restarted"); r.State != trajectory.Ready || r.Reserved != (trajectory.Reservation{}) || r.Turns != 1 || !r.Spend.Estimated {
		t.Errorf("own call not reclaimed and charged: %s reserved %+v turns %d spend %+v", r.State, r.Reserved, r.Turns, r.Spend)
	}
	if r := e.record(t, "other"); r.State != trajectory.CallingModel {
		t.Errorf("another replica's recent call was reclaimed: %s", r.State)
	}
	if r := e.record(t, "this-run"); r.State != trajectory.CallingModel {
		t.Errorf("a call this run admitted was reclaimed as left behind: %s", r.State)
	}
}

// TestSweptCallChargedToTenant: a swept call of a tenant with spend
// ceilings is charged to the tenant's ledger under the call's id, as its
// own settle would have been, and its reservation there is released; a
// settle from its replica coming after all changes nothing.
func TestSweptCallChargedToTenant(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: "    limits: {dollars_per_day: 5}"})
	e.px.StartSwept()
	ctx := context.Background()
	lim := tenant.Limits{MicrosPerDay: 5_000_000}
	if ok, err := e.ledger.Reserve(ctx, "team-a", "call-lost", tenant.Amount{Micros: 120000, Tokens: 9000}, lim, time.Hour); err != nil || !ok {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	e.strand(t, "swept-tenant", "", "replica-gone", "call-lost", e.clk.Now().Add(-time.Hour), trajectory.Reservation{Calls: 1, Tokens: 9000, Micros: 120000})
	if n := e.px.SweepCalls(ctx, false); n != 1 {
		t.Fatalf("sweep reclaimed %d calls, want 1", n)
	}
	rec := e.record(t, "swept-tenant")
	want := meter.DefaultTable().Cost("claude-sonnet-4-5", trajectory.Usage{InputTokens: 1000, OutputTokens: 250}).Micros
	u, err := e.ledger.Usage(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if u.InFlight != 0 || u.Reserved != (tenant.Amount{}) || u.Day().Micros != want || u.Day().Tokens != 1250 || want <= 0 {
		t.Errorf("tenant after the sweep: %d in flight holding %+v, day %+v; want %d µ$ and 1250 tokens (record: $%v)",
			u.InFlight, u.Reserved, u.Day(), want, rec.Spend.Dollars)
	}
	if err := e.ledger.Settle(ctx, "team-a", "call-lost", tenant.Amount{Micros: 999, Tokens: 1}); err != nil {
		t.Fatal(err)
	}
	if again, _ := e.ledger.Usage(ctx, "team-a"); again.Day() != u.Day() {
		t.Errorf("a late settle of the swept call charged the tenant again: %+v → %+v", u.Day(), again.Day())
	}
}

// A call silent for just the sweeper's bound is left to the sweeps, which
// charge it as estimated: a request on its thread meanwhile forks a
// sibling instead of reclaiming it uncharged (a crashed replica's reply,
// which would charge it, never comes).
func TestSweepBeforeRequestReclaims(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.px.StartSwept()
	ctx := context.Background()
	res := trajectory.Reservation{Calls: 1, Tokens: 9000, Micros: 120000}
	lostAfter := config.LostBeats * config.DefaultHeartbeat
	e.strand(t, "gap", "", "replica-crashed", "call-cut", e.clk.Now().Add(-lostAfter), res)

	resp := e.do(t, "POST", "/t/gap/anthropic/v1/messages", anthropicReq(false, "go on"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("request on the thread: %d %s", resp.StatusCode, b)
	}
	if rec := e.record(t, "gap"); rec.State != trajectory.CallingModel || rec.Call != "call-cut" || len(rec.LostCalls) != 0 {
		t.Fatalf("the request reclaimed the silent call: %s call %q lost %v", rec.State, rec.Call, rec.LostCalls)
	}
	if n := e.px.SweepCalls(ctx, false); n != 1 {
		t.Fatalf("sweep reclaimed %d calls, want 1", n)
	}
	// The record's spend also rolls up its sibling's turn.
	if rec := e.record(t, "gap"); rec.State != trajectory.Ready || rec.Turns != 1 || !rec.Spend.Estimated {
		t.Errorf("swept record: %s turns %d spend %+v; want READY, charged as estimated", rec.State, rec.Turns, rec.Spend)
	}
	found := 0
	for _, ev := range e.events(t, "gap") {
		if ev.Type == trajectory.EventTurn && strings.Contains(string(ev.Data), `"call":"call-cut"`) &&
			strings.Contains(string(ev.Data), `"estimated":true`) && strings.Contains(string(ev.Data), `"output_tokens":250`) {
			found++
		}
	}
	if found != 1 {
		t.Errorf("%d estimated turn events for the silent call, want 1", found)
	}
}

// TestSweptCallsCounted: each call a sweep reclaims and charges is counted
// in gatekeeper_swept_calls_total, once; the counter is there at 0 before.
func TestSweptCallsCounted(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	e := newEnv(t, envOpts{tel: tel})
	e.px.StartSwept()
	ctx := context.Background()
	if n := scrapeCounter(t, tel, "gatekeeper_swept_calls_total", nil); n != 0 {
		t.Fatalf("swept calls before any sweep: %v", n)
	}
	now := e.clk.Now()
	res := trajectory.Reservation{Calls: 1, Tokens: 9000, Micros: 120000}
	e.strand(t, "lost-a", "", "replica-gone", "call-a", now.Add(-time.Hour), res)
	e.strand(t, "lost-b", "", "replica-gone", "call-b", now.Add(-time.Hour), res)
	e.strand(t, "alive", "", "replica-alive", "call-c", now.Add(time.Hour), res)
	if n := e.px.SweepCalls(ctx, false); n != 2 {
		t.Fatalf("sweep reclaimed %d calls, want 2", n)
	}
	e.px.SweepCalls(ctx, false)
	if n := scrapeCounter(t, tel, "gatekeeper_swept_calls_total", nil); n != 2 {
		t.Errorf("gatekeeper_swept_calls_total = %v after two sweeps of two lost calls, want 2", n)
	}
}
