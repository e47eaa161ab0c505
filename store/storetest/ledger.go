package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"gatekeeper/tenant"
)

// RunLedger runs the contract suite of tenant.Ledger. newLedger must
// return an empty ledger that no other test shares.
func RunLedger(t *testing.T, newLedger func(t *testing.T) tenant.Ledger) {
	tests := []struct {
		name string
		fn   func(t *testing.T, l tenant.Ledger)
	}{
		{"ReserveWithinCeilings", testReserveWithinCeilings},
		{"SettleCharges", testSettleCharges},
		{"SettleIdempotent", testSettleIdempotent},
		{"ReservationLapses", testReservationLapses},
		{"TenantsApart", testTenantsApart},
		{"ReserveConcurrent", testReserveConcurrent},
		{"ReserveConcurrentWeek", testReserveConcurrentWeek},
		{"WeekCountsSpend", testWeekCountsSpend},
		{"StartRunLive", testStartRunLive},
		{"StartRunPerHour", testStartRunPerHour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newLedger(t)) })
	}
}

func reserve(t *testing.T, l tenant.Ledger, name, call string, r tenant.Amount, lim tenant.Limits) bool {
	t.Helper()
	ok, err := l.Reserve(context.Background(), name, call, r, lim, time.Hour)
	if err != nil {
		t.Fatalf("Reserve(%s): %v", call, err)
	}
	return ok
}

func usage(t *testing.T, l tenant.Ledger, name string) tenant.Usage {
	t.Helper()
	u, err := l.Usage(context.Background(), name)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	return u
}

func testReserveWithinCeilings(t *testing.T, l tenant.Ledger) {
	cases := []struct {
		name string
		lim  tenant.Limits
		r    tenant.Amount
		fits int // how many reservations of r fit
	}{
		{"dollars a day", tenant.Limits{MicrosPerDay: 1000}, tenant.Amount{Micros: 300}, 3},
		{"dollars a month", tenant.Limits{MicrosPerMonth: 1000}, tenant.Amount{Micros: 500}, 2},
		{"tokens a day", tenant.Limits{TokensPerDay: 100}, tenant.Amount{Tokens: 40}, 2},
		{"dollars a week", tenant.Limits{MicrosPerWeek: 1000}, tenant.Amount{Micros: 300}, 3},
		{"week tighter than day and month", tenant.Limits{MicrosPerDay: 1000, MicrosPerWeek: 500, MicrosPerMonth: 1000}, tenant.Amount{Micros: 100}, 5},
		{"exactly the ceiling", tenant.Limits{MicrosPerDay: 900}, tenant.Amount{Micros: 300}, 3},
		{"tightest of several", tenant.Limits{MicrosPerDay: 1000, MicrosPerMonth: 400, TokensPerDay: 1000}, tenant.Amount{Micros: 100, Tokens: 100}, 4},
		{"none", tenant.Limits{}, tenant.Amount{Micros: 1e12, Tokens: 1e12}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "t-" + tc.name
			n := 0
			for i := range 10 {
				if !reserve(t, l, name, "call-"+string(rune('a'+i)), tc.r, tc.lim) {
					break
				}
				n++
			}
			if n != tc.fits {
				t.Fatalf("%d reservations held, want %d", n, tc.fits)
			}
			u := usage(t, l, name)
			if want := (tenant.Amount{Micros: tc.r.Micros * int64(n), Tokens: tc.r.Tokens * int64(n)}); u.Reserved != want || u.InFlight != int64(n) {
				t.Fatalf("reserved %+v in %d calls, want %+v in %d", u.Reserved, u.InFlight, want, n)
			}
		})
	}
}

