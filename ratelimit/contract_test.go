package ratelimit

import (
	"context"
	"math"
	"testing"
	"time"
)

// harness is a Buckets under test and a way to let time pass for it: a
// fake clock for Memory, a real (short) sleep for Redis, whose scripts
// read the server's clock.
type harness struct {
	b       Buckets
	advance func(d time.Duration)
	// tat is dimension d's theoretical arrival time for k, in nanoseconds
	// after an origin fixed for the harness, read from where the buckets
	// keep it: a take's exact size, which the level at a moving now
	// cannot show at high rates.
	tat func(t *testing.T, k Key, d int) float64
}

// The contract keeps its limits at 60 a minute or less (one unit a second
// at most) and counts takes of 10 units from exact levels (a full bucket,
// or a known amount taken from one), so that the real time a Redis run
// takes, even on a loaded machine, cannot refill a whole take mid-check.
var contract = []struct {
	name string
	fn   func(t *testing.T, h harness)
}{
	{"RequestsPerMinute", testRequestsPerMinute},
	{"TokensPerMinute", testTokensPerMinute},
	{"AllOrNothing", testAllOrNothing},
	{"Refill", testRefill},
	{"AdjustPositive", testAdjustPositive},
	{"AdjustNegative", testAdjustNegative},
	{"Cool", testCool},
	{"Sync", testSync},
	{"SyncCombinedTokens", testSyncCombinedTokens},
	{"SettleIsAdjustThenSync", testSettleIsAdjustThenSync},
	{"SettleUnlimited", testSettleUnlimited},
	{"Headroom", testHeadroom},
	{"Unlimited", testUnlimited},
	{"Oversize", testOversize},
	{"KeysIndependent", testKeysIndependent},
	{"DefaultBurst", testDefaultBurst},
	{"DefaultBurstOversize", testDefaultBurstOversize},
	{"ConfiguredBurst", testConfiguredBurst},
	{"Reset", testReset},
	{"ResetCombinedTokens", testResetCombinedTokens},
	{"Advisory", testAdvisory},
	{"TinyTakes", testTinyTakes},
	{"TakeBatch", testTakeBatch},
}

// runContract runs the Buckets contract on the buckets mk makes; each
// subtest gets its own.
func runContract(t *testing.T, mk func(t *testing.T) harness) {
	for _, tc := range contract {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, mk(t)) })
	}
}

// minute is l with bursts of a whole minute of each limit. The contract's
// levels are counted in takes of 10 units from buckets holding a minute,
// which the real time a Redis run takes cannot refill mid-check; the
// default bursts (one second) are checked by their own tests.
func minute(l Limits) Limits {
	l.RPMBurst, l.InputBurst, l.OutputBurst = l.RPM, l.InputTPM, l.OutputTPM
	return l
}

func mustTake(t *testing.T, b Buckets, k Key, c Cost) (bool, time.Duration) {
	t.Helper()
	ok, wait, err := b.Take(context.Background(), k, c)
	if err != nil {
		t.Fatalf("Take(%s, %+v): %v", k.ID, c, err)
	}
	if ok && wait != 0 {
		t.Fatalf("Take(%s, %+v) admitted with wait %s", k.ID, c, wait)
	}
	if !ok && (wait < minTakeWait || wait > MaxTakeWait) {
		t.Fatalf("Take(%s, %+v) refused with wait %s, outside [%s, %s]", k.ID, c, wait, minTakeWait, MaxTakeWait)
	}
	return ok, wait
}

// takeAll takes c until refused, at most limit+1 times, and returns how
// many were admitted.
func takeAll(t *testing.T, b Buckets, k Key, c Cost, limit int) int {
	t.Helper()
	for n := 0; n <= limit; n++ {
		if ok, _ := mustTake(t, b, k, c); !ok {
			return n
		}
	}
	t.Fatalf("Take(%s, %+v) admitted more than %d times", k.ID, c, limit)
	return 0
}

