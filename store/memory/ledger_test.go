package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"gatekeeper/tenant"
)

// naiveBook is the ledger's arithmetic done the slow way, over everything
// kept: the oracle for the running totals and expiry queues.
type naiveBook struct {
	calls   map[string]held
	started map[string]time.Time
}

func (n *naiveBook) usage(now time.Time) (reserved tenant.Amount, inFlight, started int64, oldest time.Time) {
	for _, c := range n.calls {
		if now.Before(c.expires) && !c.settled {
			reserved = reserved.Add(c.r)
			inFlight++
		}
	}
	for _, at := range n.started {
		if now.Sub(at) < time.Hour {
			started++
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
	}
	return reserved, inFlight, started, oldest
}

// TestLedgerTotalsMatchNaive drives the ledger with random reserves,
// settles, run starts and clock steps, and checks every Usage against
// sums over everything kept.
func TestLedgerTotalsMatchNaive(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	l := NewLedger(func() time.Time { return now })
	n := &naiveBook{calls: map[string]held{}, started: map[string]time.Time{}}
	r := rand.New(rand.NewPCG(7, 11))
	lim := tenant.Limits{NewPerHour: 1 << 40}
	for step := range 20000 {
		call := fmt.Sprintf("c%d", r.IntN(400))
		switch op := r.IntN(10); {
		case op < 4:
			amt := tenant.Amount{Micros: int64(r.IntN(1000)), Tokens: int64(r.IntN(100))}
			ttl := time.Duration(1+r.IntN(120)) * time.Second
			if ok, err := l.Reserve(ctx, "t", call, amt, tenant.Limits{}, ttl); err != nil || !ok {
				t.Fatalf("step %d: Reserve = %v, %v", step, ok, err)
			}
			n.calls[call] = held{r: amt, expires: now.Add(ttl)}
		case op < 7:
			if err := l.Settle(ctx, "t", call, tenant.Amount{Micros: 1}); err != nil {
				t.Fatal(err)
			}
			if c, ok := n.calls[call]; !ok || !now.Before(c.expires) || !c.settled {
				n.calls[call] = held{settled: true, expires: now.Add(settledKept)}
			}
		case op < 8:
			id := fmt.Sprintf("run%d", r.IntN(300))
			if _, err := l.StartRun(ctx, "t", id, lim); err != nil {
				t.Fatal(err)
			}
			if at, ok := n.started[id]; !ok || now.Sub(at) >= time.Hour {
				n.started[id] = now
			}
		default:
			now = now.Add(time.Duration(r.IntN(90)) * time.Second)
		}
		u, err := l.Usage(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		res, inf, st, oldest := n.usage(now)
		if u.Reserved != res || u.InFlight != inf || u.Started != st || !u.OldestStart.Equal(oldest) {
			t.Fatalf("step %d: usage reserved %v in flight %d started %d oldest %v; the sums say %v %d %d %v",
				step, u.Reserved, u.InFlight, u.Started, u.OldestStart, res, inf, st, oldest)
		}
	}
}

// TestLedgerForgetsWhatExpired: a tenant that settled many calls and
// started many runs keeps none of them once their hour has passed, so
// what the ledger holds is bounded by the last hour's work.
func TestLedgerForgetsWhatExpired(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	l := NewLedger(func() time.Time { return now })
	lim := tenant.Limits{NewPerHour: 1 << 40}
	for i := range 10000 {
		call := fmt.Sprintf("c%d", i)
		if _, err := l.Reserve(ctx, "t", call, tenant.Amount{Micros: 5}, tenant.Limits{}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := l.Settle(ctx, "t", call, tenant.Amount{Micros: 5}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.StartRun(ctx, "t", fmt.Sprintf("r%d", i), lim); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(settledKept + time.Second)
	u, err := l.Usage(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	b := l.tenants["t"]
	if len(b.calls) != 0 || len(b.callsOut.h) != 0 || len(b.started) != 0 || len(b.startsOut.h) != 0 {
		t.Fatalf("after the hour: %d calls, %d queued, %d started, %d queued; want none",
			len(b.calls), len(b.callsOut.h), len(b.started), len(b.startsOut.h))
	}
	if u.Day().Micros != 50000 || u.InFlight != 0 || u.Reserved != (tenant.Amount{}) {
		t.Fatalf("usage after the hour = day %v, in flight %d, reserved %v", u.Day(), u.InFlight, u.Reserved)
	}
}