func testSettleCharges(t *testing.T, l tenant.Ledger) {
	ctx := context.Background()
	lim := tenant.Limits{MicrosPerDay: 1000}
	if !reserve(t, l, "a", "c1", tenant.Amount{Micros: 800, Tokens: 80}, lim) {
		t.Fatal("first reservation refused")
	}
	if reserve(t, l, "a", "c2", tenant.Amount{Micros: 300}, lim) {
		t.Fatal("a reservation past the ceiling was held")
	}
	// The call cost less than its worst case: the rest is free again.
	if err := l.Settle(ctx, "a", "c1", tenant.Amount{Micros: 500, Tokens: 50}); err != nil {
		t.Fatal(err)
	}
	u := usage(t, l, "a")
	if u.Reserved != (tenant.Amount{}) || u.InFlight != 0 {
		t.Fatalf("after settle: reserved %+v in %d calls", u.Reserved, u.InFlight)
	}
	if got := u.Day(); got != (tenant.Amount{Micros: 500, Tokens: 50}) {
		t.Fatalf("day = %+v, want 500 micros 50 tokens", got)
	}
	if got := u.Month(); got != (tenant.Amount{Micros: 500, Tokens: 50}) {
		t.Fatalf("month = %+v", got)
	}
	if u.Now.IsZero() || time.Since(u.Now).Abs() > time.Hour {
		t.Fatalf("Now = %v", u.Now)
	}
	if !reserve(t, l, "a", "c2", tenant.Amount{Micros: 300}, lim) {
		t.Fatal("a reservation within what the settle freed was refused")
	}
	if reserve(t, l, "a", "c3", tenant.Amount{Micros: 300}, lim) {
		t.Fatal("spend plus reservations passed the ceiling")
	}
	// A charge without a reservation (a call that reserved nothing) counts.
	if err := l.Settle(ctx, "a", "", tenant.Amount{Micros: 7}); err != nil {
		t.Fatal(err)
	}
	if got := usage(t, l, "a").Day().Micros; got != 507 {
		t.Fatalf("day micros = %d, want 507", got)
	}
}

func testSettleIdempotent(t *testing.T, l tenant.Ledger) {
	ctx := context.Background()
	reserve(t, l, "a", "c1", tenant.Amount{Micros: 100}, tenant.Limits{MicrosPerDay: 1000})
	for range 3 {
		if err := l.Settle(ctx, "a", "c1", tenant.Amount{Micros: 90, Tokens: 9}); err != nil {
			t.Fatal(err)
		}
	}
	if got := usage(t, l, "a").Day(); got != (tenant.Amount{Micros: 90, Tokens: 9}) {
		t.Fatalf("day = %+v after three settles of one call, want it charged once", got)
	}
}