func headroom(t *testing.T, b Buckets, k Key) float64 {
	t.Helper()
	h, err := b.Headroom(context.Background(), k)
	if err != nil {
		t.Fatalf("Headroom(%s): %v", k.ID, err)
	}
	if h < 0 || h > 1 {
		t.Fatalf("Headroom(%s) = %v, outside [0, 1]", k.ID, h)
	}
	return h
}

func testRequestsPerMinute(t *testing.T, h harness) {
	k := Key{ID: "p/rpm", Limits: minute(Limits{RPM: 60})}
	if n := takeAll(t, h.b, k, Cost{Requests: 10, Input: 1000}, 6); n != 6 {
		t.Fatalf("a full bucket of 60 rpm admitted %d takes of 10 requests, want 6", n)
	}
	_, wait := mustTake(t, h.b, k, Cost{Requests: 10})
	if wait < 5*time.Second || wait > 10*time.Second+100*time.Millisecond {
		t.Fatalf("the next 10 requests wait %s; 10 come back in 10s", wait)
	}
}

func testTokensPerMinute(t *testing.T, h harness) {
	k := Key{ID: "p/tpm", Limits: minute(Limits{InputTPM: 60, OutputTPM: 30})}
	if n := takeAll(t, h.b, k, Cost{Requests: 1, Input: 10}, 6); n != 6 {
		t.Fatalf("60 input tokens a minute admitted %d turns of 10, want 6", n)
	}
	if n := takeAll(t, h.b, k, Cost{Requests: 1, Output: 10}, 3); n != 3 {
		t.Fatalf("30 output tokens a minute admitted %d turns of 10, want 3", n)
	}
	_, wait := mustTake(t, h.b, k, Cost{Input: 10})
	if wait < 5*time.Second || wait > 10*time.Second+100*time.Millisecond {
		t.Fatalf("10 input tokens on an empty 60/min bucket wait %s, want about 10s", wait)
	}
}

func testAllOrNothing(t *testing.T, h harness) {
	k := Key{ID: "p/all", Limits: minute(Limits{RPM: 10, InputTPM: 60, OutputTPM: 60})}
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1, Input: 55, Output: 5}); !ok {
		t.Fatal("first take refused")
	}
	// Input has 5 left: this take must take neither the request nor
	// the output tokens.
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1, Input: 10, Output: 50}); ok {
		t.Fatal("a take over the input limit was admitted")
	}
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 9, Output: 55}); !ok {
		t.Fatal("a refused take kept some of the requests or output tokens it asked for")
	}
	if ok, _ := mustTake(t, h.b, k, Cost{Input: 5}); !ok {
		t.Fatal("a refused take kept some input tokens")
	}
}

func testRefill(t *testing.T, h harness) {
	k := Key{ID: "p/refill", Limits: minute(Limits{RPM: 600})}
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 600}); !ok {
		t.Fatal("could not empty the bucket")
	}
	h.advance(3 * time.Second)
	// 30 came back (3 takes of 10); a Redis run on a loaded machine
	// may see up to 20 more while it checks.
	if n := takeAll(t, h.b, k, Cost{Requests: 10}, 60); n < 3 || n > 5 {
		t.Fatalf("3s after emptying a 600 rpm bucket, %d takes of 10 fit, want 3", n)
	}
}

func testAdjustPositive(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/adj+", Limits: minute(Limits{InputTPM: 60})}
	if ok, _ := mustTake(t, h.b, k, Cost{Input: 20}); !ok {
		t.Fatal("take refused")
	}
	if err := adjustOnly(ctx, h.b, k, Cost{Input: 30}); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 1 {
		t.Fatalf("after taking 20 and adjusting by +30, %d takes of 10 fit, want 1", n)
	}
}

