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
// for the keys. (With exact takes: a slice's leftover, which Close gives
// back, would cost its own.)
func TestSettleBehindFlushKeySettlesRide(t *testing.T) {
	e := newBehindEnvRates(t, 5*time.Second, "{turns: 1000, dollars: 100}", "rpm: 6000, input_tpm: 10000000", "{exact_takes: true}")
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

// An admission that takes its thread's earlier settles carries their key
// settles too, in its one round trip: the key's output-token estimates
// are corrected turn by turn, with no flush. (With exact takes: a slice
// would hold capacity of the key that the headroom counts as taken.)
func TestKeySettlesRideAdmission(t *testing.T) {
	e := newBehindEnvRates(t, 5*time.Second, "{turns: 1000, dollars: 100}",
		"rpm: 60000, rpm_burst: 1000, output_tpm: 60000, output_tpm_burst: 60000", "{exact_takes: true}")
	id := e.turn(t, "keyride")
	e.turn(t, "keyride") // the take and settle scripts are loaded by then
	const n = 8
	before := e.rt.Load()
	for i := 3; i <= n; i++ {
		if got := e.turn(t, "keyride"); got != id {
			t.Fatalf("turn %d went to %s, want %s", i, got, id)
		}
	}
	if got := e.rt.Load() - before; got != n-2 {
		t.Errorf("turns 3..%d cost %d round trips, want %d (one each)", n, got, n-2)
	}
	// Each turn takes max_tokens (1024) of output and uses a few: with the
	// first n-1 settled, about 1024 of 60000 is out; unsettled, n×1024.
	// (The requests' burst stays under the 4000 the mock's headers report
	// left, which would otherwise lower it.)
	h, err := e.buckets.Headroom(ctxT(t), e.key)
	if err != nil {
		t.Fatal(err)
	}
	if h < 0.97 {
		t.Errorf("key headroom %.3f after %d turns of 1024 estimated output tokens on 60000, want above 0.97: the earlier turns' key settles were not sent", h, n)
	}
}
