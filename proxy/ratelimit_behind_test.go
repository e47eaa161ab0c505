package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// A flush's key settles ride in its records' pipeline: Close's flush of
// the settles of eight runs on a limited key costs one round trip, as
// without key limits (TestSettleBehindFlushOnePipeline), not one more
// for the keys.
func TestSettleBehindFlushKeySettlesRide(t *testing.T) {
	e := newBehindEnvKeys(t, 5*time.Second, "{turns: 1000, dollars: 100}", "rpm: 6000, input_tpm: 10000000")
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.turn(t, fmt.Sprintf("keyflush-%d", i))
	}
	// Loads the settle script (a first use costs more round trips):
	// gives back one input token, on a bucket that is all but full.
	if err := e.buckets.Settle(ctxT(t), e.key, ratelimit.Cost{Input: -1}, ratelimit.Unreported()); err != nil {
		t.Fatal(err)
	}
	before := e.rt.Load()
	e.close(t)
	if got := e.rt.Load() - before; got != 1 {
		t.Errorf("the flush of %d records' and keys' settles cost %d round trips, want 1", n, got)
	}
	for _, id := range ids {
		if rec := e.record(t, id); rec.Turns != 1 || rec.State != trajectory.Ready || rec.Reserved != (trajectory.Reservation{}) {
			t.Errorf("%s after Close: %d turns, %s, reserved %+v; want its turn settled", id, rec.Turns, rec.State, rec.Reserved)
		}
	}
	// Each turn took its estimate of input tokens and settled what it
	// used: a key left holding the estimates would show the difference.
	h, err := e.buckets.Headroom(ctxT(t), e.key)
	if err != nil {
		t.Fatal(err)
	}
	if h < 0.9 {
		t.Errorf("key headroom %.3f after %d small turns settled on 6000 rpm and 10M input tokens a minute, want above 0.9", h, n)
	}
}