func testAdjustNegative(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/adj-", Limits: minute(Limits{RPM: 60, InputTPM: 60})}
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1, Input: 50}); !ok {
		t.Fatal("take refused")
	}
	if err := adjustOnly(ctx, h.b, k, Cost{Input: -30}); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 4 {
		t.Fatalf("after taking 50 and adjusting by -30, %d takes of 10 fit, want 4", n)
	}
	// Giving back more than was taken fills the bucket, never more.
	if err := adjustOnly(ctx, h.b, k, Cost{Requests: -500, Input: -500}); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 6 {
		t.Fatalf("after giving back 500 to a 60/min bucket, %d takes of 10 fit, want 6", n)
	}
	if n := takeAll(t, h.b, k, Cost{Requests: 10}, 6); n != 6 {
		t.Fatalf("after giving back 500 requests to a 60 rpm bucket with one taken, %d takes of 10 fit, want 6", n)
	}
}

func testCool(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/cool", Limits: minute(Limits{RPM: 60})}
	if err := h.b.Cool(ctx, k, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	ok, wait := mustTake(t, h.b, k, Cost{Requests: 1})
	if ok || wait > 2*time.Second+time.Millisecond {
		t.Fatalf("a cooled key: Take = %v, wait %s; want refused, wait at most 2s", ok, wait)
	}
	if hr := headroom(t, h.b, k); hr != 0 {
		t.Fatalf("a cooled key has headroom %v, want 0", hr)
	}
	// A shorter cooling does not shorten the one in force.
	if err := h.b.Cool(ctx, k, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	h.advance(500 * time.Millisecond)
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1}); ok {
		t.Fatal("a shorter Cool ended the cooling in force")
	}
	h.advance(1600 * time.Millisecond)
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1}); !ok {
		t.Fatal("the key is still cooled after its cooling passed")
	}
	if hr := headroom(t, h.b, k); hr < 0.9 {
		t.Fatalf("after the cooling, headroom %v; the bucket was full", hr)
	}
}

func testSync(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/sync", Limits: minute(Limits{RPM: 60, InputTPM: 60})}
	if err := syncOnly(ctx, h.b, k, Remaining{Requests: 50, Input: -1, Output: -1, Tokens: -1}); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Requests: 10}, 6); n != 5 {
		t.Fatalf("after the provider said 50 requests are left, %d takes of 10 fit, want 5", n)
	}
	// Input was not reported: untouched.
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 6 {
		t.Fatalf("an unreported dimension changed: %d takes of 10 of 60 input tokens fit", n)
	}
	// A provider saying more is left never raises the view.
	k2 := Key{ID: "p/sync2", Limits: minute(Limits{RPM: 60})}
	mustTake(t, h.b, k2, Cost{Requests: 50})
	if err := syncOnly(ctx, h.b, k2, Remaining{Requests: 60, Input: -1, Output: -1, Tokens: -1}); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k2, Cost{Requests: 10}, 6); n != 1 {
		t.Fatalf("after taking 50 and a provider saying 60 are left, %d takes of 10 fit, want 1", n)
	}
}

func testSyncCombinedTokens(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/synctok", Limits: minute(Limits{InputTPM: 60, OutputTPM: 60})}
	if err := syncOnly(ctx, h.b, k, Remaining{Requests: -1, Input: 40, Output: -1, Tokens: 30}); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 3 {
		t.Fatalf("tokens-remaining 30 left %d takes of 10 input tokens, want 3", n)
	}
	if n := takeAll(t, h.b, k, Cost{Output: 10}, 6); n != 3 {
		t.Fatalf("tokens-remaining 30 left %d takes of 10 output tokens, want 3", n)
	}
}

func testHeadroom(t *testing.T, h harness) {
	k := Key{ID: "p/head", Limits: minute(Limits{RPM: 60, InputTPM: 60})}
	if hr := headroom(t, h.b, k); hr < 0.999 {
		t.Fatalf("a new key has headroom %v, want 1", hr)
	}
	mustTake(t, h.b, k, Cost{Requests: 15, Input: 45})
	// The tightest dimension is input, 15 of 60 left.
	if hr := headroom(t, h.b, k); hr < 0.24 || hr > 0.3 {
		t.Fatalf("headroom %v, want 0.25 (the tightest dimension)", hr)
	}
	mustTake(t, h.b, k, Cost{Input: 60}) // refused: nothing changes
	if hr := headroom(t, h.b, k); hr < 0.24 || hr > 0.3 {
		t.Fatalf("a refused take changed headroom to %v", hr)
	}
}