func testReservationLapses(t *testing.T, l tenant.Ledger) {
	ok, err := l.Reserve(context.Background(), "a", "lost", tenant.Amount{Micros: 1000}, tenant.Limits{MicrosPerDay: 1000}, time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("Reserve = %v, %v", ok, err)
	}
	// The call's replica is gone: its reservation must not hold the
	// tenant's room for ever.
	for i := 0; ; i++ {
		if usage(t, l, "a").InFlight == 0 {
			break
		}
		if i == 200 {
			t.Fatal("a reservation with a 1ms lifetime still holds after 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !reserve(t, l, "a", "next", tenant.Amount{Micros: 1000}, tenant.Limits{MicrosPerDay: 1000}) {
		t.Fatal("the lapsed reservation still counts")
	}
}

func testTenantsApart(t *testing.T, l tenant.Ledger) {
	ctx := context.Background()
	lim := tenant.Limits{MicrosPerDay: 100, MaxLive: 1}
	if err := l.Settle(ctx, "a", "c1", tenant.Amount{Micros: 100}); err != nil {
		t.Fatal(err)
	}
	if reserve(t, l, "a", "c2", tenant.Amount{Micros: 1}, lim) {
		t.Fatal("tenant a passed its ceiling")
	}
	if !reserve(t, l, "b", "c2", tenant.Amount{Micros: 100}, lim) {
		t.Fatal("tenant a's spend counted against tenant b")
	}
	for _, name := range []string{"a", "b"} {
		if st, err := l.StartRun(ctx, name, "run-42", lim); err != nil || st.Refused != "" {
			t.Fatalf("StartRun(%s) = %+v, %v", name, st, err)
		}
	}
}

func testReserveConcurrent(t *testing.T, l tenant.Ledger) {
	reserveConcurrent(t, l, tenant.Limits{MicrosPerDay: 25 * 40})
}

// testReserveConcurrentWeek: the week's ceiling holds under the same race.
func testReserveConcurrentWeek(t *testing.T, l tenant.Ledger) {
	reserveConcurrent(t, l, tenant.Limits{MicrosPerWeek: 25 * 40, MicrosPerMonth: 1e6})
}

// testWeekCountsSpend: what was charged counts against the week's
// ceiling, beside the calls in flight.
func testWeekCountsSpend(t *testing.T, l tenant.Ledger) {
	if err := l.Settle(context.Background(), "w", "c0", tenant.Amount{Micros: 600}); err != nil {
		t.Fatal(err)
	}
	lim := tenant.Limits{MicrosPerWeek: 1000}
	if !reserve(t, l, "w", "c1", tenant.Amount{Micros: 300}, lim) {
		t.Fatal("a reservation within the week's rest was refused")
	}
	if reserve(t, l, "w", "c2", tenant.Amount{Micros: 200}, lim) {
		t.Fatal("spend, calls in flight and a reservation passed the week's ceiling")
	}
	if got := usage(t, l, "w").Week(); got.Micros != 600 {
		t.Fatalf("week = %+v, want 600 micros", got)
	}
}

// reserveConcurrent races 8 workers reserving 40 micros each under lim,
// whose tightest ceiling affords exactly 25 of them.
func reserveConcurrent(t *testing.T, l tenant.Ledger, lim tenant.Limits) {
	const workers, each = 8, 10
	var mu sync.Mutex
	held := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ok, err := l.Reserve(context.Background(), "a", "w"+string(rune('a'+w))+string(rune('a'+i)), tenant.Amount{Micros: 40}, lim, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					held++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if held != 25 {
		t.Fatalf("%d reservations of 40 held under a ceiling of 1000, want exactly 25", held)
	}
}

func testStartRunLive(t *testing.T, l tenant.Ledger) {
	ctx := context.Background()
	lim := tenant.Limits{MaxLive: 2}
	start := func(id string) string {
		t.Helper()
		st, err := l.StartRun(ctx, "a", id, lim)
		if err != nil {
			t.Fatal(err)
		}
		return st.Refused
	}
	for _, id := range []string{"r1", "r2", "r1"} {
		if got := start(id); got != "" {
			t.Fatalf("StartRun(%s) refused: %s", id, got)
		}
	}
	if got := start("r3"); got != tenant.LimitLive {
		t.Fatalf("third live run: refused %q, want %q", got, tenant.LimitLive)
	}
	live, err := l.LiveRuns(ctx, "a")
	if err != nil || !slices.Equal(live, []string{"r1", "r2"}) {
		t.Fatalf("LiveRuns = %v, %v", live, err)
	}
	if err := l.EndRuns(ctx, "a", "r1"); err != nil {
		t.Fatal(err)
	}
	if got := start("r3"); got != "" {
		t.Fatalf("after a run ended: refused %q", got)
	}
	if u := usage(t, l, "a"); u.Live != 2 {
		t.Fatalf("Live = %d, want 2", u.Live)
	}
}

func testStartRunPerHour(t *testing.T, l tenant.Ledger) {
	ctx := context.Background()
	lim := tenant.Limits{NewPerHour: 2}
	for _, id := range []string{"r1", "r2", "r2"} {
		if st, err := l.StartRun(ctx, "a", id, lim); err != nil || st.Refused != "" {
			t.Fatalf("StartRun(%s) = %+v, %v", id, st, err)
		}
	}
	u := usage(t, l, "a")
	st, err := l.StartRun(ctx, "a", "r3", lim)
	if err != nil || st.Refused != tenant.LimitNewPerHour {
		t.Fatalf("third run in an hour: %+v, %v", st, err)
	}
	if u.Started != 2 || u.OldestStart.IsZero() || !st.Retry.Equal(u.OldestStart.Add(time.Hour)) {
		t.Fatalf("started %d, first at %v; retry at %v, want an hour after the first", u.Started, u.OldestStart, st.Retry)
	}
	// Ending runs does not give back the hour's starts.
	if err := l.EndRuns(ctx, "a", "r1", "r2"); err != nil {
		t.Fatal(err)
	}
	if st, _ := l.StartRun(ctx, "a", "r3", lim); st.Refused != tenant.LimitNewPerHour {
		t.Fatalf("after EndRuns: %+v", st)
	}
}
