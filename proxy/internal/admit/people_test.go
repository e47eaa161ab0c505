package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/spendlimit"
	"gatekeeper/store/memory"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// TestPersonReserveConcurrent: many calls of one person at once, each
// asking for more than the person's daily cap affords, never reserve
// past it together: each is clamped to what is left when it reserves, and
// once too little is left they are refused. Another person's book is
// untouched.
func TestPersonReserveConcurrent(t *testing.T) {
	const capMicros = 200_000 // $0.20
	ledger := memory.NewLedger(fixedNow)
	id := config.Identity{Limits: []config.PersonLimit{{Scope: config.LimitScope{Default: true}, Dollars: 0.2, Period: config.PeriodDaily}}}
	c := &Ceilings{Ledger: ledger, MinOutput: 64, Log: slog.New(slog.DiscardHandler), People: NewPersonLimits(id, nil, fixedNow)}
	tn := &config.Tenant{Name: "team-a"}
	ada := &trajectory.Person{Subject: "ada", Email: "ada@example.com"}
	w := meter.DefaultTable().Worst("claude-sonnet-4-5", 4000)
	const calls = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held, clamped, refused int
	var total int64
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The calls that wait for others' to settle give up soon: none
			// settles here.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			h, err := c.Reserve(ctx, tn, Call{ID: fmt.Sprintf("c%d", i), Worst: w, MaxOut: 8000, Person: ada})
			mu.Lock()
			defer mu.Unlock()
			var r *Refusal
			switch {
			case errors.As(err, &r) && (r.Kind == Exhausted || r.Kind == Contended || errors.Is(err, context.DeadlineExceeded)):
				refused++
				return
			case err != nil:
				t.Error(err)
				return
			}
			held++
			out := int64(8000)
			if h.MaxOut > 0 {
				clamped++
				out = h.MaxOut
			}
			total += w.Reservation(out).Micros
		}()
	}
	wg.Wait()
	u, err := ledger.Usage(context.Background(), spendlimit.Book(ada))
	if err != nil {
		t.Fatal(err)
	}
	if u.Reserved.Micros != total || total > capMicros || u.InFlight != int64(held) {
		t.Fatalf("%d calls hold %d micros (ledger: %d in %d calls), cap %d", held, total, u.Reserved.Micros, u.InFlight, capMicros)
	}
	if held == 0 || refused == 0 || clamped == 0 {
		t.Fatalf("held %d, clamped %d, refused %d: the race shows nothing", held, clamped, refused)
	}
	if o, _ := ledger.Usage(context.Background(), spendlimit.Book(&trajectory.Person{Subject: "grace"})); o.Reserved != (tenant.Amount{}) {
		t.Fatalf("another person's book holds %+v", o.Reserved)
	}
}