func testUnlimited(t *testing.T, h harness) {
	k := Key{ID: "p/free"}
	for i := range 100 {
		if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1000, Input: 1e9, Output: 1e9}); !ok {
			t.Fatalf("a key without limits refused take %d", i)
		}
	}
	if hr := headroom(t, h.b, k); hr != 1 {
		t.Fatalf("a key without limits has headroom %v, want 1", hr)
	}
}

func testOversize(t *testing.T, h harness) {
	k := Key{ID: "p/big", Limits: minute(Limits{InputTPM: 60})}
	mustTake(t, h.b, k, Cost{Input: 1})
	// 150 tokens exceed the whole burst of 60: they wait for a full
	// bucket, not forever.
	ok, wait := mustTake(t, h.b, k, Cost{Input: 150})
	if ok || wait > time.Second+100*time.Millisecond {
		t.Fatalf("oversized take on a bucket one short of full: ok %v, wait %s; want refused, about 1s", ok, wait)
	}
	h.advance(1100 * time.Millisecond)
	if ok, _ := mustTake(t, h.b, k, Cost{Input: 150}); !ok {
		t.Fatal("an oversized take was refused on a full bucket")
	}
	// It overdrew the bucket by 90: the next token waits about 91s,
	// reported as MaxTakeWait.
	if _, wait := mustTake(t, h.b, k, Cost{Input: 1}); wait != MaxTakeWait {
		t.Fatalf("after an overdraw of 90 at 1/s, a take waits %s, want %s", wait, MaxTakeWait)
	}
	if hr := headroom(t, h.b, k); hr != 0 {
		t.Fatalf("an overdrawn key has headroom %v, want 0", hr)
	}
}

func testKeysIndependent(t *testing.T, h harness) {
	a := Key{ID: "p/a", Limits: minute(Limits{RPM: 60})}
	b := Key{ID: "p/b", Limits: minute(Limits{RPM: 60})}
	mustTake(t, h.b, a, Cost{Requests: 60})
	if n := takeAll(t, h.b, b, Cost{Requests: 10}, 6); n != 6 {
		t.Fatalf("emptying key a left %d takes of 10 of 60 on key b", n)
	}
}

