package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
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
