package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/tenant"
)

// TestLedgerKeepsOnlyCallsInFlight: settled calls leave the hash that
// every ledger script reads, so that a turn's reserve and settle do not
// cost more for the calls settled before it; each is remembered by a
// key of its own that expires, and a lapsed reservation leaves the hash
// and its sums in the next script.
func TestLedgerKeepsOnlyCallsInFlight(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	l := open(t, url, Options{}).Ledger()
	rdb := client(t, url)
	keys := ledgerKeys("busy")
	const calls = 500
	for i := range calls {
		call := fmt.Sprintf("c%d", i)
		if ok, err := l.Reserve(ctx, "busy", call, tenant.Amount{Micros: 10, Tokens: 1}, tenant.Limits{}, time.Minute); err != nil || !ok {
			t.Fatalf("Reserve %s = %v, %v", call, ok, err)
		}
		if err := l.Settle(ctx, "busy", call, tenant.Amount{Micros: 7, Tokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.HLen(ctx, keys[1]).Val(); n != 3 {
		t.Errorf("the calls hash holds %d fields after %d settled calls; want only its 3 sums", n, calls)
	}
	if n := rdb.ZCard(ctx, keys[2]).Val(); n != 0 {
		t.Errorf("%d lapses queued after every call settled; want 0", n)
	}
	ttl := rdb.PTTL(ctx, settledKey("busy", "c7")).Val()
	if ttl <= 0 || ttl > settledKeptMs*time.Millisecond {
		t.Errorf("a settled call's mark expires in %v; want within %v", ttl, settledKeptMs*time.Millisecond)
	}
	// A repeated settle changes nothing; a lapsed reservation leaves.
	if err := l.Settle(ctx, "busy", "c7", tenant.Amount{Micros: 1000}); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Reserve(ctx, "busy", "lapsing", tenant.Amount{Micros: 99, Tokens: 9}, tenant.Limits{}, time.Millisecond); err != nil || !ok {
		t.Fatalf("Reserve = %v, %v", ok, err)
	}
	time.Sleep(20 * time.Millisecond)
	u, err := l.Usage(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if u.Day().Micros != 7*calls || u.InFlight != 0 || u.Reserved != (tenant.Amount{}) {
		t.Errorf("usage = day %v, in flight %d, reserved %v; want day %d micros and nothing held", u.Day(), u.InFlight, u.Reserved, 7*calls)
	}
	if n := rdb.HLen(ctx, keys[1]).Val(); n != 3 {
		t.Errorf("the calls hash holds %d fields after the lapse; want its 3 sums", n)
	}
}

// TestLedgerSumsFollowTheWindows: a reserve weighs the windows' sums,
// not their buckets, so the sums must be what the buckets say. A hash
// written before the sums were kept is counted at its first script, and
// buckets that left a window leave its sum at the hourly sweep.
func TestLedgerSumsFollowTheWindows(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	l := open(t, url, Options{}).Ledger()
	rdb := client(t, url)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	hour, day := now.Unix()/3600, now.Unix()/86400
	spend := ledgerKeys("old")[0]
	bucket := func(kind string, idx int64, what string) string { return fmt.Sprintf("%s:%d:%s", kind, idx, what) }
	// Two hours ago 900 micros (in the day and the month); thirty hours
	// ago 5,000 (in the month only); forty days ago 100,000 (in neither).
	// No sums, and swept this hour: as a hash kept before the sums.
	if err := rdb.HSet(ctx, spend,
		bucket("h", hour-2, "m"), 900, bucket("h", hour-2, "t"), 9,
		bucket("d", day, "m"), 900, bucket("d", day, "t"), 9,
		bucket("h", hour-30, "m"), 5000, bucket("d", day-1, "m"), 5000,
		bucket("d", day-40, "m"), 100000,
		"swept", fmt.Sprint(hour)).Err(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		r    tenant.Amount
		lim  tenant.Limits
		want bool
	}{
		{"the day's last 100 micros", tenant.Amount{Micros: 100}, tenant.Limits{MicrosPerDay: 1000}, true},
		{"one micro past the day", tenant.Amount{Micros: 101}, tenant.Limits{MicrosPerDay: 1000}, false},
		{"the day's last 91 tokens", tenant.Amount{Tokens: 91}, tenant.Limits{TokensPerDay: 100}, true},
		{"one token past the day", tenant.Amount{Tokens: 92}, tenant.Limits{TokensPerDay: 100}, false},
		{"the month's last 100 micros", tenant.Amount{Micros: 100}, tenant.Limits{MicrosPerMonth: 6000}, true},
		{"one micro past the month", tenant.Amount{Micros: 101}, tenant.Limits{MicrosPerMonth: 6000}, false},
	}
	for i, tc := range cases {
		call := fmt.Sprintf("c%d", i)
		ok, err := l.Reserve(ctx, "old", call, tc.r, tc.lim, time.Minute)
		if err != nil || ok != tc.want {
			t.Errorf("%s: Reserve = %v, %v; want %v", tc.name, ok, err, tc.want)
		}
		if ok {
			if err := l.Settle(ctx, "old", call, tenant.Amount{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rdb.HExists(ctx, spend, bucket("d", day-40, "m")).Val() || rdb.HExists(ctx, spend, bucket("h", hour-30, "m")).Val() {
		t.Error("buckets outside the windows were kept")
	}
	// A settle raises the sums with the buckets.
	if err := l.Settle(ctx, "old", "spent", tenant.Amount{Micros: 50, Tokens: 5}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := l.Reserve(ctx, "old", "after", tenant.Amount{Micros: 51}, tenant.Limits{MicrosPerDay: 1000}, time.Minute); ok {
		t.Error("a reserve past the day after a settle was taken: the settle did not raise the day's sum")
	}
	// An hour on: what was spent thirty hours ago has left the day, and
	// its day-old bucket stays in the month. Swept an hour ago, the next
	// script sweeps and counts the sums again from the buckets left.
	if err := rdb.HSet(ctx, spend, bucket("h", hour-25, "m"), 700, "=hm", 99999, "swept", fmt.Sprint(hour-1)).Err(); err != nil {
		t.Fatal(err)
	}
	u, err := l.Usage(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(ctx, spend, "=hm").Val(); got != fmt.Sprint(u.Day().Micros) || u.Day().Micros != 950 {
		t.Errorf("after the sweep the day's sum is %s and its buckets %d; want both 950", got, u.Day().Micros)
	}
	if got := rdb.HGet(ctx, spend, "=dm").Val(); got != fmt.Sprint(u.Month().Micros) || u.Month().Micros != 5950 {
		t.Errorf("after the sweep the month's sum is %s and its buckets %d; want both 5950", got, u.Month().Micros)
	}
}