// testSettleIsAdjustThenSync checks that Settle leaves a key as a Settle
// that only corrects and then one that only syncs leave another. The cases
// with headers are chosen so that the other order (sync, then correct)
// would leave a different count.
func testSettleIsAdjustThenSync(t *testing.T, h harness) {
	ctx := context.Background()
	none := Unreported()
	left := func(tweak func(r *Remaining)) Remaining {
		r := Unreported()
		tweak(&r)
		return r
	}
	lim := minute(Limits{RPM: 60, InputTPM: 60, OutputTPM: 60})
	tests := []struct {
		name  string
		take  Cost
		delta Cost
		r     Remaining
		probe Cost // taken until refused
		want  int
	}{
		// 50 taken, 30 given back: 40 left, then the provider's 35.
		// Synced first, 10 left would stay and the give-back make 40.
		{"GiveBackThenLower", Cost{Input: 50}, Cost{Input: -30}, left(func(r *Remaining) { r.Input = 35 }), Cost{Input: 10}, 3},
		// 20 taken, 30 more measured: 10 left, above which the
		// provider's 30 changes nothing. Synced first, 30 and then the
		// correction would leave 0.
		{"TakeMoreThenNoLower", Cost{Input: 20}, Cost{Input: 30}, left(func(r *Remaining) { r.Input = 30 }), Cost{Input: 10}, 1},
		// A combined token count caps output too.
		{"CombinedTokens", Cost{Output: 40}, Cost{Output: -30}, left(func(r *Remaining) { r.Tokens = 25 }), Cost{Output: 10}, 2},
		{"Requests", Cost{Requests: 10}, Cost{Requests: -10}, left(func(r *Remaining) { r.Requests = 40 }), Cost{Requests: 10}, 4},
		// Without headers Settle only corrects.
		{"NoHeaders", Cost{Input: 50}, Cost{Input: -30}, none, Cost{Input: 10}, 4},
		{"NoHeadersTakeMore", Cost{Output: 10}, Cost{Output: 20}, none, Cost{Output: 10}, 3},
		// Without a correction Settle only syncs.
		{"NoCorrection", Cost{Input: 10}, Cost{}, left(func(r *Remaining) { r.Input = 20 }), Cost{Input: 10}, 2},
		{"Nothing", Cost{Input: 10}, Cost{}, none, Cost{Input: 10}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			steps := Key{ID: "p/settle-steps-" + tc.name, Limits: lim}
			one := Key{ID: "p/settle-one-" + tc.name, Limits: lim}
			for _, k := range []Key{steps, one} {
				if ok, _ := mustTake(t, h.b, k, tc.take); !ok {
					t.Fatalf("Take(%s, %+v) refused on a full key", k.ID, tc.take)
				}
			}
			if err := adjustOnly(ctx, h.b, steps, tc.delta); err != nil {
				t.Fatal(err)
			}
			if err := syncOnly(ctx, h.b, steps, tc.r); err != nil {
				t.Fatal(err)
			}
			if err := h.b.Settle(ctx, one, tc.delta, tc.r); err != nil {
				t.Fatal(err)
			}
			got := takeAll(t, h.b, one, tc.probe, 6)
			if want := takeAll(t, h.b, steps, tc.probe, 6); got != want {
				t.Fatalf("after Settle, %d takes of %+v fit; after a correction and then a sync, %d", got, tc.probe, want)
			}
			if got != tc.want {
				t.Fatalf("after Settle, %d takes of %+v fit, want %d", got, tc.probe, tc.want)
			}
		})
	}
}

// testSettleUnlimited checks that Settle leaves a key without limits
// without limits.
func testSettleUnlimited(t *testing.T, h harness) {
	k := Key{ID: "p/settle-free"}
	r := Remaining{Requests: 0, Input: 0, Output: 0, Tokens: 0}
	if err := h.b.Settle(context.Background(), k, Cost{Requests: 1000, Input: 1e9}, r); err != nil {
		t.Fatal(err)
	}
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1000, Input: 1e9, Output: 1e9}); !ok {
		t.Fatal("a key without limits refused a take after Settle")
	}
}

// adjustOnly is a Settle that only corrects: by delta, syncing nothing.
func adjustOnly(ctx context.Context, b Buckets, k Key, delta Cost) error {
	return b.Settle(ctx, k, delta, Unreported())
}

// syncOnly is a Settle that only syncs: to r, correcting nothing.
func syncOnly(ctx context.Context, b Buckets, k Key, r Remaining) error {
	return b.Settle(ctx, k, Cost{}, r)
}

// testDefaultBurst: a key's bucket holds one second of its rate, not a
// minute: 60 rpm admits one request and then waits about a second, 600
// input tokens a minute admit 10.
func testDefaultBurst(t *testing.T, h harness) {
	k := Key{ID: "p/burst", Limits: Limits{RPM: 60, InputTPM: 600}}
	if n := takeAll(t, h.b, k, Cost{Requests: 1, Input: 10}, 60); n != 1 {
		t.Fatalf("a full 60 rpm bucket admitted %d requests at once, want 1 (one second of the rate)", n)
	}
	_, wait := mustTake(t, h.b, k, Cost{Requests: 1})
	if wait < 900*time.Millisecond || wait > time.Second+100*time.Millisecond {
		t.Fatalf("the next request waits %s, want about 1s", wait)
	}
	in := Key{ID: "p/burst-in", Limits: Limits{InputTPM: 600}}
	if n := takeAll(t, h.b, in, Cost{Input: 1}, 600); n < 10 || n > 11 {
		t.Fatalf("a full bucket of 600 input tokens a minute admitted %d tokens at once, want 10", n)
	}
	if hr := headroom(t, h.b, in); hr > 0.1 {
		t.Fatalf("after its burst, headroom %v, want about 0", hr)
	}
}

