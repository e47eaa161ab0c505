package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// errBusy is what Admit answers for a record with another call in flight.
var errBusy = errors.New("storetest: another call is in flight")

// Admit returns an UpdateChain function that admits call as the proxy
// does: it reserves res on every record of the chain and puts the thread
// record (chain[0]) in CALLING_MODEL with call in flight. It is idempotent
// by call id: on a chain that already holds call it changes nothing, so an
// admission sent again after its answer was lost admits once. A chain with
// another call in flight is errBusy.
func Admit(call string, res trajectory.Reservation, now time.Time) func([]*trajectory.Record) ([]trajectory.Event, error) {
	return func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		rec := chain[0]
		switch {
		case rec.State == trajectory.CallingModel && rec.Call == call:
			return nil, nil
		case rec.State == trajectory.CallingModel:
			return nil, errBusy
		}
		ts, err := rec.BeginTurn(now)
		if err != nil {
			return nil, err
		}
		for _, r := range chain {
			r.Reserved = r.Reserved.Add(res)
		}
		rec.Call, rec.CallReserved = call, res
		return trajectory.EventsFor(rec.ID, ts), nil
	}
}

// testAdmitTwice applies one admission twice: one reservation, the same
// answer, and no event written the second time; another call is refused.
func testAdmitTwice(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	tree(t, s, "r", "r/a")
	res := trajectory.Reservation{Calls: 1, Tokens: 2000, Micros: 30000}
	at := t0.Add(time.Second)
	first, err := s.UpdateChain(ctx, "r/a", Admit("call-1", res, at))
	if err != nil {
		t.Fatal(err)
	}
	evs := mustEvents(t, s, "r/a", 0, 0)
	again, err := s.UpdateChain(ctx, "r/a", Admit("call-1", res, at.Add(time.Second)))
	if err != nil {
		t.Fatalf("the same admission again: %v", err)
	}
	for i := range first {
		same(t, again[i], first[i])
		if got := again[i].Reserved; got != res {
			t.Errorf("%s reserves %+v after the admission ran twice, want %+v", again[i].ID, got, res)
		}
	}
	if got := mustEvents(t, s, "r/a", 0, 0); len(got) != len(evs) {
		t.Errorf("the admission ran again wrote %d events, want none", len(got)-len(evs))
	}
	if _, err := s.UpdateChain(ctx, "r/a", Admit("call-2", res, at)); !errors.Is(err, errBusy) {
		t.Errorf("another call's admission: %v, want busy", err)
	}
}