// testDefaultBurstOversize: a call larger than the one-second burst is
// never impossible: it is admitted on a full bucket and overdraws it.
func testDefaultBurstOversize(t *testing.T, h harness) {
	k := Key{ID: "p/burst-big", Limits: Limits{InputTPM: 600}} // burst 10
	if ok, _ := mustTake(t, h.b, k, Cost{Input: 50}); !ok {
		t.Fatal("a call of 50 tokens on a full bucket of 10 was refused")
	}
	// 40 overdrawn at 10 a second: the next token waits about 4.1s.
	_, wait := mustTake(t, h.b, k, Cost{Input: 1})
	if wait < 3900*time.Millisecond || wait > 4200*time.Millisecond {
		t.Fatalf("after overdrawing by 40 at 10/s, a token waits %s, want about 4.1s", wait)
	}
}

// testConfiguredBurst: a configured burst replaces the default.
func testConfiguredBurst(t *testing.T, h harness) {
	k := Key{ID: "p/burst-set", Limits: Limits{RPM: 60, RPMBurst: 5, InputTPM: 600, InputBurst: 30}}
	if n := takeAll(t, h.b, k, Cost{Requests: 1}, 60); n != 5 {
		t.Fatalf("rpm_burst 5 admitted %d requests at once", n)
	}
	in := Key{ID: "p/burst-set-in", Limits: Limits{InputTPM: 60, InputBurst: 30}}
	if n := takeAll(t, h.b, in, Cost{Input: 10}, 60); n != 3 {
		t.Fatalf("input burst 30 admitted %d takes of 10 at once, want 3", n)
	}
}

// testReset: a provider's reset lowers what is left to what a bucket full
// only then holds, and never raises it.
func testReset(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/reset", Limits: minute(Limits{RPM: 60, InputTPM: 60})}
	r := Unreported()
	r.RequestsReset = 30 * time.Second // 30 of 60 missing
	if err := syncOnly(ctx, h.b, k, r); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Requests: 10}, 6); n != 3 {
		t.Fatalf("after the provider said its bucket is full in 30s, %d takes of 10 of 60 rpm fit, want 3", n)
	}
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 6 {
		t.Fatalf("a dimension without a reset changed: %d takes of 10 of 60 input tokens fit", n)
	}
	// A reset beside a count of some left is not read: the count says
	// what the provider has now.
	k3 := Key{ID: "p/reset3", Limits: minute(Limits{RPM: 60})}
	r = Unreported()
	r.Requests, r.RequestsReset = 55, 59*time.Second
	if err := syncOnly(ctx, h.b, k3, r); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k3, Cost{Requests: 5}, 12); n != 11 {
		t.Fatalf("after a provider said 55 are left, full in 59s, %d takes of 5 fit, want 11 (its count)", n)
	}
	// Beside a count of nothing left, it is: the default bucket (one
	// request) waits for the reset, not for one request's refill.
	k4 := Key{ID: "p/reset4", Limits: Limits{RPM: 60}}
	r.Requests, r.RequestsReset = 0, 30*time.Second
	if err := syncOnly(ctx, h.b, k4, r); err != nil {
		t.Fatal(err)
	}
	if ok, wait := mustTake(t, h.b, k4, Cost{Requests: 1}); ok || wait < 29*time.Second {
		t.Fatalf("after a provider said nothing is left, full in 30s: Take = %v, wait %s; want refused for about 30s", ok, wait)
	}
	// A reset sooner than gatekeeper's own view changes nothing.
	k2 := Key{ID: "p/reset2", Limits: minute(Limits{RPM: 60})}
	mustTake(t, h.b, k2, Cost{Requests: 50})
	r = Unreported()
	r.RequestsReset = time.Second
	if err := syncOnly(ctx, h.b, k2, r); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k2, Cost{Requests: 10}, 6); n != 1 {
		t.Fatalf("after taking 50 and a reset in 1s, %d takes of 10 fit, want 1", n)
	}
}

// testResetCombinedTokens: a combined token reset lowers input and output.
func testResetCombinedTokens(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/reset-tok", Limits: minute(Limits{InputTPM: 60, OutputTPM: 120})}
	r := Unreported()
	r.TokensReset = 40 * time.Second // input: 40 missing; output: 80 missing
	if err := syncOnly(ctx, h.b, k, r); err != nil {
		t.Fatal(err)
	}
	if n := takeAll(t, h.b, k, Cost{Input: 10}, 6); n != 2 {
		t.Fatalf("tokens reset in 40s left %d takes of 10 input tokens of 60, want 2", n)
	}
	if n := takeAll(t, h.b, k, Cost{Output: 10}, 12); n != 4 {
		t.Fatalf("tokens reset in 40s left %d takes of 10 output tokens of 120, want 4", n)
	}
}

// testAdvisory: a key with advisory limits never refuses for them, but
// what it takes, its headers and a cooling lower its headroom.
func testAdvisory(t *testing.T, h harness) {
	ctx := context.Background()
	k := Key{ID: "p/advisory", Limits: minute(Limits{RPM: 60}), Advisory: true}
	for i := range 100 {
		if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1}); !ok {
			t.Fatalf("an advisory key of 60 rpm refused take %d", i)
		}
	}
	if hr := headroom(t, h.b, k); hr != 0 {
		t.Fatalf("an advisory key past its limits has headroom %v, want 0", hr)
	}
	k2 := Key{ID: "p/advisory2", Limits: minute(Limits{RPM: 60}), Advisory: true}
	mustTake(t, h.b, k2, Cost{Requests: 15})
	if hr := headroom(t, h.b, k2); hr < 0.74 || hr > 0.77 {
		t.Fatalf("an advisory key with 15 of 60 taken has headroom %v, want 0.75", hr)
	}
	r := Unreported()
	r.Requests = 6
	if err := syncOnly(ctx, h.b, k2, r); err != nil {
		t.Fatal(err)
	}
	if hr := headroom(t, h.b, k2); hr < 0.09 || hr > 0.12 {
		t.Fatalf("an advisory key the provider says has 6 of 60 left has headroom %v, want 0.1", hr)
	}
	if err := h.b.Cool(ctx, k2, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, _ := mustTake(t, h.b, k2, Cost{Requests: 1}); ok {
		t.Fatal("a cooled advisory key admitted a take")
	}
}

// testTinyTakes: at 1G requests and 1T tokens a minute a request is worth
// 60 ns of the bucket and a token 0.06 ns; every tiny take counts, however
// far below a microsecond (or a nanosecond) it is. The bucket is half
// taken first, so that the real time a Redis run takes leaves its arrival
// times ahead of now, where they move only by takes.
func testTinyTakes(t *testing.T, h harness) {
	const n = 1000
	k := Key{ID: "p/tiny", Limits: minute(Limits{RPM: 1_000_000_000, InputTPM: 1_000_000_000_000})}
	if ok, _ := mustTake(t, h.b, k, Cost{Requests: 500_000_000, Input: 500_000_000_000}); !ok {
		t.Fatal("a full bucket refused half of itself")
	}
	req0, in0 := h.tat(t, k, dimRequests), h.tat(t, k, dimInput)
	for i := range n {
		if ok, _ := mustTake(t, h.b, k, Cost{Requests: 1, Input: 1}); !ok {
			t.Fatalf("a half-full bucket refused tiny take %d", i)
		}
	}
	for _, c := range []struct {
		name      string
		moved     float64
		want, tol float64 // ns
	}{
		{"requests", h.tat(t, k, dimRequests) - req0, n * 60, 0.1},
		{"input tokens", h.tat(t, k, dimInput) - in0, n * 0.06, 0.01},
	} {
		if math.Abs(c.moved-c.want) > c.tol {
			t.Errorf("%d takes of one unit moved the %s bucket by %.4f ns, want %.4f ns", n, c.name, c.moved, c.want)
		}
	}
}

// testTakeBatch: a batch take takes its costs in order, each as Take
// would, and stops at the first that has no room, even when a later one
// would fit; its wait is the refused cost's, and a cooled key takes none.
func testTakeBatch(t *testing.T, h harness) {
	ctx := context.Background()
	bt, ok := h.b.(BatchTaker)
	if !ok {
		t.Fatalf("%T is not a BatchTaker", h.b)
	}
	take := func(k Key, cs ...Cost) (int, time.Duration, float64) {
		t.Helper()
		n, wait, hr, err := bt.TakeBatch(ctx, k, cs)
		if err != nil {
			t.Fatalf("TakeBatch(%s, %v): %v", k.ID, cs, err)
		}
		if n < 0 || n > len(cs) || n == len(cs) && wait != 0 || n < len(cs) && (wait < minTakeWait || wait > MaxTakeWait) {
			t.Fatalf("TakeBatch(%s, %v) = %d, wait %s", k.ID, cs, n, wait)
		}
		return n, wait, hr
	}
	ten := Cost{Requests: 10, Input: 100}
	k := Key{ID: "p/batch", Limits: minute(Limits{RPM: 60, InputTPM: 600})}
	if n, _, hr := take(k, ten, ten); n != 2 || math.Abs(hr-headroom(t, h.b, k)) > 0.01 || hr < 0.6 || hr > 0.7 {
		t.Fatalf("two takes of 10 from 60: %d taken, headroom %v; want 2 and about 40/60", n, hr)
	}
	// 40 left: two more fit, 30 does not, and the 1 behind it waits.
	n, wait, hr := take(k, ten, ten, Cost{Requests: 30}, Cost{Requests: 1})
	if n != 2 {
		t.Fatalf("10, 10, 30 and 1 from 40 left: %d taken, want 2", n)
	}
	if wait < 5*time.Second || wait > 30*time.Second+100*time.Millisecond {
		t.Fatalf("30 requests with 20 left wait %s; 10 come back in 10s", wait)
	}
	if hr > 0.35 {
		t.Fatalf("headroom %v after 40 of 60, want about 20/60", hr)
	}
	if n := takeAll(t, h.b, k, ten, 2); n != 2 {
		t.Fatalf("after the batch, %d takes of 10 fit, want 2: the batch took what it said", n)
	}

	// A cost above the burst fits a full bucket, as a Take.
	big := Key{ID: "p/batch-big", Limits: minute(Limits{RPM: 60})}
	if n, _, _ := take(big, Cost{Requests: 100}, Cost{Requests: 1}); n != 1 {
		t.Fatalf("100 requests on a full 60 and 1 after: %d taken, want 1", n)
	}

	cooled := Key{ID: "p/batch-cooled", Limits: minute(Limits{RPM: 60})}
	if err := h.b.Cool(ctx, cooled, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, wait, hr := take(cooled, Cost{Requests: 1}); n != 0 || wait < 4*time.Second || hr != 0 {
		t.Fatalf("a cooled key took %d, wait %s, headroom %v; want 0, about 5s, 0", n, wait, hr)
	}

	free := Key{ID: "p/batch-free"}
	if n, _, hr := take(free, Cost{Requests: 1000}, Cost{Requests: 1000}); n != 2 || hr != 1 {
		t.Fatalf("a key without limits took %d with headroom %v, want 2 and 1", n, hr)
	}
}
